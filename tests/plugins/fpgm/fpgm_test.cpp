#include "plugins/fpgm/fpgm.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/fake_context.h"
#include "support/plugin_test.h"
#include "support/paths.h"

namespace lithe::plugins::fpgm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

sdk::Options config(double sparsity) { return test::sparsity_entry(sparsity); }

sdk::Options entry(const nlohmann::ordered_json& json) { return test::config_entry(json, 1); }
using test::error_code;


// Pruned filters of a weight mask [F, ...] as a bool vector [F].
using test::pruned_filters;

// NNI's FPGMPrunerMasker._get_distance_sum, literally (one filter at a time).
at::Tensor reference_distance_sums(const at::Tensor& weight) {
  const at::Tensor w = weight.reshape({weight.size(0), -1});
  std::vector<float> out;
  for (int64_t i = 0; i < w.size(0); ++i) {
    const at::Tensor x = w - w[i].unsqueeze(0).expand(w.sizes());
    out.push_back(at::sqrt((x * x).sum(-1)).sum().item<float>());
  }
  return at::tensor(out);
}

class FpgmTest : public ::testing::Test {
 protected:
  FpgmTest() { register_algorithms(registry_); }

  sdk::Masks prune(const at::Tensor& weight, std::optional<at::Tensor> bias, double sparsity) {
    auto pruner = registry_.make_pruner("fpgm", sdk::Options());
    const sdk::Options cfg = config(sparsity);
    pruner->validate_config(cfg);
    sdk::LayerView layer(0, "conv", "Conv2d", weight, std::move(bias), cfg);
    std::optional<sdk::Masks> masks = pruner->calc_mask(layer);
    EXPECT_TRUE(masks.has_value());
    EXPECT_FALSE(pruner->calc_mask(layer).has_value()) << "one-shot: computed once";
    return masks.value_or(sdk::Masks::keep_all(layer));
  }

  host::PluginRegistry registry_;
};

TEST_F(FpgmTest, PrunesTheFiltersNearestTheGeometricMedian) {
  // 1-element filters [1,-2,3,4]: d = [8,14,8,10] -> prune {0, 2}.
  const at::Tensor weight = at::tensor({1.f, -2.f, 3.f, 4.f}).reshape({4, 1, 1, 1});
  EXPECT_TRUE(distance_sums(weight).equal(at::tensor({8.f, 14.f, 8.f, 10.f})));
  const sdk::Masks masks = prune(weight, at::zeros({4}), 0.5);
  EXPECT_TRUE(masks.weight.flatten().equal(at::tensor({0.f, 1.f, 0.f, 1.f})));
  ASSERT_TRUE(masks.bias.has_value());
  EXPECT_TRUE(masks.bias->equal(at::tensor({0.f, 1.f, 0.f, 1.f})));
}

TEST_F(FpgmTest, TiesGoToTheLowerFilterIndex) {
  // d = [8,14,8,10]: with num_prune 1 filter 0 (not 2) is pruned, like NNI's stable sorted().
  const at::Tensor weight = at::tensor({1.f, -2.f, 3.f, 4.f}).reshape({4, 1, 1, 1});
  const sdk::Masks masks = prune(weight, std::nullopt, 0.25);
  EXPECT_TRUE(masks.weight.flatten().equal(at::tensor({0.f, 1.f, 1.f, 1.f})));
}

class FpgmCountTest : public FpgmTest, public ::testing::WithParamInterface<double> {};

