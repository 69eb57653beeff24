// The search pruners' shared target (SDK 1.10): a budget read from the options (one key, in
// (0, 1]), entries checked against it (no sparsity with a budget, one without), the budget's
// ratio of a measured cost, NNI's base_algo names, and the bisection that finds the least
// pruning that fits.
#include "lithe/sdk/search_target.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::sdk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

Options options(const char* json, const std::string& path = "/options") {
  return options_from_json(nlohmann::ordered_json::parse(json), path);
}

TEST(CostBudgetTest, ReadsOneBudgetAndMeasuresItsShareOfTheCost) {
  EXPECT_FALSE(read_cost_budget(options(R"({"seed": 1})")).has_value());
  const std::optional<CostBudget> flops = read_cost_budget(options(R"({"flops_budget": 0.5})"));
  ASSERT_TRUE(flops.has_value());
  EXPECT_EQ(flops->kind, CostBudget::Kind::kFlops);
  EXPECT_STREQ(flops->key(), "flops_budget");
  const ModelCost cost{400, 90, 1000, 100};
  EXPECT_DOUBLE_EQ(flops->ratio(cost), 0.4);
  EXPECT_TRUE(flops->fits(cost));
  const std::optional<CostBudget> params = read_cost_budget(options(R"({"params_budget": 0.5})"));
  ASSERT_TRUE(params.has_value());
  EXPECT_STREQ(params->key(), "params_budget");
  EXPECT_DOUBLE_EQ(params->ratio(cost), 0.9);
  EXPECT_FALSE(params->fits(cost));
  EXPECT_DOUBLE_EQ(params->ratio(ModelCost{}), 1.0);  // nothing counted: no share to give

  EXPECT_THAT([] { (void)read_cost_budget(options(R"({"flops_budget": 0.5,
                                                       "params_budget": 0.5})")); },
              ThrowsMessage<Error>(AllOf(HasSubstr("/options"), HasSubstr("got both"))));
  EXPECT_THAT([] { (void)read_cost_budget(options(R"({"flops_budget": 0})")); },
              ThrowsMessage<Error>(AllOf(HasSubstr("/options/flops_budget must be"),
                                         HasSubstr("got 0"))));
  EXPECT_THAT([] { (void)read_cost_budget(options(R"({"params_budget": 1.5})")); },
              ThrowsMessage<Error>(HasSubstr("got 1.5")));
}

TEST(CostBudgetTest, EntriesGiveASparsityOrLeaveItToTheBudget) {
  const CostBudget budget{CostBudget::Kind::kFlops, 0.5};
  const Options bare = options(R"({"op_types": ["Conv2d"]})", "/config_list/0");
  const Options with = options(R"({"sparsity": 0.3})", "/config_list/1");
  EXPECT_NO_THROW(check_search_entry(bare, budget, "net_adapt"));
  EXPECT_NO_THROW(check_search_entry(with, std::nullopt, "net_adapt"));
  EXPECT_THAT([&] { check_search_entry(with, budget, "net_adapt"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("/config_list/1/sparsity"),
                                         HasSubstr("flops_budget (0.5)"),
                                         HasSubstr("net_adapt"))));
  EXPECT_THAT([&] { check_search_entry(bare, std::nullopt, "net_adapt"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("/config_list/0"),
                                         HasSubstr("needs an overall `sparsity`"))));
  EXPECT_THAT([] {
    check_search_entry(options(R"({"sparsity": 1.0})", "/config_list/2"), std::nullopt, "sa");
  }, ThrowsMessage<Error>(AllOf(HasSubstr("/config_list/2/sparsity"), HasSubstr("got 1"))));
}

TEST(CostBudgetTest, ABudgetTheMostPruningMissesIsRefusedWithWhatItReached) {
  const CostBudget budget{CostBudget::Kind::kFlops, 0.2};
  EXPECT_NO_THROW(check_budget_reachable(budget, ModelCost{150, 0, 1000, 0}, 0.99, "sa"));
  EXPECT_THAT([&] { check_budget_reachable(budget, ModelCost{250, 0, 1000, 0}, 0.99, "sa"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("sa: flops_budget 0.2 cannot be reached"),
                                         HasSubstr("at sparsity 0.99"),
                                         HasSubstr("keeps 0.25 of it"))));
}

TEST(CostBudgetTest, NnisBaseAlgoNamesAreLithesMaskers) {
  EXPECT_EQ(base_algo_masker("l1"), "l1_filter");
  EXPECT_EQ(base_algo_masker("l2"), "l2_filter");
  EXPECT_EQ(base_algo_masker("level"), "level");
  EXPECT_EQ(base_algo_masker("fpgm"), "fpgm");
}

TEST(CostBudgetTest, BisectionFindsTheLeastThatFitsWithoutAskingTheLowEnd) {
  std::vector<double> asked;
  const double x = smallest_fitting(0.0, 1.0, 10, [&](double v) {
    asked.push_back(v);
    return v >= 0.3;
  });
  EXPECT_GE(x, 0.3);
  EXPECT_LT(x, 0.3 + 1.0 / 1024 + 1e-12);
  EXPECT_EQ(asked.size(), 10U);
  for (const double v : asked) {
    EXPECT_GT(v, 0.0);
  }
  // Nothing below `high` fits: high itself.
  EXPECT_EQ(smallest_fitting(0.2, 0.8, 6, [](double v) { return v >= 0.8; }), 0.8);
}

}  // namespace
}  // namespace lithe::sdk
