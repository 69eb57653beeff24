// Speedup on the five conformance models: masks from Lithe's own filter pruners (normal and
// dependency-aware), then the smaller model's layer shapes, its output against the masked model,
// and a save/load round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/speedup/speedup.h"
#include "lithe/sdk/error.h"
#include "plugins/attention_heads/attention_heads.h"
#include "plugins/filter_norm/filter_norm.h"
#include "plugins/slim/slim.h"
#include "support/conformance_models.h"
#include "support/head_masks.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

PluginRegistry& filter_registry() {
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();
    plugins::filter_norm::register_algorithms(*r);
    plugins::slim::register_algorithms(*r);
    plugins::attention_heads::register_algorithms(*r);
    return r;
  }();
  return *registry;
}

at::Tensor input_for(const std::string& name) {
  torch::manual_seed(7);
  if (name == "lenet") return torch::randn({4, 1, 28, 28});
  if (name == "resblock") return torch::randn({4, 3, 16, 16});
  if (name == "mlp") return torch::randn({4, 64});
  return torch::randn({4, 3, 32, 32});
}

// Prunes a loaded copy of conformance model `name` with `algorithm` and returns its masks.
NamedMasks prune(const std::string& name, const std::string& algorithm,
                 const std::string& config_list, const std::string& options = "{}") {
  torch::jit::Module module = torch::jit::load(test::conformance_model_file(name).string());
  std::unique_ptr<Model> model = make_torchscript_model(module);
  PruningSession session(*model, filter_registry(), {algorithm, config_list, options, "<test>"});
  session.compress();
  return session.masks();
}

std::map<std::string, std::vector<int64_t>> weight_shapes(const SpeedupResult& result) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ShrunkLayer& layer : result.layers) {
    shapes[layer.module] = layer.weight_shape_after;
  }
  return shapes;
}

std::vector<int64_t> parameter_shape(const torch::jit::Module& module, const std::string& name) {
  for (const auto& p : module.named_parameters()) {
    if (p.name == name) {
      return p.value.sizes().vec();
    }
  }
  for (const auto& b : module.named_buffers()) {
    if (b.name == name) {
      return b.value.sizes().vec();
    }
  }
  return {};
}

using Shape = std::vector<int64_t>;

TEST(SpeedupTest, LenetAfterL1FilterHalvesTheConvolutionsAndKeepsTheOutputExactly) {
  const NamedMasks masks = prune("lenet", "l1_filter", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("lenet").string());
  const SpeedupResult result = speedup_model(model, masks, input_for("lenet"));
  const auto shapes = weight_shapes(result);
  EXPECT_EQ(shapes.at("conv1"), (Shape{3, 1, 5, 5}));
  EXPECT_EQ(shapes.at("conv2"), (Shape{8, 3, 5, 5}));
  EXPECT_EQ(shapes.at("fc1"), (Shape{120, 128}));  // 8 channels × 4 × 4 inputs left
  EXPECT_EQ(shapes.count("fc2"), 0u);
  // No BatchNorm: removing zero channels changes nothing but float summation order.
  EXPECT_LT(result.max_abs_diff, 1e-5);
  EXPECT_TRUE(result.batchnorm_shifts.empty());
  EXPECT_EQ(parameter_shape(*result.module, "conv2.bias"), (Shape{8}));
}

TEST(SpeedupTest, TheInputModelIsNotChanged) {
  const NamedMasks masks = prune("lenet", "l1_filter", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("lenet").string());
  const at::Tensor before = model.attr("conv1").toModule().attr("weight").toTensor().clone();
  speedup_model(model, masks, input_for("lenet"));
  const at::Tensor after = model.attr("conv1").toModule().attr("weight").toTensor();
  EXPECT_TRUE(after.equal(before));
  EXPECT_EQ(after.size(0), 6);
}

