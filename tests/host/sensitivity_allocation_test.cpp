// Per-layer sparsities from a sensitivity table: what each layer tolerates within the threshold,
// scaled to the overall target exactly, capped layers' shares moved to the others, and the
// errors that name the option.
#include "lithe/host/pipeline/sensitivity_allocation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

SensitivityResult table() {
  SensitivityResult r;
  r.original = 0.90;
  r.sparsities = {0.2, 0.4, 0.6, 0.8};
  r.rows = {{"a", {{0.2, 0.90}, {0.4, 0.89}, {0.6, 0.84}, {0.8, 0.70}}},   // tolerates 0.4
            {"b", {{0.2, 0.90}, {0.4, 0.90}, {0.6, 0.88}, {0.8, 0.86}}},   // tolerates 0.8
            {"c", {{0.2, 0.80}}}};                                         // stopped: none
  return r;
}

double overall(const std::vector<LayerAllocation>& a) {
  double pruned = 0;
  double total = 0;
  for (const LayerAllocation& l : a) {
    pruned += l.sparsity * static_cast<double>(l.weights);
    total += static_cast<double>(l.weights);
  }
  return pruned / total;
}

TEST(SensitivityAllocationTest, ProportionalToWhatEachLayerToleratesAndExactlyTheTarget) {
  const std::map<std::string, int64_t> weights = {{"a", 1000}, {"b", 1000}, {"c", 2000}};
  AllocationOptions o;
  o.target = 0.25;
  const std::vector<LayerAllocation> a = allocate_sparsities(table(), weights, o);
  ASSERT_EQ(a.size(), 3U);
  EXPECT_DOUBLE_EQ(a[0].tolerated, 0.4);  // 0.84 at 0.6 is more than 0.05 below 0.90
  EXPECT_DOUBLE_EQ(a[1].tolerated, 0.8);
  EXPECT_DOUBLE_EQ(a[2].tolerated, 0.0);
  EXPECT_DOUBLE_EQ(a[2].sparsity, 0.0);   // tolerates nothing: kept whole
  EXPECT_DOUBLE_EQ(a[1].sparsity, 2 * a[0].sparsity);
  EXPECT_NEAR(overall(a), 0.25, 1e-12);
}

TEST(SensitivityAllocationTest, ALayerPastTheCapGivesItsShareToTheOthers) {
  const std::map<std::string, int64_t> weights = {{"a", 1000}, {"b", 1000}, {"c", 2000}};
  AllocationOptions o;
  o.target = 0.4;  // proportional would give b 1.07 and a 0.53
  o.max_sparsity = 0.9;
  const std::vector<LayerAllocation> a = allocate_sparsities(table(), weights, o);
  EXPECT_DOUBLE_EQ(a[1].sparsity, 0.9);
  EXPECT_NEAR(a[0].sparsity, 1600.0 / 1000 - 0.9, 1e-12);  // 0.4 · 4000 − 900, over a's 1000
  EXPECT_NEAR(overall(a), 0.4, 1e-12);
}

TEST(SensitivityAllocationTest, ErrorsNameTheOptionAndTheValue) {
  const std::map<std::string, int64_t> weights = {{"a", 1000}, {"b", 1000}, {"c", 2000}};
  AllocationOptions o;
  o.target = 0.5;  // a and b at 0.95 hold 0.475 of the weights
  EXPECT_THAT([&] { allocate_sparsities(table(), weights, o); },
              ThrowsMessage<sdk::Error>(HasSubstr("`target` 0.5 cannot be reached")));
  o.target = 1.0;
  EXPECT_THAT([&] { check_allocation_options(o); },
              ThrowsMessage<FieldError>(HasSubstr("`target` must be in (0, 1), got 1")));
  o.target = 0.2;
  o.threshold = -1;
  EXPECT_THAT([&] { check_allocation_options(o); },
              ThrowsMessage<sdk::Error>(HasSubstr("`threshold` must be >= 0, got -1")));
  o.threshold = 0.0;
  SensitivityResult none = table();
  none.rows.pop_back();
  for (SensitivityRow& row : none.rows) {
    row.metrics = {{0.2, 0.5}};
  }
  EXPECT_THAT([&] { allocate_sparsities(none, weights, o); },
              ThrowsMessage<sdk::Error>(HasSubstr("no layer keeps the metric within")));
  EXPECT_THAT([&] { allocate_sparsities(table(), {{"a", 10}}, o); },
              ThrowsMessage<sdk::Error>(HasSubstr("layer 'b' of the sensitivity table has no "
                                                  "weight count")));
}

}  // namespace
}  // namespace lithe::host
