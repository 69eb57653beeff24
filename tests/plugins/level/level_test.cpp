#include "plugins/level/level.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/conformance_models.h"

namespace lithe::plugins::level {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

sdk::Options config(double sparsity) {
  return sdk::options_from_json(
      nlohmann::ordered_json{{"sparsity", sparsity}, {"op_types", {"Linear"}}}, "/config_list/0");
}

class LevelPrunerTest : public ::testing::TestWithParam<double> {
 protected:
  LevelPrunerTest() { register_algorithms(registry_); }
  host::PluginRegistry registry_;
};

TEST_P(LevelPrunerTest, PrunesExactlyTargetFractionOfDistinctWeights) {
  const double sparsity = GetParam();
  at::manual_seed(0);
  // Distinct magnitudes 1..2048 in random order and signs: no ties, so NNI agrees exactly.
  const at::Tensor weight =
      ((at::randperm(2048, at::kFloat) + 1) * (at::randint(0, 2, {2048}) * 2 - 1))
          .reshape({64, 32});
  auto pruner = registry_.make_pruner("level", sdk::Options());
  sdk::LayerView layer(0, "fc", "Linear", weight, at::zeros({64}), config(sparsity));
  const std::optional<sdk::Masks> masks = pruner->calc_mask(layer);
  ASSERT_TRUE(masks.has_value());
  const auto expected = static_cast<int64_t>(sparsity * 2048.0);
  EXPECT_EQ(masks->weight.eq(0).sum().item<int64_t>(), expected);
  EXPECT_FALSE(masks->bias.has_value()) << "level keeps the current bias mask";
  if (expected > 0) {
    const at::Tensor kept = weight.abs().masked_select(masks->weight.ne(0));
    const at::Tensor pruned = weight.abs().masked_select(masks->weight.eq(0));
    EXPECT_GT(kept.min().item<float>(), pruned.max().item<float>());
  }
  EXPECT_FALSE(pruner->calc_mask(layer).has_value()) << "one-shot: computed once";
}

INSTANTIATE_TEST_SUITE_P(Sparsities, LevelPrunerTest, ::testing::Values(0.0, 0.3, 0.5, 0.82, 0.9));

TEST(LevelMaskerTest, TiesAtTheThresholdAreBrokenByLowerIndex) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  auto masker = registry.make_masker("level", sdk::Options());
  // |w| = 1,2,2,2,2,3: k=3 prunes the 1 and the first two 2s (indices 1 and 2).
  const at::Tensor weight = at::tensor({1.f, -2.f, 2.f, 2.f, -2.f, 3.f});
  sdk::LayerView layer(0, "fc", "Linear", weight, std::nullopt, config(0.5));
  const auto masks = masker->calc_mask(layer, 0.5);
  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(masks->weight.equal(at::tensor({0.f, 0.f, 0.f, 1.f, 1.f, 1.f})));
}

TEST(LevelMaskerTest, AlreadyPrunedWeightsCountAmongTheSmallest) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  auto masker = registry.make_masker("level", sdk::Options());
  const at::Tensor weight = at::tensor({9.f, 8.f, 1.f, 2.f});
  sdk::LayerView layer(0, "fc", "Linear", weight, std::nullopt, config(0.5));
  sdk::Masks previous;
  previous.weight = at::tensor({0.f, 1.f, 1.f, 1.f});  // 9 pruned earlier (e.g. by a schedule)
  layer.set_masks(previous);
  const auto masks = masker->calc_mask(layer, 0.5);
  EXPECT_TRUE(masks->weight.equal(at::tensor({0.f, 1.f, 0.f, 1.f})));
}

TEST(LevelMaskerTest, ZeroPruneCountGivesAllOnes) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  auto masker = registry.make_masker("level", sdk::Options());
  const at::Tensor weight = at::randn({6, 1, 5, 5});
  sdk::LayerView layer(0, "conv1", "Conv2d", weight, std::nullopt, config(0.006));
  const auto masks = masker->calc_mask(layer, 0.006);  // int(150 * 0.006) == 0
  EXPECT_TRUE(masks->weight.eq(1).all().item<bool>());
}

TEST(LevelPrunerConfigTest, RejectsSparsityOutsideHalfOpenUnitInterval) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  auto pruner = registry.make_pruner("level", sdk::Options());
  for (double bad : {1.0, -0.1, 1.5}) {
    EXPECT_THAT([&] { pruner->validate_config(config(bad)); },
                ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/sparsity must be a number in [0, 1)")));
  }
  EXPECT_NO_THROW(pruner->validate_config(config(0.0)));
}

TEST(LevelPrunerConfigTest, RegistersMaskerAndPrunerUnderTheNameUsersType) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  EXPECT_NE(registry.find(host::AlgorithmKind::kPruner, "level"), nullptr);
  EXPECT_NE(registry.find(host::AlgorithmKind::kMasker, "level"), nullptr);
  EXPECT_THAT([&] { register_algorithms(registry); },
              ThrowsMessage<sdk::Error>(HasSubstr("duplicate masker 'level'")));
}

}  // namespace
}  // namespace lithe::plugins::level