TEST(SpeedupTest, VggBatchNormShiftIsReportedAndIsTheWholeDifference) {
  const NamedMasks masks = prune("vgg_bn", "l1_filter", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("vgg_bn").string());
  const SpeedupResult result = speedup_model(model, masks, input_for("vgg_bn"));
  const auto shapes = weight_shapes(result);
  EXPECT_EQ(shapes.at("conv1"), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(shapes.at("bn1"), (Shape{8}));
  EXPECT_EQ(shapes.at("conv2"), (Shape{16, 8, 3, 3}));
  EXPECT_EQ(shapes.at("conv3"), (Shape{32, 16, 3, 3}));
  EXPECT_EQ(shapes.at("fc1"), (Shape{10, 128}));
  EXPECT_EQ(parameter_shape(*result.module, "bn3.running_var"), (Shape{32}));
  // The masked model's BatchNorms add β − μ·γ/√(σ²+ε) on the pruned channels; the smaller model
  // has no such channels. Zeroing γ and β there in the masked model leaves only float noise.
  ASSERT_EQ(result.batchnorm_shifts.size(), 3u);
  EXPECT_GT(result.max_abs_diff, 1e-3);
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, SlimMasksOnBatchNormRemoveTheConvolutionFiltersBeforeThem) {
  const NamedMasks masks = prune("vgg_bn", "slim", R"([{"sparsity": 0.5, "op_types": ["BatchNorm2d"]}])");
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("vgg_bn").string());
  const SpeedupResult result = speedup_model(model, masks, input_for("vgg_bn"));
  const auto shapes = weight_shapes(result);
  int64_t bn_channels = 0;
  int64_t conv_filters = 0;
  for (const char* bn : {"bn1", "bn2", "bn3"}) {
    bn_channels += shapes.at(bn).at(0);
  }
  for (const char* conv : {"conv1", "conv2", "conv3"}) {
    conv_filters += shapes.at(conv).at(0);
  }
  EXPECT_EQ(bn_channels, 56);  // 112 channels, half pruned globally
  EXPECT_EQ(conv_filters, bn_channels);
  // γ = β = 0 gives exact zeros: nothing to explain.
  EXPECT_TRUE(result.batchnorm_shifts.empty());
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

TEST(SpeedupTest, MobilenetDepthwiseConvolutionsFollowTheirInputChannels) {
  const NamedMasks masks = prune("mobilenet_tiny", "l1_filter",
                                 R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("mobilenet_tiny").string());
  const SpeedupResult result = speedup_model(model, masks, input_for("mobilenet_tiny"));
  const torch::jit::Module& small = *result.module;
  // conv1 and dw1 each zero 8 of 16 filters. A channel dw1 zeroes is dead for conv1 too, and one
  // conv1 zeroes reaches dw1 only through bn1 (the reported shift): either lets it go.
  const Shape dw1 = parameter_shape(small, "dw1.weight");
  ASSERT_EQ(dw1.size(), 4u);
  EXPECT_EQ(dw1[1], 1);
  EXPECT_EQ(parameter_shape(small, "conv1.weight")[0], dw1[0]);
  EXPECT_EQ(parameter_shape(small, "bn1.weight")[0], dw1[0]);
  EXPECT_EQ(parameter_shape(small, "pw1.weight")[1], dw1[0]);
  EXPECT_LT(dw1[0], 16);
  EXPECT_EQ(small.attr("dw1").toModule().type()->getConstant("groups").toInt(), dw1[0]);
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
  // It still runs after a save and load (the groups constant was rewritten in its graph).
  std::stringstream stream;
  small.save(stream);
  torch::jit::Module loaded = torch::jit::load(stream);
  EXPECT_EQ(loaded.forward({input_for("mobilenet_tiny")}).toTensor().sizes(), (Shape{4, 10}));
}

// Filters a layer's weight mask keeps (any non-zero), as a bool vector.
at::Tensor kept_filters(const NamedMasks& masks, const std::string& layer) {
  for (const auto& [name, m] : masks) {
    if (name == layer) {
      return m.weight.reshape({m.weight.size(0), -1}).ne(0).any(1);
    }
  }
  ADD_FAILURE() << "no mask for " << layer;
  return {};
}

TEST(SpeedupTest, MobilenetDependencyAwarePruningKeepsWhatBothSidesOfEachDepthwiseKeep) {
  const NamedMasks masks =
      prune("mobilenet_tiny", "l1_filter", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])",
            R"({"dependency_aware": true})");
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("mobilenet_tiny").string());
  const SpeedupResult result = speedup_model(model, masks, input_for("mobilenet_tiny"));
  const torch::jit::Module& small = *result.module;
  // conv1 -> bn1 -> dw1 -> dwbn1 is one channel space: a channel stays where both conv1 and dw1
  // keep their filter. The same holds for pw1 and dw2; pw2 only feeds the classifier.
  const int64_t first = (kept_filters(masks, "conv1") & kept_filters(masks, "dw1")).sum().item<int64_t>();
  const int64_t second = (kept_filters(masks, "pw1") & kept_filters(masks, "dw2")).sum().item<int64_t>();
  const int64_t third = kept_filters(masks, "pw2").sum().item<int64_t>();
  ASSERT_LT(first, 16);
  EXPECT_EQ(parameter_shape(small, "conv1.weight"), (Shape{first, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "dw1.weight"), (Shape{first, 1, 3, 3}));
  EXPECT_EQ(small.attr("dw1").toModule().type()->getConstant("groups").toInt(), first);
  EXPECT_EQ(parameter_shape(small, "pw1.weight"), (Shape{second, first, 1, 1}));
  EXPECT_EQ(parameter_shape(small, "dw2.weight"), (Shape{second, 1, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "pw2.weight"), (Shape{third, second, 1, 1}));
  EXPECT_EQ(parameter_shape(small, "pwbn2.weight"), (Shape{third}));
  EXPECT_EQ(parameter_shape(small, "fc1.weight"), (Shape{10, third}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, ResblockDependencyAwarePruningShrinksTheResidualPath) {
  const NamedMasks masks =
      prune("resblock", "l1_filter", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])",
            R"({"dependency_aware": true})");
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("resblock").string());
  const SpeedupResult result = speedup_model(model, masks, input_for("resblock"));
  const torch::jit::Module& small = *result.module;
  // conv1 and layer1.conv2 meet in the identity add and prune the same 8 channels.
  EXPECT_EQ(parameter_shape(small, "conv1.weight"), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "layer1.conv1.weight"), (Shape{8, 8, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "layer1.conv2.weight"), (Shape{8, 8, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "layer2.conv1.weight"), (Shape{16, 8, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "layer2.shortcut.0.weight"), (Shape{16, 8, 1, 1}));
  EXPECT_EQ(parameter_shape(small, "layer2.conv2.weight"), (Shape{16, 16, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "fc1.weight"), (Shape{10, 16}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, ResblockWithoutDependencyAwarenessKeepsChannelsTheAddNeeds) {
  const NamedMasks masks = prune("resblock", "l1_filter", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("resblock").string());
  const SpeedupResult result = speedup_model(model, masks, input_for("resblock"));
  const torch::jit::Module& small = *result.module;
  // conv1 and layer1.conv2 zero different channels: only those zero in both may go.
  const int64_t stem = parameter_shape(small, "conv1.weight")[0];
  EXPECT_GE(stem, 8);
  EXPECT_EQ(parameter_shape(small, "layer1.conv2.weight")[0], stem);
  EXPECT_EQ(parameter_shape(small, "layer1.conv1.weight"), (Shape{8, stem, 3, 3}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, MlpRowsZeroedWithTheirBiasLeaveBothLinearLayers) {
  torch::jit::Module model = torch::jit::load(test::conformance_model_file("mlp").string());
  NamedMasks masks;
  // fc1 rows 0..63 all zero (weight and bias): fc1 loses them and fc2 its matching columns.
  at::Tensor w = torch::ones({128, 64});
  w.slice(0, 0, 64).zero_();
  at::Tensor b = torch::ones({128});
  b.slice(0, 0, 64).zero_();
  masks.push_back({"fc1", {w, b}});
  const SpeedupResult result = speedup_model(model, masks, input_for("mlp"));
  EXPECT_EQ(parameter_shape(*result.module, "fc1.weight"), (Shape{64, 64}));
  EXPECT_EQ(parameter_shape(*result.module, "fc2.weight"), (Shape{64, 64}));
  EXPECT_EQ(parameter_shape(*result.module, "fc3.weight"), (Shape{10, 64}));
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

// Masks that zero filters [0, zeroed) of a layer's `filters` (weight and, when given, bias).
sdk::Masks zero_first(const std::vector<int64_t>& weight_shape, int64_t zeroed, bool bias) {
  at::Tensor w = torch::ones(weight_shape);
  w.slice(0, 0, zeroed).zero_();
  if (!bias) {
    return {w, std::nullopt};
  }
  at::Tensor b = torch::ones({weight_shape[0]});
  b.slice(0, 0, zeroed).zero_();
  return {w, b};
}

TEST(SpeedupTest, AnOpThatMixesChannelsBlocksOnlyItsOwnBranch) {
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/speedup_blocked.pt").string());
  NamedMasks masks;
  masks.push_back({"conv1", zero_first({8, 3, 3, 3}, 4, true)});
  masks.push_back({"conv2", zero_first({8, 8, 3, 3}, 4, true)});
  masks.push_back({"conv3", zero_first({8, 8, 3, 3}, 4, true)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 8, 8}));
  const torch::jit::Module& small = *result.module;
  EXPECT_EQ(parameter_shape(small, "conv1.weight"), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "conv2.weight"), (Shape{8, 4, 3, 3}));  // cumsum needs all 8
  EXPECT_EQ(parameter_shape(small, "conv3.weight"), (Shape{4, 4, 3, 3}));  // through the gate
  EXPECT_EQ(parameter_shape(small, "fc1.weight"), (Shape{10, 4}));
  EXPECT_EQ(parameter_shape(small, "fc2.weight"), (Shape{10, 8}));
  ASSERT_EQ(result.blocked.size(), 1u);
  EXPECT_THAT(result.blocked[0].where, HasSubstr("aten::cumsum"));
  EXPECT_EQ(result.blocked[0].channels, 4);
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

TEST(SpeedupTest, BranchesOnConstantAttributesAndOnTheInputRankDoNotBlock) {
  // MobileNet-style blocks (`if self.use_res_connect`, `if self.downsample is not None`) and a
  // stem chosen by `x.dim() == 4`: folded, the graph is straight and every channel goes.
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/constant_branches.pt").string());
  NamedMasks masks;
  masks.push_back({"stem", zero_first({8, 3, 3, 3}, 4, true)});
  masks.push_back({"blocks.0.conv.0", zero_first({8, 8, 3, 3}, 4, false)});
  masks.push_back({"blocks.1.conv.0", zero_first({8, 8, 3, 3}, 4, false)});
  masks.push_back({"blocks.1.downsample", zero_first({8, 8, 1, 1}, 4, true)});
  masks.push_back({"blocks.2.conv.0", zero_first({8, 8, 3, 3}, 4, false)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 8, 8}));
  const torch::jit::Module& small = *result.module;
  EXPECT_TRUE(result.blocked.empty()) << result.blocked.front().where << ": "
                                      << result.blocked.front().reason;
  EXPECT_EQ(parameter_shape(small, "stem.weight"), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "blocks.0.conv.0.weight"), (Shape{4, 4, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "blocks.1.conv.0.weight"), (Shape{4, 4, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "blocks.1.downsample.weight"), (Shape{4, 4, 1, 1}));
  EXPECT_EQ(parameter_shape(small, "blocks.2.conv.0.weight"), (Shape{4, 4, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "fc.weight"), (Shape{10, 4}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, DenseNetsGrowingConcatenationShrinksEveryPart) {
  // features = [stem(x)]; features.append(layer(features)) ...; cat(features, 1): each layer
  // reads the concatenation of everything before it, so a channel removed from the stem or a
  // layer goes from every later BatchNorm and convolution input, and from the classifier.
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/ops_dense_cat.pt").string());
  NamedMasks masks;
  masks.push_back({"stem", zero_first({8, 3, 3, 3}, 4, true)});
  masks.push_back({"layers.0.conv", zero_first({4, 8, 3, 3}, 2, false)});
  masks.push_back({"layers.1.conv", zero_first({4, 12, 3, 3}, 2, false)});
  masks.push_back({"layers.2.conv", zero_first({4, 16, 3, 3}, 2, false)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 8, 8}));
  const torch::jit::Module& small = *result.module;
  EXPECT_TRUE(result.blocked.empty()) << result.blocked.front().where << ": "
                                      << result.blocked.front().reason;
  EXPECT_EQ(parameter_shape(small, "stem.weight"), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "layers.0.conv.weight"), (Shape{2, 4, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "layers.1.bn.weight"), (Shape{6}));
  EXPECT_EQ(parameter_shape(small, "layers.1.conv.weight"), (Shape{2, 6, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "layers.2.conv.weight"), (Shape{2, 8, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "fc.weight"), (Shape{10, 10}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, ChannelLastAndTokenMlpsShrinkTheirHiddenWidths) {
  // ConvNeXt: permute to [N, H, W, C], LayerNorm over C, Linear 8->16, GELU, Linear 16->8,
  // permute back. ViT: [N, H*W, C] tokens, Linear 8->12, GELU, Linear 12->8. Linear layers
  // work on the last axis; the channel flow follows the permutes to it. The residual stream is
  // normalised over its channels by LayerNorm, so it keeps them (and says so); the hidden
  // widths between each pair of Linear layers shrink.
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/ops_channel_last.pt").string());
  NamedMasks masks;
  masks.push_back({"stem", zero_first({8, 3, 3, 3}, 2, true)});  // kept: LayerNorm reads them
  masks.push_back({"pwconv1", zero_first({16, 8}, 8, true)});
  masks.push_back({"token_fc1", zero_first({12, 8}, 6, true)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 6, 6}));
  const torch::jit::Module& small = *result.module;
  EXPECT_EQ(parameter_shape(small, "pwconv1.weight"), (Shape{8, 8}));
  EXPECT_EQ(parameter_shape(small, "pwconv2.weight"), (Shape{8, 8}));
  EXPECT_EQ(parameter_shape(small, "token_fc1.weight"), (Shape{6, 8}));
  EXPECT_EQ(parameter_shape(small, "token_fc2.weight"), (Shape{8, 6}));
  EXPECT_EQ(parameter_shape(small, "stem.weight"), (Shape{8, 3, 3, 3}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
  bool layer_norm_named = false;
  for (const SpeedupBlock& b : result.blocked) {
    layer_norm_named = layer_norm_named || (b.where.find("aten::layer_norm") != std::string::npos &&
                                            b.reason.find("statistics") != std::string::npos);
  }
  EXPECT_TRUE(layer_norm_named);
}

TEST(SpeedupTest, VideoConvolutionsShrinkIncludingASubclassThatAddsNothing) {
  // Conv3d stem + BatchNorm3d, a Conv3d subclass (torchvision's Conv3DSimple pattern), a
  // depthwise Conv3d, 3-d global pooling, Linear.
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/ops_video.pt").string());
  NamedMasks masks;
  masks.push_back({"stem", zero_first({8, 3, 1, 3, 3}, 2, true)});
  masks.push_back({"conv", zero_first({8, 8, 3, 3, 3}, 4, false)});
  masks.push_back({"dw", zero_first({8, 1, 3, 3, 3}, 4, true)});  // and its bias: else kept
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 4, 8, 8}));
  const torch::jit::Module& small = *result.module;
  EXPECT_TRUE(result.blocked.empty()) << result.blocked.front().where << ": "
                                      << result.blocked.front().reason;
  EXPECT_EQ(parameter_shape(small, "stem.weight"), (Shape{6, 3, 1, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "bn.weight"), (Shape{6}));
  EXPECT_EQ(parameter_shape(small, "conv.weight"), (Shape{4, 6, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "dw.weight"), (Shape{4, 1, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "fc.weight"), (Shape{10, 4}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

// Prunes a loaded copy of the test model `file` (tests/data) and returns its masks.
NamedMasks prune_file(const std::string& file, const std::string& config_list,
                      const std::string& options) {
  torch::jit::Module module =
      torch::jit::load((test::source_dir() / "tests/data" / file).string());
  std::unique_ptr<Model> model = make_torchscript_model(module);
  PruningSession session(*model, filter_registry(), {"l1_filter", config_list, options, "<test>"});
  session.compress();
  return session.masks();
}

// Output filters a weight mask prunes whole.
int64_t pruned_rows(const NamedMasks& masks, const std::string& layer) {
  for (const auto& [name, m] : masks) {
    if (name == layer) {
      return m.weight.reshape({m.weight.size(0), -1}).eq(0).all(1).sum().item<int64_t>();
    }
  }
  return -1;
}

TEST(SpeedupTest, L1FilterOnConv3dSelectsTheSubclassAndTheVideoNetShrinks) {
  // op_types "Conv3d" selects the PlainConv3d subclass too (scripting dropped its base class;
  // its structure says it is a Conv3d), and dependency_aware treats it as a convolution.
  const NamedMasks masks = prune_file(
      "ops_video.pt", R"([{"sparsity": 0.5, "op_types": ["Conv3d"]}])", R"({"dependency_aware": true})");
  EXPECT_EQ(pruned_rows(masks, "stem"), 4);
  EXPECT_EQ(pruned_rows(masks, "conv"), 4);
  EXPECT_EQ(pruned_rows(masks, "dw"), 4);
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/ops_video.pt").string());
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 4, 8, 8}));
  EXPECT_EQ(parameter_shape(*result.module, "stem.weight"), (Shape{4, 3, 1, 3, 3}));
  EXPECT_EQ(parameter_shape(*result.module, "conv.weight").at(1), 4);
  EXPECT_LT(parameter_shape(*result.module, "fc.weight").at(1), 8);
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, L1FilterOnLinearShrinksTheHiddenWidthsOfChannelLastAndTokenMlps) {
  // Every Linear but the classifier at 0.5: the first layer of each MLP loses half its rows,
  // the second the matching columns. Each MLP's second layer is added into the residual
  // stream with the stem (not compressed), so their outputs keep their width.
  const NamedMasks masks = prune_file(
      "ops_channel_last.pt",
      R"([{"sparsity": 0.5, "op_types": ["Linear"]}, {"exclude": true, "op_names": ["head"]}])",
      R"({"dependency_aware": true})");
  EXPECT_EQ(pruned_rows(masks, "pwconv1"), 8);
  EXPECT_EQ(pruned_rows(masks, "token_fc1"), 6);
  EXPECT_EQ(pruned_rows(masks, "head"), -1) << "excluded";
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/ops_channel_last.pt").string());
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 6, 6}));
  EXPECT_EQ(parameter_shape(*result.module, "pwconv1.weight"), (Shape{8, 8}));
  EXPECT_EQ(parameter_shape(*result.module, "pwconv2.weight"), (Shape{8, 8}));
  EXPECT_EQ(parameter_shape(*result.module, "token_fc1.weight"), (Shape{6, 8}));
  EXPECT_EQ(parameter_shape(*result.module, "token_fc2.weight"), (Shape{8, 6}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

// torchvision's own transformer blocks at a few channels (scripts/make_transformer_models.py):
// every Conv2d and Linear but the classifier pruned dependency-aware, then sped up.
struct TransformerCase {
  const char* model;
  const char* classifier;
  const char* mlp_first;  // an MLP's first Linear: its hidden width must shrink
};

class TransformerSpeedupTest : public ::testing::TestWithParam<TransformerCase> {};

TEST_P(TransformerSpeedupTest, L1FilterShrinksTheMlpsAndTheOutputAgrees) {
  const TransformerCase& c = GetParam();
  const std::string file = std::string(c.model) + ".pt";
  const NamedMasks masks = prune_file(
      file,
      std::string(R"([{"sparsity": 0.5, "op_types": ["Conv2d", "Linear"]}, )") +
          R"({"exclude": true, "op_names": [")" + c.classifier + R"("]}])",
      R"({"dependency_aware": true})");
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data" / file).string());
  torch::manual_seed(3);
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 32, 32}));
  int64_t before = 0;
  int64_t after = 0;
  for (const auto& p : model.named_parameters()) {
    before += p.value.numel();
  }
  for (const auto& p : result.module->named_parameters()) {
    after += p.value.numel();
  }
  EXPECT_LT(after, before * 9 / 10) << c.model;
  const std::vector<int64_t> hidden =
      parameter_shape(*result.module, std::string(c.mlp_first) + ".weight");
  const std::vector<int64_t> dense = parameter_shape(model, std::string(c.mlp_first) + ".weight");
  ASSERT_EQ(hidden.size(), 2u);
  EXPECT_EQ(hidden[0], dense[0] / 2) << c.model;
  EXPECT_TRUE(result.explained(1e-5)) << result.max_abs_diff_without_bn_shift;
}

INSTANTIATE_TEST_SUITE_P(
    TorchvisionBlocks, TransformerSpeedupTest,
    ::testing::Values(TransformerCase{"tv_swin_tiny", "head", "features.1.0.mlp.0"},
                      TransformerCase{"tv_swin_v2_tiny", "head", "features.1.0.mlp.0"},
                      TransformerCase{"tv_vit_tiny", "heads.head",
                                      "encoder.layers.encoder_layer_0.mlp.0"}),
    [](const ::testing::TestParamInfo<TransformerCase>& info) { return info.param.model; });

// ---------------------------------------------------------------- attention heads

// The masks `algorithm` computes for model file `file` (tests/data).
NamedMasks masks_of(const std::string& file, const std::string& algorithm,
                    const std::string& config_list, const std::string& options) {
  torch::jit::Module module =
      torch::jit::load((test::source_dir() / "tests/data" / file).string());
  std::unique_ptr<Model> model = make_torchscript_model(module);
  PruningSession session(*model, filter_registry(), {algorithm, config_list, options, "<test>"});
  session.compress();
  return session.masks();
}

int64_t int_attribute(const torch::jit::Module& root, const std::string& module,
                      const std::string& name) {
  torch::jit::Module m = root;
  std::stringstream path(module);
  for (std::string part; std::getline(path, part, '.');) {
    m = m.attr(part).toModule();
  }
  return m.type()->hasConstant(name) ? m.type()->getConstant(name).toInt()
                                     : m.attr(name).toInt();
}

TEST(SpeedupHeadsTest, TransformerHeadPruningRemovesHeadsFromVitAndTheOutputAgrees) {
  // ViT with 4 heads of 4 channels: transformer_head 0.5 prunes two heads per block (by their
  // q, k, v rows); speedup drops them, with out_proj's columns, and the forward over the rest
  // computes what the masked model computes.
  const NamedMasks masks =
      masks_of("tv_vit_heads.pt", "transformer_head",
               R"([{"sparsity": 0.5, "op_types": ["MultiheadAttention"]}])",
               R"({"head_hidden_dim": 4})");
  ASSERT_EQ(masks.size(), 2u);
  const std::string attn = "encoder.layers.encoder_layer_0.self_attention";
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/tv_vit_heads.pt").string());
  torch::manual_seed(3);
  const at::Tensor input = torch::randn({2, 3, 32, 32});
  const SpeedupResult result = speedup_model(model, masks, input);
  EXPECT_TRUE(result.blocked.empty()) << result.blocked.front().where << ": "
                                      << result.blocked.front().reason;
  EXPECT_TRUE(result.explained(1e-5)) << result.max_abs_diff_without_bn_shift;
  for (const std::string& layer :
       {attn, std::string("encoder.layers.encoder_layer_1.self_attention")}) {
    EXPECT_EQ(parameter_shape(*result.module, layer + ".in_proj_weight"), (Shape{24, 16}));
    EXPECT_EQ(parameter_shape(*result.module, layer + ".in_proj_bias"), (Shape{24}));
    EXPECT_EQ(parameter_shape(*result.module, layer + ".out_proj.weight"), (Shape{16, 8}));
    EXPECT_EQ(int_attribute(*result.module, layer, "num_heads"), 2);
    EXPECT_EQ(int_attribute(*result.module, layer, "head_dim"), 4);
    EXPECT_EQ(int_attribute(*result.module, layer + ".out_proj", "in_features"), 8);
  }
  // The kept rows are the original rows of the kept heads, in order, in each of q, k and v.
  std::vector<int64_t> kept;
  for (const ShrunkLayer& layer : result.layers) {
    if (layer.module == attn) {
      kept = layer.kept_outputs;
      EXPECT_EQ(layer.op_type, "MultiheadAttention");
    }
  }
  ASSERT_EQ(kept.size(), 24u);
  const at::Tensor before = model.attr("encoder").toModule().attr("layers").toModule()
                                .attr("encoder_layer_0").toModule().attr("self_attention")
                                .toModule().attr("in_proj_weight").toTensor();
  const at::Tensor after = result.module->attr("encoder").toModule().attr("layers").toModule()
                               .attr("encoder_layer_0").toModule().attr("self_attention")
                               .toModule().attr("in_proj_weight").toTensor();
  EXPECT_TRUE(after.equal(before.index_select(0, at::tensor(kept, at::kLong))));
  EXPECT_EQ(kept[8] - kept[0], 16) << "the key rows start one embed_dim after the query rows";
  // The smaller model is plain TorchScript: saved and loaded again it computes the same.
  std::stringstream saved;
  result.module->save(saved);
  torch::jit::Module loaded = torch::jit::load(saved);
  loaded.eval();
  at::NoGradGuard no_grad;
  const at::Tensor expected = result.module->forward({input}).toTensor();
  EXPECT_TRUE(loaded.forward({input}).toTensor().allclose(expected, 1e-6, 1e-6));
  // Only value rows matter: a head whose queries alone are masked keeps every head.
  NamedMasks queries_only;
  sdk::Masks m;
  m.weight = torch::ones({48, 16});
  m.weight.narrow(0, 4, 4).zero_();  // head 1's query rows
  queries_only.push_back({attn, m});
  const SpeedupResult unchanged = speedup_model(model, queries_only, input);
  EXPECT_EQ(parameter_shape(*unchanged.module, attn + ".in_proj_weight"), (Shape{48, 16}));
  // Every head silent: one (silent) head stays, so shapes stay ordinary; the block then adds
  // only out_proj's bias, as the masked model does.
  NamedMasks silent;
  sdk::Masks all;
  all.weight = torch::ones({48, 16});
  all.weight.narrow(0, 32, 16).zero_();
  all.bias = torch::ones({48});
  all.bias->narrow(0, 32, 16).zero_();
  silent.push_back({attn, all});
  const SpeedupResult one = speedup_model(model, silent, input);
  EXPECT_EQ(parameter_shape(*one.module, attn + ".in_proj_weight"), (Shape{12, 16}));
  EXPECT_EQ(int_attribute(*one.module, attn, "num_heads"), 1);
  EXPECT_TRUE(one.explained(1e-5)) << one.max_abs_diff_without_bn_shift;
}

// Speedup of tests/data/`file` under `masks` on a random input of `shape` (seeded), checked:
// no zeroed channel kept, and the smaller model computes what the masked one computes.
SpeedupResult expect_heads_removed(const std::string& file, const NamedMasks& masks,
                                   const std::vector<int64_t>& shape, uint64_t seed) {
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data" / file).string());
  torch::manual_seed(seed);
  SpeedupResult result = speedup_model(model, masks, torch::randn(shape));
  EXPECT_TRUE(result.blocked.empty()) << result.blocked.front().where << ": "
                                      << result.blocked.front().reason;
  EXPECT_TRUE(result.explained(1e-5)) << result.max_abs_diff_without_bn_shift;
  EXPECT_GT(result.reference_max_abs, 0.0);
  return result;
}

TEST(SpeedupHeadsTest, SwinWindowAttentionLosesHeadsWithTheirBiasTableColumns) {
  // torchvision's Swin (tiny: 16 channels, 2 heads of 8 in the first stage): transformer_head
  // on the first stage's qkv Linears, named; speedup removes the head's q, k and v rows, proj's
  // columns and its column of the relative position bias table, and gives the attention a
  // forward with the new head count. The example input is 16x64: the windows are shifted along
  // the width only (the height fits one window), which the rebuilt forward's mask must follow.
  const NamedMasks masks =
      masks_of("tv_swin_tiny.pt", "transformer_head",
               R"([{"sparsity": 0.5, "op_names": ["features.1.0.attn.qkv",
                                                  "features.1.1.attn.qkv"]}])",
               R"({"head_hidden_dim": 8})");
  ASSERT_EQ(masks.size(), 2u);
  const SpeedupResult result = expect_heads_removed("tv_swin_tiny.pt", masks, {1, 3, 16, 64}, 4);
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/tv_swin_tiny.pt").string());
  for (const char* block : {"features.1.0.attn", "features.1.1.attn"}) {
    const std::string attn = block;
    EXPECT_EQ(parameter_shape(*result.module, attn + ".qkv.weight"), (Shape{24, 16}));
    EXPECT_EQ(parameter_shape(*result.module, attn + ".qkv.bias"), (Shape{24}));
    EXPECT_EQ(parameter_shape(*result.module, attn + ".proj.weight"), (Shape{16, 8}));
    EXPECT_EQ(parameter_shape(*result.module, attn + ".relative_position_bias_table"),
              (Shape{49, 1}));
    EXPECT_EQ(int_attribute(*result.module, attn, "num_heads"), 1);
    EXPECT_EQ(int_attribute(*result.module, attn + ".qkv", "out_features"), 24);
    EXPECT_EQ(int_attribute(*result.module, attn + ".proj", "in_features"), 8);
  }
  // The second stage was not selected and keeps its heads.
  EXPECT_EQ(parameter_shape(*result.module, "features.3.0.attn.qkv.weight"), (Shape{96, 32}));
  // The kept bias table column is the kept head's.
  const at::Tensor table_before =
      model.attr("features").toModule().attr("1").toModule().attr("0").toModule()
          .attr("attn").toModule().attr("relative_position_bias_table").toTensor();
  const at::Tensor table_after =
      result.module->attr("features").toModule().attr("1").toModule().attr("0").toModule()
          .attr("attn").toModule().attr("relative_position_bias_table").toTensor();
  const at::Tensor qkv_mask = masks[0].second.weight;
  const int64_t kept = qkv_mask.view({3, 2, -1}).select(1, 0).eq(1).all().item<bool>() ? 0 : 1;
  EXPECT_TRUE(table_after.equal(table_before.narrow(1, kept, 1)));
  // Other input sizes, shifted along both axes or padded, agree too; so does the saved model.
  std::stringstream saved;
  result.module->save(saved);
  torch::jit::Module loaded = torch::jit::load(saved);
  loaded.eval();
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{2, 3, 32, 32}, std::vector<int64_t>{1, 3, 40, 36}}) {
    const SpeedupResult other = speedup_model(model, masks, torch::randn(shape));
    EXPECT_TRUE(other.explained(1e-5)) << other.max_abs_diff_without_bn_shift;
  }
}

TEST(SpeedupHeadsTest, ZeroRowsOutsideTheRemovedHeadsStayAndAreReported) {
  // Only the value rows of head 0 of a Swin attention zeroed (its q and k rows are not), and
  // one query row of head 1: the head goes with all its rows, the row stays (head 1 keeps all
  // its rows), and the report still names that one row of the nine zero rows.
  const std::string attn = "features.1.1.attn";
  sdk::Masks m;
  m.weight = torch::ones({48, 16});
  m.bias = torch::ones({48});
  m.weight.narrow(0, 32, 8).zero_();  // v part, head 0
  m.bias->narrow(0, 32, 8).zero_();
  m.weight.narrow(0, 8, 1).zero_();  // q part, head 1's first row
  m.bias->narrow(0, 8, 1).zero_();
  NamedMasks masks;
  masks.push_back({attn + ".qkv", m});
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/tv_swin_tiny.pt").string());
  torch::manual_seed(8);
  const SpeedupResult result = speedup_model(model, masks, torch::randn({1, 3, 32, 32}));
  EXPECT_TRUE(result.explained(1e-5)) << result.max_abs_diff_without_bn_shift;
  EXPECT_EQ(parameter_shape(*result.module, attn + ".qkv.weight"), (Shape{24, 16}));
  ASSERT_EQ(result.blocked.size(), 1u);
  EXPECT_EQ(result.blocked[0].where, attn + " (ShiftedWindowAttention): aten::reshape");
  EXPECT_EQ(result.blocked[0].channels, 1);
}

TEST(SpeedupHeadsTest, SwinV2CosineAttentionLosesHeadsWithTheirScaleAndPositionRows) {
  // Swin v2 (tiny; the second stage has 2 heads of 16): silencing head 0 of one shifted block
  // removes its rows, proj's columns, its logit scale and its row of the position MLP's last
  // Linear. 64x48 shifts the second stage's windows too (its grid, 8x6, exceeds a window).
  const std::string attn = "features.3.1.attn";
  NamedMasks masks;
  masks.push_back({attn + ".qkv", test::silenced_head(2, 16, 32, 0)});
  const SpeedupResult result =
      expect_heads_removed("tv_swin_v2_tiny.pt", masks, {1, 3, 64, 48}, 6);
  EXPECT_EQ(parameter_shape(*result.module, attn + ".qkv.weight"), (Shape{48, 32}));
  EXPECT_EQ(parameter_shape(*result.module, attn + ".proj.weight"), (Shape{32, 16}));
  EXPECT_EQ(parameter_shape(*result.module, attn + ".logit_scale"), (Shape{1, 1, 1}));
  EXPECT_EQ(parameter_shape(*result.module, attn + ".cpb_mlp.2.weight"), (Shape{1, 512}));
  EXPECT_EQ(int_attribute(*result.module, attn, "num_heads"), 1);
  // Its unshifted twin was not masked.
  EXPECT_EQ(parameter_shape(*result.module, "features.3.0.attn.qkv.weight"), (Shape{96, 32}));
  const std::map<std::string, std::vector<int64_t>> shapes = weight_shapes(result);
  EXPECT_EQ(shapes.size(), 3u);  // qkv, proj, cpb_mlp.2
  EXPECT_EQ(shapes.at(attn + ".cpb_mlp.2"), (Shape{1, 512}));
}

TEST(SpeedupHeadsTest, MaxVitPartitionAttentionLosesHeadsWithTheirBiasTableColumns) {
  // torchvision's MaxViT (tiny: 16 channels, heads of 8 in the first block's window and grid
  // attentions): transformer_head on their to_qkv Linears, named; speedup removes the head's
  // rows, merge's columns and the bias table's column, and merges 8 channels instead of 16.
  const std::string window = "blocks.0.layers.0.layers.window_attention.attn_layer.1";
  const std::string grid = "blocks.0.layers.0.layers.grid_attention.attn_layer.1";
  const NamedMasks masks = masks_of(
      "tv_maxvit_tiny.pt", "transformer_head",
      R"([{"sparsity": 0.5, "op_names": [")" + window + R"(.to_qkv", ")" + grid + R"(.to_qkv"]}])",
      R"({"head_hidden_dim": 8})");
  ASSERT_EQ(masks.size(), 2u);
  const SpeedupResult result =
      expect_heads_removed("tv_maxvit_tiny.pt", masks, {2, 3, 32, 32}, 7);
  for (const std::string& attn : {window, grid}) {
    EXPECT_EQ(parameter_shape(*result.module, attn + ".to_qkv.weight"), (Shape{24, 16}));
    EXPECT_EQ(parameter_shape(*result.module, attn + ".merge.weight"), (Shape{16, 8}));
    EXPECT_EQ(parameter_shape(*result.module, attn + ".relative_position_bias_table"),
              (Shape{9, 1}));
    EXPECT_EQ(int_attribute(*result.module, attn, "n_heads"), 1);
  }
  EXPECT_EQ(weight_shapes(result).size(), 4u);  // two to_qkv, two merge
}

// Two stock nn.TransformerEncoderLayers scripted by torch 2.x (ReLU post-norm, GELU pre-norm):
// in eval each runs one fused kernel that reads its submodules' weights, yet their heads and
// feed-forward channels go: speedup writes each layer as its module calls first. The input model
// keeps its fused forward.
TEST(SpeedupHeadsTest, EncoderLayersLoseHeadsAndFeedForwardChannelsDespiteTheirFusedKernel) {
  // post and pre run the fused kernel; silu (SiLU, which the kernel does not do) never does.
  NamedMasks masks =
      test::silenced_heads({"post.self_attn", "pre.self_attn", "silu.self_attn"}, 4, 4, 16, 2);
  for (const char* layer : {"post.linear1", "pre.linear1", "silu.linear1"}) {
    sdk::Masks m;
    m.weight = torch::ones({32, 16});
    m.bias = torch::ones({32});
    m.weight.narrow(0, 8, 16).zero_();
    m.bias->narrow(0, 8, 16).zero_();
    masks.emplace_back(layer, m);
  }
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/attention_encoder.pt").string());
  const auto runs_fused_kernel = [](const torch::jit::Module& m, const char* layer) {
    const torch::jit::Module l = m.attr(layer).toModule();
    return l.get_method("forward").graph()->toString().find(
               "aten::_transformer_encoder_layer_fwd") != std::string::npos;
  };
  ASSERT_TRUE(runs_fused_kernel(model, "post"));
  torch::manual_seed(5);
  const at::Tensor input = torch::randn({2, 5, 16});
  const SpeedupResult result = speedup_model(model, masks, input);
  EXPECT_TRUE(result.blocked.empty()) << result.blocked.front().where << ": "
                                      << result.blocked.front().reason;
  EXPECT_TRUE(result.explained(1e-5)) << result.max_abs_diff_without_bn_shift;
  EXPECT_GT(result.reference_max_abs, 0.0);
  for (const std::string layer : {"post", "pre", "silu"}) {
    EXPECT_EQ(parameter_shape(*result.module, layer + ".self_attn.in_proj_weight"),
              (Shape{36, 16}));
    EXPECT_EQ(int_attribute(*result.module, layer + ".self_attn", "num_heads"), 3);
    EXPECT_EQ(parameter_shape(*result.module, layer + ".self_attn.out_proj.weight"),
              (Shape{16, 12}));
    EXPECT_EQ(parameter_shape(*result.module, layer + ".linear1.weight"), (Shape{16, 16}));
    EXPECT_EQ(parameter_shape(*result.module, layer + ".linear2.weight"), (Shape{16, 16}));
  }
  EXPECT_TRUE(runs_fused_kernel(model, "post")) << "the input model was changed";
  EXPECT_FALSE(runs_fused_kernel(*result.module, "post"));
  // A layer no mask reaches keeps its fused kernel (and its speed).
  NamedMasks post_only(masks.begin(), masks.begin() + 1);
  const SpeedupResult one = speedup_model(model, post_only, input);
  EXPECT_TRUE(one.explained(1e-5)) << one.max_abs_diff_without_bn_shift;
  EXPECT_FALSE(runs_fused_kernel(*one.module, "post"));
  EXPECT_TRUE(runs_fused_kernel(*one.module, "pre"));
  EXPECT_EQ(int_attribute(*one.module, "post.self_attn", "num_heads"), 3);
  // Saved and loaded again, the smaller model computes what the dense model computes on the
  // masked weights.
  std::stringstream saved;
  result.module->save(saved);
  torch::jit::Module loaded = torch::jit::load(saved);
  loaded.eval();
  at::NoGradGuard no_grad;
  EXPECT_TRUE(loaded.forward({input}).toTensor().allclose(
      result.masked->forward({input}).toTensor(), 1e-5, 1e-5));
}

TEST(SpeedupHeadsTest, AttentionCalledWithItsWeightsReadKeepsItsHeadsAndSaysWhy) {
  // Heads whose value rows are zero in three attentions: batch-first without weights and
  // sequence-first lose them; the one whose attention weights are read keeps them.
  NamedMasks masks;
  for (const char* layer : {"plain", "sequence_first", "weights_read"}) {
    sdk::Masks m;
    m.weight = torch::ones({48, 16});
    m.weight.narrow(0, 32 + 4, 4).zero_();  // head 1's value rows
    m.bias = torch::ones({48});
    m.bias->narrow(0, 32 + 4, 4).zero_();
    masks.push_back({layer, m});
  }
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/mha_calls.pt").string());
  torch::manual_seed(5);
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 5, 16}));
  EXPECT_TRUE(result.explained(1e-5)) << result.max_abs_diff_without_bn_shift;
  EXPECT_EQ(parameter_shape(*result.module, "plain.in_proj_weight"), (Shape{36, 16}));
  EXPECT_EQ(parameter_shape(*result.module, "sequence_first.in_proj_weight"), (Shape{36, 16}));
  EXPECT_EQ(parameter_shape(*result.module, "weights_read.in_proj_weight"), (Shape{48, 16}));
  ASSERT_EQ(result.blocked.size(), 1u);
  EXPECT_THAT(result.blocked[0].where, HasSubstr("weights_read"));
  EXPECT_THAT(result.blocked[0].reason,
              AllOf(HasSubstr("keeps its 1 heads with zero value rows"),
                    HasSubstr("need_weights is not False")));
  // The rebuilt forward refuses what it was not planned for, by name.
  torch::jit::Module small = *result.module;
  const at::Tensor x = torch::randn({2, 5, 16});
  try {
    small.attr("plain").toModule().forward({x, x, x});  // need_weights defaults to True
    ADD_FAILURE() << "the rebuilt attention returned weights";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("lithe speedup removed heads of this attention"));
  }
}

TEST(SpeedupTest, AClassTokenBeforeATokenMlpStillLetsItsHiddenWidthShrink) {
  // ViT: cat([class_token.expand(...), patches], dim=1) makes tokens whose features the walk
  // does not follow (the parameter cannot shrink); the MLP's first Linear still loses its
  // pruned rows and the second the matching columns.
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/ops_class_token.pt").string());
  NamedMasks masks;
  masks.push_back({"fc1", zero_first({12, 8}, 5, true)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 8, 8}));
  EXPECT_EQ(parameter_shape(*result.module, "fc1.weight"), (Shape{7, 8}));
  EXPECT_EQ(parameter_shape(*result.module, "fc2.weight"), (Shape{8, 7}));
  EXPECT_EQ(parameter_shape(*result.module, "proj.weight"), (Shape{8, 3, 2, 2}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, SegmentationFeatureDictsAndInterpolationShrink) {
  // An IntermediateLayerGetter (`if name in self.return_layers`, constant dict attribute) fills
  // an OrderedDict that the head reads by key; interpolation to `low.shape[-2:]` reads only
  // spatial sizes. The features' channels go through the dict to the heads.
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/ops_segmentation.pt").string());
  NamedMasks masks;
  masks.push_back({"backbone.stem", zero_first({8, 3, 3, 3}, 2, true)});
  masks.push_back({"backbone.deep", zero_first({12, 8, 3, 3}, 4, true)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 12, 12}));
  const torch::jit::Module& small = *result.module;
  EXPECT_TRUE(result.blocked.empty()) << result.blocked.front().where << ": "
                                      << result.blocked.front().reason;
  EXPECT_EQ(parameter_shape(small, "backbone.stem.weight"), (Shape{6, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "backbone.down.weight"), (Shape{8, 6, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "low_head.weight"), (Shape{5, 6, 1, 1}));
  EXPECT_EQ(parameter_shape(small, "backbone.deep.weight"), (Shape{8, 8, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "high_head.weight"), (Shape{5, 8, 1, 1}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
}

TEST(SpeedupTest, ATensorStoredIntoAListItCannotReadKeepsItsChannels) {
  // parts[0] = y: item_value gives up on a list written by index, so the reader keeps every
  // channel; y, stored there, must keep them too (else conv2 would get fewer than it reads).
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/ops_containers.pt").string());
  NamedMasks masks;
  masks.push_back({"conv1", zero_first({4, 3, 3, 3}, 2, true)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 6, 6}));
  EXPECT_EQ(parameter_shape(*result.module, "conv1.weight"), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(*result.module, "conv2.weight"), (Shape{4, 4, 3, 3}));
  ASSERT_FALSE(result.blocked.empty());
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

TEST(SpeedupTest, TwoDepthwiseConvolutionsOfOneClassTypeGetTheirOwnWidths) {
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/speedup_twin_dw.pt").string());
  ASSERT_EQ(model.attr("dw_a").toModule().type(), model.attr("dw_b").toModule().type());
  NamedMasks masks;
  masks.push_back({"conv1", zero_first({16, 3, 3, 3}, 4, false)});
  masks.push_back({"dw_a", zero_first({16, 1, 3, 3}, 4, false)});
  masks.push_back({"pw_a", zero_first({16, 16, 1, 1}, 8, false)});
  masks.push_back({"dw_b", zero_first({16, 1, 3, 3}, 8, false)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 3, 8, 8}));
  torch::jit::Module small = *result.module;
  EXPECT_EQ(parameter_shape(small, "dw_a.weight"), (Shape{12, 1, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "dw_b.weight"), (Shape{8, 1, 3, 3}));
  EXPECT_EQ(small.attr("dw_a").toModule().type()->getConstant("groups").toInt(), 12);
  EXPECT_EQ(small.attr("dw_b").toModule().type()->getConstant("groups").toInt(), 8);
  EXPECT_EQ(parameter_shape(small, "pw_b.weight"), (Shape{16, 8, 1, 1}));
  EXPECT_LT(result.max_abs_diff_without_bn_shift, 1e-5);
  // The input keeps its shared type and its graphs.
  EXPECT_EQ(model.attr("dw_a").toModule().type()->getConstant("groups").toInt(), 16);
  std::stringstream stream;
  small.save(stream);
  torch::jit::Module loaded = torch::jit::load(stream);
  EXPECT_EQ(loaded.forward({torch::randn({1, 3, 8, 8})}).toTensor().sizes(), (Shape{1, 10}));
}

TEST(SpeedupTest, AConstantReshapeSizeKeepsTheChannelsBeforeItAndSaysWhy) {
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/speedup_const_view.pt").string());
  NamedMasks masks;
  masks.push_back({"conv1", zero_first({6, 1, 5, 5}, 3, true)});
  masks.push_back({"conv2", zero_first({16, 6, 5, 5}, 8, true)});
  const SpeedupResult result = speedup_model(model, masks, torch::randn({2, 1, 28, 28}));
  EXPECT_EQ(parameter_shape(*result.module, "conv1.weight"), (Shape{3, 1, 5, 5}));
  EXPECT_EQ(parameter_shape(*result.module, "conv2.weight"), (Shape{16, 3, 5, 5}));
  ASSERT_EQ(result.blocked.size(), 1u);
  EXPECT_THAT(result.blocked[0].reason, HasSubstr("constant size 256"));
  EXPECT_EQ(result.blocked[0].channels, 8);
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

// Masks that zero the listed filters (weight and bias).
sdk::Masks zero_filters(const std::vector<int64_t>& weight_shape, std::vector<int64_t> filters) {
  at::Tensor w = torch::ones(weight_shape);
  at::Tensor b = torch::ones({weight_shape[0]});
  for (const int64_t f : filters) {
    w[f].zero_();
    b[f].zero_();
  }
  return {w, b};
}

TEST(SpeedupTest, AGroupedConvolutionKeepsEveryGroupEquallyWide) {
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/speedup_grouped.pt").string());
  NamedMasks masks;
  // conv1 zeroes 2 channels of gconv's first input group and 1 of its second; gconv zeroes 1
  // filter of its first group and 2 of its second. One per group can go on each side (NNI's
  // GroupMaskConflict keeps the lowest-index removals).
  masks.push_back({"conv1", zero_filters({8, 3, 3, 3}, {0, 1, 4})});
  masks.push_back({"gconv", zero_filters({8, 4, 3, 3}, {0, 4, 5})});
  const at::Tensor input = torch::randn({2, 3, 8, 8});
  const SpeedupResult result = speedup_model(model, masks, input);
  const torch::jit::Module& small = *result.module;
  EXPECT_EQ(parameter_shape(small, "conv1.weight"), (Shape{6, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "gconv.weight"), (Shape{6, 3, 3, 3}));
  EXPECT_EQ(small.attr("gconv").toModule().type()->getConstant("groups").toInt(), 2);
  EXPECT_EQ(parameter_shape(small, "fc.weight"), (Shape{10, 6}));
  ASSERT_EQ(result.layers.size(), 3u);
  EXPECT_EQ(result.layers[0].kept_outputs, (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(result.layers[1].kept_outputs, (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

// ---- rules a channel must not be removed against (tests/data/speedup_rule_*.pt) -------------

torch::jit::Module rule_model(const std::string& name) {
  return torch::jit::load(
      (test::source_dir() / ("tests/data/speedup_rule_" + name + ".pt")).string());
}

SpeedupResult speedup_rule(const std::string& name, const NamedMasks& masks,
                           std::vector<int64_t> input_shape = {2, 3, 8, 8}) {
  const torch::jit::Module model = rule_model(name);
  torch::manual_seed(3);
  SpeedupResult result = speedup_model(model, masks, torch::randn(input_shape));
  EXPECT_TRUE(result.explained()) << name << ": unexplained difference "
                                  << result.max_abs_diff_without_bn_shift;
  return result;
}

TEST(SpeedupRuleTest, AnInPlaceAddMakesAZeroChannelNonZero) {
  const SpeedupResult result =
      speedup_rule("inplace_add", {{"conv1", zero_filters({8, 3, 3, 3}, {0})}});
  EXPECT_EQ(parameter_shape(*result.module, "conv1.weight"), (Shape{8, 3, 3, 3}));
}

TEST(SpeedupRuleTest, SoftmaxOverChannelsKeepsThem) {
  const SpeedupResult result =
      speedup_rule("channel_softmax", {{"conv1", zero_filters({8, 3, 3, 3}, {0})}});
  EXPECT_EQ(parameter_shape(*result.module, "conv1.weight"), (Shape{8, 3, 3, 3}));
}

// Slices along other axes (a spatial crop) and full-range slices along the channels (a gate
// broadcast by s[:, :, None, None], scripted by torch 2.x as two slices) pass channels; a slice
// that keeps only some channels (z[:, :4]) keeps the channels of what it slices, and says so.
TEST(SpeedupRuleTest, SlicesPassChannelsUnlessTheyCutTheChannelAxis) {
  const SpeedupResult through =
      speedup_rule("slices", {{"conv1", zero_filters({8, 3, 3, 3}, {0, 5})}});
  EXPECT_TRUE(through.blocked.empty()) << through.blocked.front().where << ": "
                                       << through.blocked.front().reason;
  EXPECT_EQ(parameter_shape(*through.module, "conv1.weight"), (Shape{6, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(*through.module, "fc1.weight"), (Shape{4, 6}));
  EXPECT_EQ(parameter_shape(*through.module, "fc2.weight"), (Shape{6, 4}));
  EXPECT_EQ(parameter_shape(*through.module, "conv2.weight"), (Shape{8, 6, 3, 3}));
  EXPECT_LT(through.max_abs_diff, 1e-5);
  const SpeedupResult cut =
      speedup_rule("slices", {{"conv2", zero_filters({8, 8, 3, 3}, {1, 6})}});
  EXPECT_EQ(parameter_shape(*cut.module, "conv2.weight"), (Shape{8, 8, 3, 3}));
  ASSERT_FALSE(cut.blocked.empty());
  EXPECT_THAT(cut.blocked[0].where, HasSubstr("aten::slice"));
}

TEST(SpeedupRuleTest, AGateZeroOnOneSideOfACatRemovesTheChannelOnBoth) {
  const SpeedupResult result =
      speedup_rule("gated_cat", {{"conv_g", zero_filters({8, 3, 3, 3}, {0})}});
  const torch::jit::Module& small = *result.module;
  EXPECT_EQ(parameter_shape(small, "conv_g.weight"), (Shape{7, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "conv_a.weight"), (Shape{3, 3, 3, 3}));  // dead behind the gate
  EXPECT_EQ(parameter_shape(small, "conv_b.weight"), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(small, "conv_out.weight"), (Shape{4, 7, 3, 3}));
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

TEST(SpeedupRuleTest, ADepthwiseBiasMakesAZeroInputChannelNonZero) {
  const SpeedupResult result =
      speedup_rule("depthwise_bias", {{"conv1", zero_filters({8, 3, 3, 3}, {0})}});
  EXPECT_EQ(parameter_shape(*result.module, "conv1.weight"), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(*result.module, "dw.weight"), (Shape{8, 1, 3, 3}));
}

TEST(SpeedupRuleTest, CodeThatReadsTheChannelCountKeepsIt) {
  const SpeedupResult result =
      speedup_rule("channel_assert", {{"conv1", zero_filters({8, 3, 3, 3}, {0})}});
  EXPECT_EQ(parameter_shape(*result.module, "conv1.weight"), (Shape{8, 3, 3, 3}));
  ASSERT_FALSE(result.blocked.empty());
  EXPECT_THAT(result.blocked[0].reason, HasSubstr("channel count is read"));
  EXPECT_THAT(result.blocked[0].where, HasSubstr("aten::size"));
}

TEST(SpeedupRuleTest, BatchNormWithoutRunningStatisticsShiftsByBeta) {
  const SpeedupResult result =
      speedup_rule("batchnorm_no_stats", {{"conv1", zero_filters({8, 3, 3, 3}, {0, 1})}});
  EXPECT_EQ(parameter_shape(*result.module, "conv1.weight"), (Shape{6, 3, 3, 3}));
  EXPECT_EQ(parameter_shape(*result.module, "bn.weight"), (Shape{6}));
  ASSERT_EQ(result.batchnorm_shifts.size(), 1u);
  EXPECT_EQ(result.batchnorm_shifts[0].channels, 2);
}

TEST(SpeedupRuleTest, BatchNormWithoutAffineParametersShiftsByItsMean) {
  const SpeedupResult result =
      speedup_rule("batchnorm_no_affine", {{"conv1", zero_filters({8, 3, 3, 3}, {0, 1})}});
  EXPECT_EQ(parameter_shape(*result.module, "bn.running_mean"), (Shape{6}));
  ASSERT_EQ(result.batchnorm_shifts.size(), 1u);
  EXPECT_EQ(result.batchnorm_shifts[0].channels, 2);  // −μ/√(σ²+ε)
  EXPECT_GT(result.max_abs_diff, 1e-4);
}

TEST(SpeedupRuleTest, AWeightReadOutsideItsLayerKeepsTheLayer) {
  const torch::jit::Module model = rule_model("tied_weight");
  at::Tensor w = torch::ones({8, 8});
  at::Tensor b = torch::ones({8});
  w.slice(0, 0, 2).zero_();
  b.slice(0, 0, 2).zero_();
  const SpeedupResult result = speedup_rule("tied_weight", {{"fc1", {w, b}}}, {2, 8});
  EXPECT_EQ(parameter_shape(*result.module, "fc1.weight"), (Shape{8, 8}));
  ASSERT_FALSE(result.blocked.empty());
  EXPECT_THAT(result.blocked[0].reason, HasSubstr("weight is also read by"));
}

TEST(SpeedupRuleTest, DictOutputsAreCheckedToo) {
  const SpeedupResult result =
      speedup_rule("dict_output", {{"conv1", zero_filters({8, 3, 3, 3}, {0, 1})}});
  EXPECT_EQ(parameter_shape(*result.module, "conv2.weight"), (Shape{4, 6, 3, 3}));
  EXPECT_GT(result.reference_max_abs, 0.0);  // the dict's tensor was compared
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

TEST(SpeedupRuleTest, ALayerWithEveryFilterPrunedKeepsOneAndStillRuns) {
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("lenet").string());
  NamedMasks masks;
  masks.push_back({"conv2", {torch::zeros({16, 6, 5, 5}), torch::zeros({16})}});
  const SpeedupResult result = speedup_model(model, masks, input_for("lenet"));
  EXPECT_EQ(parameter_shape(*result.module, "conv2.weight"), (Shape{1, 6, 5, 5}));
  EXPECT_EQ(parameter_shape(*result.module, "fc1.weight"), (Shape{120, 16}));
  EXPECT_LT(result.max_abs_diff, 1e-5);
}

TEST(SpeedupTest, MasksThatDoNotFitTheModelAreRejectedByLayer) {
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("lenet").string());
  NamedMasks masks;
  masks.push_back({"conv1", {torch::ones({6, 1, 3, 3}), torch::ones({6})}});
  EXPECT_THAT([&] { speedup_model(model, masks, input_for("lenet")); },
              ::testing::ThrowsMessage<sdk::Error>(HasSubstr("conv1")));
  NamedMasks unknown;
  unknown.push_back({"conv9", {torch::ones({6, 1, 5, 5}), torch::ones({6})}});
  EXPECT_THAT([&] { speedup_model(model, unknown, input_for("lenet")); },
              ::testing::ThrowsMessage<sdk::Error>(HasSubstr("conv9")));
}

TEST(SpeedupTest, AnInputOfTheWrongShapeIsAClearError) {
  const torch::jit::Module model = torch::jit::load(test::conformance_model_file("lenet").string());
  const NamedMasks masks = prune("lenet", "l1_filter", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  EXPECT_THAT([&] { speedup_model(model, masks, torch::zeros({1, 3, 28, 28})); },
              ::testing::ThrowsMessage<sdk::Error>(HasSubstr("[1, 3, 28, 28]")));
}

}  // namespace
}  // namespace lithe::host