TEST_P(FpgmCountTest, PrunesExactlyIntFiltersTimesSparsityWithTheSmallestDistanceSums) {
  const double sparsity = GetParam();
  at::manual_seed(0);
  const at::Tensor weight = at::randn({20, 3, 3, 3});
  const sdk::Masks masks = prune(weight, at::randn({20}), sparsity);
  const at::Tensor pruned = pruned_filters(masks.weight);
  const int64_t expected = static_cast<int64_t>(20 * sparsity);
  EXPECT_EQ(pruned.sum().item<int64_t>(), expected);
  EXPECT_EQ(masks.weight.sizes(), weight.sizes());
  EXPECT_EQ(masks.weight.scalar_type(), at::kFloat);
  EXPECT_TRUE(masks.bias->eq(0).equal(pruned)) << "bias mask follows the filters";
  const at::Tensor rows = masks.weight.reshape({20, -1});
  EXPECT_TRUE(rows.eq(rows.select(1, 0).unsqueeze(1)).all().item<bool>());
  if (expected > 0) {
    const at::Tensor d = distance_sums(weight);
    EXPECT_GT(d.masked_select(pruned.logical_not()).min().item<float>(),
              d.masked_select(pruned).max().item<float>());
  }
}

INSTANTIATE_TEST_SUITE_P(Sparsities, FpgmCountTest, ::testing::Values(0.05, 0.3, 0.5, 0.82, 0.95));

TEST_F(FpgmTest, DistanceSumsMatchNnisPerFilterComputation) {
  at::manual_seed(4);
  for (const auto& shape : {std::vector<int64_t>{16, 6, 5, 5}, std::vector<int64_t>{64, 32, 3, 3},
                            std::vector<int64_t>{32, 1, 3, 3}, std::vector<int64_t>{8, 4, 7}}) {
    const at::Tensor weight = at::randn(shape);
    EXPECT_TRUE(distance_sums(weight).equal(reference_distance_sums(weight))) << weight.sizes();
  }
}

TEST_F(FpgmTest, LayersWithoutBiasGetNoBiasMask) {
  at::manual_seed(2);
  const sdk::Masks masks = prune(at::randn({8, 4, 3, 3}), std::nullopt, 0.5);
  EXPECT_FALSE(masks.bias.has_value());
  EXPECT_EQ(pruned_filters(masks.weight).sum().item<int64_t>(), 4);
}

TEST_F(FpgmTest, PrunedFiltersAreZeroedInTheCurrentMasks) {
  // The chosen filters are zeroed in a copy of the current masks; the distances use the raw
  // weight. d = [8,14,8,10]; filter 3 was pruned before, so it counts first and stays pruned,
  // and one more goes: filter 0 (the 8 tie, lower index). Exactly 2 of 4 (NNI would zero 0 and
  // 2 on top of 3, three filters at sparsity 0.5).
  auto masker = registry_.make_masker("fpgm", sdk::Options());
  const at::Tensor weight = at::tensor({1.f, -2.f, 3.f, 4.f}).reshape({4, 1, 1, 1});
  sdk::LayerView layer(0, "conv", "Conv2d", weight, at::zeros({4}), config(0.5));
  sdk::Masks previous = sdk::Masks::keep_all(layer);
  previous.weight = at::tensor({1.f, 1.f, 1.f, 0.f}).reshape({4, 1, 1, 1});
  previous.bias = at::tensor({1.f, 1.f, 1.f, 0.f});
  layer.set_masks(previous);
  const auto masks = masker->calc_mask(layer, 0.5);
  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(masks->weight.flatten().equal(at::tensor({0.f, 1.f, 1.f, 0.f})));
  EXPECT_TRUE(masks->bias->equal(at::tensor({0.f, 1.f, 1.f, 0.f})));
  EXPECT_TRUE(layer.masks().weight.flatten().equal(at::tensor({1.f, 1.f, 1.f, 0.f})))
      << "the layer's own masks are not modified in place";
}