namespace lithe::plugins::level {
namespace {

TEST(LevelMaskerTest, AlreadyPrunedWeightsGoFirstEvenAgainstLiveZeros) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  auto masker = registry.make_masker("level", sdk::Options());
  // Entries 0 and 1 are live weights that are exactly 0; entry 3 was pruned before (zeroed in
  // place). At k = 2, ranking |w · mask| would pick entries 0 and 1 by position and revive 3;
  // Lithe keeps 3 pruned and adds entry 0.
  sdk::LayerView layer(0, "fc", "Linear", at::tensor({0.f, 0.f, 4.f, 0.f, 3.f, 6.f}),
                       std::nullopt, config(0.5));
  sdk::Masks previous;
  previous.weight = at::tensor({1.f, 1.f, 1.f, 0.f, 1.f, 1.f});
  layer.set_masks(previous);
  const auto grown = masker->calc_mask(layer, 2.0 / 6.0 + 1e-9);
  ASSERT_TRUE(grown.has_value());
  EXPECT_TRUE(grown->weight.equal(at::tensor({0.f, 1.f, 1.f, 0.f, 1.f, 1.f})));
  const auto more = masker->calc_mask(layer, 0.5);  // k = 3: then the other live zero
  EXPECT_TRUE(more->weight.equal(at::tensor({0.f, 0.f, 1.f, 0.f, 1.f, 1.f})));
}

// total_sparsity on a real model: one |w| ranking across conv1..conv3 and fc1 of the VGG
// conformance net (26,032 weights), with conv3's weights shrunk so that it alone would take the
// whole budget (0.7: 18,222 weights, conv3's cap 16,588): it stops at its cap and the rest is
// cut at one threshold across the other layers.
TEST(LevelGlobalSparsityTest, ExactlyTheTotalFractionGoesAndEveryCapHolds) {
  torch::jit::Module module = test::load_conformance_model("vgg_bn");
  {
    at::NoGradGuard no_grad;
    module.attr("conv3").toModule().attr("weight").toTensor().mul_(1e-4);
  }
  const std::unique_ptr<host::Model> model = host::make_torchscript_model(module);
  std::map<std::string, at::Tensor> magnitude;  // before the session zeroes pruned weights
  for (const char* name : {"conv1", "conv2", "conv3", "fc1"}) {
    magnitude[name] = model->find_module(name)->weight->detach().abs().clone();
  }
  host::PluginRegistry registry;
  register_algorithms(registry);
  const host::CompressionConfig config = host::parse_compression_config(
      R"({"algorithm": "level", "config_list": [{"total_sparsity": 0.7,
          "max_sparsity_per_layer": 0.9, "op_types": ["Conv2d", "Linear"]}]})",
      "<test>");
  host::PruningSession session(*model, registry, config);
  session.compress();
  int64_t total = 0;
  int64_t pruned = 0;
  double worst_pruned = 0;  // over the layers below their cap
  double best_kept = 1e30;
  for (const auto& [name, masks] : session.masks()) {
    const int64_t n = masks.weight.numel();
    const int64_t zeros = masks.weight.eq(0).sum().item<int64_t>();
    const auto cap = static_cast<int64_t>(0.9 * static_cast<double>(n));
    total += n;
    pruned += zeros;
    EXPECT_LE(zeros, cap) << name;
    const at::Tensor w = magnitude.at(name);
    if (name == "conv3") {
      EXPECT_EQ(zeros, cap) << "conv3 holds the smallest weights: pruned to its cap";
      continue;  // a capped layer keeps weights below the others' threshold
    }
    best_kept = std::min(best_kept, w.masked_select(masks.weight.ne(0)).min().item<double>());
    if (zeros > 0) {
      worst_pruned = std::max(worst_pruned, w.masked_select(masks.weight.eq(0)).max().item<double>());
    }
  }
  EXPECT_EQ(session.masks().size(), 4u);
  EXPECT_EQ(total, 26032);
  EXPECT_EQ(pruned, static_cast<int64_t>(0.7 * static_cast<double>(total)));
  EXPECT_GT(worst_pruned, 0.0);
  EXPECT_LE(worst_pruned, best_kept) << "one threshold across the layers below their cap";
}

TEST(LevelGlobalSparsityTest, EntriesNeedExactlyOneOfSparsityAndTotalSparsity) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  auto pruner = registry.make_pruner("level", sdk::Options());
  EXPECT_THAT(
      [&] {
        pruner->validate_config(sdk::options_from_json(
            nlohmann::ordered_json{{"sparsity", 0.5}, {"total_sparsity", 0.5}}, "/config_list/1"));
      },
      ThrowsMessage<sdk::Error>(HasSubstr("/config_list/1: give either \"sparsity\"")));
}

}  // namespace
}  // namespace lithe::plugins::level
