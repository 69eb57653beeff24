// select_global and read_global_sparsity (SDK 1.6): exactly `count` units across layers, never
// more than a layer's cap, the globally smallest scores first, ties to the earlier layer and the
// lower index; entries take either sparsity or total_sparsity, each checked with its path.
#include "lithe/sdk/global_sparsity.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::sdk {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::vector<int64_t> pruned_indices(const at::Tensor& pruned) {
  std::vector<int64_t> out;
  const at::Tensor flat = pruned.reshape({-1});
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (flat[i].item<bool>()) {
      out.push_back(i);
    }
  }
  return out;
}

TEST(SelectGlobalTest, TakesTheSmallestScoresWhereverTheyAreUpToEachLayersCap) {
  // Layer 0 holds the four smallest scores, but may lose only 2; layer 1 then gives the rest.
  const std::vector<at::Tensor> scores = {at::tensor({0.1, 0.2, 0.3, 0.4, 9.0}),
                                          at::tensor({5.0, 1.0, 7.0, 2.0, 6.0, 3.0})};
  const auto pruned = select_global(scores, {2, 6}, 5);
  EXPECT_EQ(pruned_indices(pruned[0]), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(pruned_indices(pruned[1]), (std::vector<int64_t>{1, 3, 5}));  // 1, 2, 3
  // Without the cap the four smallest of layer 0 go first.
  const auto uncapped = select_global(scores, {5, 6}, 5);
  EXPECT_EQ(pruned_indices(uncapped[0]), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(pruned_indices(uncapped[1]), (std::vector<int64_t>{1}));
}

TEST(SelectGlobalTest, TiesGoToTheEarlierLayerThenTheLowerIndexAndShapesAreKept) {
  const std::vector<at::Tensor> scores = {at::full({2, 2}, 1.0), at::full({3}, 1.0)};
  const auto pruned = select_global(scores, {4, 3}, 5);
  EXPECT_EQ(pruned[0].sizes(), at::IntArrayRef({2, 2}));
  EXPECT_EQ(pruned_indices(pruned[0]), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(pruned_indices(pruned[1]), (std::vector<int64_t>{0}));
  // NaN ranks after every number.
  const auto with_nan = select_global({at::tensor({NAN, 2.0, 1.0})}, {3}, 2);
  EXPECT_EQ(pruned_indices(with_nan[0]), (std::vector<int64_t>{1, 2}));
}

TEST(SelectGlobalTest, RandomScoresAreCutAtOneGlobalThreshold) {
  at::manual_seed(5);
  const std::vector<at::Tensor> scores = {at::rand({300}), at::rand({40, 5}), at::rand({17})};
  const auto pruned = select_global(scores, {300, 200, 17}, 258);
  int64_t total = 0;
  double worst_pruned = -1;
  double best_kept = 2;
  for (size_t l = 0; l < scores.size(); ++l) {
    total += pruned[l].sum().item<int64_t>();
    if (pruned[l].any().item<bool>()) {
      worst_pruned = std::max(worst_pruned, scores[l].masked_select(pruned[l]).max().item<double>());
    }
    best_kept = std::min(best_kept,
                         scores[l].masked_select(pruned[l].logical_not()).min().item<double>());
  }
  EXPECT_EQ(total, 258);
  EXPECT_LT(worst_pruned, best_kept);
}

TEST(SelectGlobalTest, CapsThatCannotHoldTheCountAreAnError) {
  EXPECT_THAT([] { select_global({at::rand({10}), at::rand({10})}, {3, 4}, 8); },
              ThrowsMessage<Error>(HasSubstr("pruning 8 units across the entry's layers needs "
                                             "more than max_sparsity_per_layer allows: the "
                                             "layers' caps add up to 7 units")));
}

Options entry(const nlohmann::ordered_json& json) {
  return options_from_json(json, "/config_list/3");
}

TEST(ReadGlobalSparsityTest, ExactlyOneOfSparsityAndTotalSparsity) {
  EXPECT_FALSE(read_global_sparsity(entry({{"sparsity", 0.5}})).has_value());
  const auto global = read_global_sparsity(entry({{"total_sparsity", 0.5}}));
  ASSERT_TRUE(global.has_value());
  EXPECT_EQ(global->total, 0.5);
  EXPECT_EQ(global->max_per_layer, 1.0);
  EXPECT_EQ(read_global_sparsity(entry({{"total_sparsity", 0.4}, {"max_sparsity_per_layer", 0.9}}))
                ->max_per_layer,
            0.9);
  EXPECT_THAT([] { read_global_sparsity(entry({{"sparsity", 0.5}, {"total_sparsity", 0.5}})); },
              ThrowsMessage<Error>(HasSubstr("/config_list/3: give either \"sparsity\"")));
  EXPECT_THAT([] { read_global_sparsity(entry({{"op_types", {"Linear"}}})); },
              ThrowsMessage<Error>(HasSubstr("/config_list/3: missing required key 'sparsity' "
                                             "(keys present: 'op_types'); or give "
                                             "\"total_sparsity\"")));
  EXPECT_THAT([] { read_global_sparsity(entry({{"sparsty", 0.5}})); },
              ThrowsMessage<Error>(HasSubstr("did you mean 'sparsity'?")));
  EXPECT_THAT([] { read_global_sparsity(entry({{"sparsity", 0.5}, {"max_sparsity_per_layer", 1}})); },
              ThrowsMessage<Error>(HasSubstr("/config_list/3/max_sparsity_per_layer: only with "
                                             "\"total_sparsity\"")));
  EXPECT_THAT([] { read_global_sparsity(entry({{"total_sparsity", 1.0}})); },
              ThrowsMessage<Error>(HasSubstr("/config_list/3/total_sparsity must be a number in "
                                             "[0, 1), got 1")));
  EXPECT_THAT(
      [] { read_global_sparsity(entry({{"total_sparsity", 0.5}, {"max_sparsity_per_layer", 0}})); },
      ThrowsMessage<Error>(HasSubstr("/config_list/3/max_sparsity_per_layer must be a number in "
                                     "(0, 1], got 0")));
}

}  // namespace
}  // namespace lithe::sdk