TEST_F(FpgmTest, FewerThanTwoFiltersOrNothingToPruneKeepsTheCurrentMasks) {
  auto masker = registry_.make_masker("fpgm", sdk::Options());
  at::manual_seed(3);
  const at::Tensor weight = at::randn({6, 1, 5, 5});
  sdk::LayerView layer(0, "conv1", "Conv2d", weight, at::zeros({6}), config(0.1));
  sdk::Masks previous = sdk::Masks::keep_all(layer);
  previous.weight[2].zero_();
  layer.set_masks(previous);
  auto masks = masker->calc_mask(layer, 0.1);  // int(6 * 0.1) == 0
  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(masks->weight.equal(layer.masks().weight));
  EXPECT_TRUE(masks->bias->equal(*layer.masks().bias));

  sdk::LayerView single(1, "conv2", "Conv2d", at::randn({1, 3, 3, 3}), std::nullopt, config(0.9));
  masks = masker->calc_mask(single, 0.9);
  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(masks->weight.eq(1).all().item<bool>());
  EXPECT_FALSE(masks->bias.has_value());

  const sdk::Masks via_pruner = prune(weight, at::zeros({6}), 0.1);
  EXPECT_TRUE(via_pruner.weight.eq(1).all().item<bool>());
  EXPECT_TRUE(via_pruner.bias->eq(1).all().item<bool>());
}

TEST_F(FpgmTest, PrunesLinearRowsAndConv1dConv3dFilters) {
  // Filters 0..5 on a line (filter i = i · ones): the geometric median is in the middle, so
  // the two middle filters go first at sparsity 1/3 — for weight rows (Linear) as for filters.
  for (const auto& [type, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"Linear", {6, 4}}, {"Conv1d", {6, 2, 2}}, {"Conv3d", {6, 1, 1, 2, 2}}}) {
    std::vector<int64_t> scale(shape.size(), 1);
    scale[0] = 6;
    const at::Tensor weight = at::ones(shape) * at::arange(0, 6, at::kFloat).reshape(scale);
    auto pruner = registry_.make_pruner("fpgm", sdk::Options());
    const sdk::Options cfg = entry({{"sparsity", 0.34}, {"op_types", {type}}});
    pruner->validate_config(cfg);
    sdk::LayerView layer(0, "layer", type, weight, std::nullopt, cfg);
    const std::optional<sdk::Masks> masks = pruner->calc_mask(layer);
    ASSERT_TRUE(masks.has_value()) << type;
    EXPECT_EQ(test::pruned_filter_indices(masks->weight), (std::vector<int64_t>{2, 3})) << type;
  }
}

TEST_F(FpgmTest, RejectsLayersOtherThanConvolutionsAndLinear) {
  auto pruner = registry_.make_pruner("fpgm", sdk::Options());
  sdk::LayerView layer(0, "bn1", "BatchNorm2d", at::randn({10}), at::zeros({10}),
                       entry({{"sparsity", 0.5}, {"op_names", {"bn1"}}}));
  EXPECT_THAT([&] { pruner->calc_mask(layer); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("layer 'bn1' is a BatchNorm2d"),
                  HasSubstr("fpgm prunes [\"Conv1d\", \"Conv2d\", \"Conv3d\", \"Linear\"] layers only"))));
  EXPECT_EQ(error_code([&] { pruner->calc_mask(layer); }), sdk::Errc::kUnsupportedLayer);
}

TEST_F(FpgmTest, ConfigAcceptsFilterLayerOpTypesOnly) {
  auto pruner = registry_.make_pruner("fpgm", sdk::Options());
  EXPECT_THAT(
      [&] {
        pruner->validate_config(entry({{"sparsity", 0.5}, {"op_types", {"default"}}}));
      },
      ThrowsMessage<sdk::Error>(AllOf(HasSubstr("/config_list/1/op_types may contain only"),
                                      HasSubstr("\"default\" is not accepted"),
                                      HasSubstr("got \"default\" in [\"default\"]"))));
  EXPECT_EQ(error_code([&] {
              pruner->validate_config(entry({{"sparsity", 0.5}, {"op_types", {"LayerNorm"}}}));
            }),
            sdk::Errc::kInvalidConfig);
  EXPECT_NO_THROW(pruner->validate_config(entry({{"sparsity", 0.5}, {"op_types", {"Conv2d"}}})));
  EXPECT_NO_THROW(
      pruner->validate_config(entry({{"sparsity", 0.5}, {"op_types", {"Linear", "Conv3d"}}})));
  EXPECT_NO_THROW(pruner->validate_config(entry({{"sparsity", 0.5}, {"op_names", {"conv1"}}})));
}

TEST_F(FpgmTest, ConfigRequiresSparsityInHalfOpenUnitInterval) {
  auto pruner = registry_.make_pruner("fpgm", sdk::Options());
  for (double bad : {1.0, -0.1, 1.5}) {
    EXPECT_THAT(
        [&] { pruner->validate_config(config(bad)); },
        ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/sparsity must be a number in [0, 1)")))
        << bad;
  }
  EXPECT_NO_THROW(pruner->validate_config(config(0.0)));
  const sdk::Options cfg = entry({{"sparsity", 0.5}, {"op_types", {"Conv2d"}}, {"typo", 1}});
  pruner->validate_config(cfg);
  EXPECT_EQ(sdk::unread_option_paths(cfg), std::vector<std::string>{"/config_list/1/typo"});
}

TEST_F(FpgmTest, OptionsAreDependencyAwareAndAStringDummyInput) {
  const sdk::Options options = sdk::options_from_json(
      nlohmann::ordered_json{{"dependency_aware", true}, {"dummy_input", "x"}, {"typo", 1}},
      "/options");
  auto pruner = registry_.make_pruner("fpgm", options);
  EXPECT_EQ(sdk::unread_option_paths(options), std::vector<std::string>{"/options/typo"});
  EXPECT_THAT(
      [&] {
        registry_.make_pruner(
            "fpgm", sdk::options_from_json(nlohmann::ordered_json{{"dummy_input", 3}}, "/options"));
      },
      // Checked by fpgm's declaration (SDK 1.4) before its factory runs; the help explains.
      ThrowsMessage<sdk::Error>(AllOf(HasSubstr("pruner 'fpgm'"),
                                      HasSubstr("/options/dummy_input must be a string, got 3"),
                                      HasSubstr("accepted only as a string, for NNI compatibility"))));
}

TEST_F(FpgmTest, DependencyAwareAddedLayersPruneTheSameChannels) {
  // Two added layers of 1-element filters: d(a) = [8,14,8,10] for [1,-2,3,4], d(b) = [6,4,4,6]
  // for [0,1,2,3], summed [14,18,12,16] -> the common channels at s = .5 are 2 and 0 (NNI
  // alike); alone, b would prune 1 and 2.
  sdk::LayerView a(0, "a", "Conv2d", at::tensor({1.f, -2.f, 3.f, 4.f}).reshape({4, 1, 1, 1}),
                   at::zeros({4}), config(0.5));
  sdk::LayerView b(1, "b", "Conv2d", at::tensor({0.f, 1.f, 2.f, 3.f}).reshape({4, 1, 1, 1}),
                   std::nullopt, config(0.5));
  ASSERT_TRUE(distance_sums(b.weight()).equal(at::tensor({6.f, 4.f, 4.f, 6.f})));
  test::FakeContext context({&a, &b}, registry_);
  context.channel_sets = {{"a", "b"}};
  auto pruner = registry_.make_pruner(
      "fpgm",
      test::options_json({{"dependency_aware", true}}));
  pruner->attach(context);
  const auto ma = pruner->calc_mask(a);
  const auto mb = pruner->calc_mask(b);
  ASSERT_TRUE(ma.has_value() && mb.has_value());
  EXPECT_TRUE(ma->weight.flatten().equal(at::tensor({0.f, 1.f, 0.f, 1.f})));
  EXPECT_TRUE(ma->bias->equal(at::tensor({0.f, 1.f, 0.f, 1.f})));
  EXPECT_TRUE(mb->weight.flatten().equal(at::tensor({0.f, 1.f, 0.f, 1.f})));
  EXPECT_FALSE(mb->bias.has_value());
}

// NNI's dependency-aware FPGM golden case, replayed with NNI's dependency sets: no tie at a
// pruning boundary, so Lithe must give NNI's masks exactly.
TEST_F(FpgmTest, DependencyAwareMasksEqualNnisGoldenCase) {
  const auto conformance = test::nni_data_dir();
  const auto dir = conformance / "golden" / "fpgm_resblock_dep_s0.5";
  ASSERT_TRUE(std::filesystem::exists(dir)) << "in-repo test data missing: " << dir;
  std::ifstream summary_file(dir / "summary.json");
  const auto results = nlohmann::ordered_json::parse(summary_file).at("results");
  const auto state = test::load_tensor_dict(conformance / "models" / "resblock_state.pt");
  const test::GoldenLayers golden = test::golden_conv_layers(results.at("masks"), state);
  const std::vector<sdk::LayerView*>& views = golden.views;
  test::FakeContext context(views, registry_);
  context.set_dependencies(results);
  auto pruner = registry_.make_pruner(
      "fpgm",
      test::options_json({{"dependency_aware", true}}));
  pruner->attach(context);
  for (sdk::LayerView* layer : views) {
    const auto masks = pruner->calc_mask(*layer);
    ASSERT_TRUE(masks.has_value()) << layer->name();
    const auto& expected = results.at("masks").at(layer->name()).at("pruned_filters");
    EXPECT_EQ(test::pruned_filter_indices(masks->weight), expected.get<std::vector<int64_t>>())
        << layer->name();
  }
}

TEST_F(FpgmTest, RegistersMaskerAndPrunerUnderTheNameUsersType) {
  EXPECT_NE(registry_.find(host::AlgorithmKind::kPruner, "fpgm"), nullptr);
  EXPECT_NE(registry_.find(host::AlgorithmKind::kMasker, "fpgm"), nullptr);
  EXPECT_THAT([&] { register_algorithms(registry_); },
              ThrowsMessage<sdk::Error>(HasSubstr("duplicate masker 'fpgm'")));
}

// --- NNI's per-filter statistics of the conformance cases -------------------------------------


TEST(FpgmGoldenTest, DistanceSumsMatchNnisStatisticsAndTheirRanking) {
  const auto conformance = test::nni_data_dir();
  ASSERT_TRUE(std::filesystem::exists(conformance / "golden")) << "in-repo test data missing: " << conformance;
  int checked = 0;
  for (const char* model : {"lenet", "vgg_bn", "mobilenet_tiny"}) {
    const auto state = test::load_tensor_dict(conformance / "models" / (std::string(model) + "_state.pt"));
    const auto golden = test::load_tensor_dict(conformance / "golden" /
                                     (std::string("fpgm_") + model + "_s0.5") / "tensors.pt");
    for (const auto& [key, stat] : golden) {
      if (key.rfind("stat.", 0) != 0) {
        continue;
      }
      const at::Tensor& weight = state.at(key.substr(5) + ".weight");
      const at::Tensor d = distance_sums(weight);
      // NNI recorded these on torch 1.13; libtorch 2.x sums in another order, which moves the
      // last bit of some sums. The ranking NNI prunes by must not change; the masks themselves
      // are compared exactly by the conformance cases.
      EXPECT_TRUE(at::allclose(d, stat, /*rtol=*/2.5e-7, /*atol=*/0))
          << model << " " << key << ": max |diff| " << (d - stat).abs().max().item<float>();
      EXPECT_TRUE(d.argsort(/*stable=*/true).equal(stat.argsort(/*stable=*/true)))
          << model << " " << key;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 + 3 + 5);
}

}  // namespace
}  // namespace lithe::plugins::fpgm
