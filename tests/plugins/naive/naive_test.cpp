#include "plugins/naive/naive.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/quantizer.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/paths.h"
#include "support/plugin_test.h"
#include "support/quantizer_test.h"

namespace lithe::plugins::naive {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

/// {"quant_types": ["weight"], "quant_bits": {"weight": bits}}.
nlohmann::ordered_json weight_entry(int bits) {
  return test::quant_entry({"weight"}, {{"weight", bits}});
}

// NNI's expected values: float(q) · s with s = max|W| / 127 computed in float32.
at::Tensor nni_dequantized(std::vector<float> q, float max_abs) {
  return at::tensor(q).mul(at::tensor(max_abs) / 127);
}

TEST(NaiveQuantizerTest, NniExampleTruncatesTowardZero) {
  // Reference §7 case 24: 63.5 → 63, 127 → 127, −97.79 → −97, 38.1 → 38 (no rounding).
  const at::Tensor weight = at::tensor({.5f, 1.f, -.77f, .3f});
  auto layer = test::quant_layer(weight, weight_entry(8));
  test::AttachedQuantizer naive(register_algorithms, "naive", {layer.get()});
  const at::Tensor quantized = naive.quantizer->quantize_weight(weight, *layer, true);
  EXPECT_TRUE(quantized.equal(nni_dequantized({63, 127, -97, 38}, 1.f))) << quantized;
  EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale").equal(at::tensor({1.f}) / 127));
  EXPECT_TRUE(weight.equal(at::tensor({.5f, 1.f, -.77f, .3f}))) << "the float weight is kept";
}

TEST(NaiveQuantizerTest, ScaleIsARunningMaxThatNeverDecreases) {
  // Reference §7 case 24: after a weight with max 2, W = [1, .3] keeps s = 2/127.
  auto layer = test::quant_layer(at::tensor({2.f, -.5f}), weight_entry(8));
  test::AttachedQuantizer naive(register_algorithms, "naive", {layer.get()});
  naive.quantizer->quantize_weight(at::tensor({2.f, -.5f}), *layer, true);
  const at::Tensor second = naive.quantizer->quantize_weight(at::tensor({1.f, .3f}), *layer, true);
  EXPECT_TRUE(second.equal(nni_dequantized({63, 19}, 2.f))) << second;
  EXPECT_NEAR(second[0].item<float>(), 0.992126f, 1e-6);
  EXPECT_NEAR(second[1].item<float>(), 0.299213f, 1e-6);
  EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale").equal(at::tensor({2.f}) / 127));
  // A larger weight raises it again.
  naive.quantizer->quantize_weight(at::tensor({-4.f, 1.f}), *layer, false);
  EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale").equal(at::tensor({4.f}) / 127));
}

TEST(NaiveQuantizerTest, ScaleIsUpdatedInPlaceOnTheAttributeTensor) {
  // The host registers the attribute tensor as a module buffer right after attach: the same
  // object must carry every later value.
  auto layer = test::quant_layer(at::tensor({1.f, 2.f}), weight_entry(8));
  test::AttachedQuantizer naive(register_algorithms, "naive", {layer.get()});
  const at::Tensor registered = sdk::tensor_attribute(*layer, "weight_scale");
  EXPECT_EQ(registered.scalar_type(), at::kFloat);
  EXPECT_EQ(registered.sizes(), at::IntArrayRef({1}));
  EXPECT_EQ(registered.item<float>(), 0.f) << "NNI's layer_scale starts at 0";
  naive.quantizer->quantize_weight(at::tensor({1.f, 2.f}), *layer, true);
  EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale").is_same(registered));
  EXPECT_EQ(registered.item<float>(), (at::tensor(2.f) / 127).item<float>());
}

TEST(NaiveQuantizerTest, RestoredScaleIsKeptAndContinues) {
  auto layer = test::quant_layer(at::tensor({1.f, .3f}), weight_entry(8));
  const at::Tensor saved = at::tensor({2.f}) / 127;
  layer->set_attribute("weight_scale", saved);  // the host restores a saved model's buffers
  test::AttachedQuantizer naive(register_algorithms, "naive", {layer.get()});
  EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale").is_same(saved));
  const at::Tensor quantized =
      naive.quantizer->quantize_weight(at::tensor({1.f, .3f}), *layer, false);
  EXPECT_TRUE(quantized.equal(nni_dequantized({63, 19}, 2.f)));
}

TEST(NaiveQuantizerTest, OtherBitWidthsUseTheirSignedGrid) {
  // 4 bits: qmax = 7, s = 7/7 = 1: 3.5 → 3, −2.9 → −2 (truncation toward zero).
  const at::Tensor weight = at::tensor({-7.f, 3.5f, -2.9f, .4f});
  auto layer = test::quant_layer(weight, weight_entry(4));
  test::AttachedQuantizer naive(register_algorithms, "naive", {layer.get()});
  const at::Tensor quantized = naive.quantizer->quantize_weight(weight, *layer, true);
  EXPECT_EQ(sdk::tensor_attribute(*layer, "weight_scale").item<float>(), 1.f);
  EXPECT_TRUE(quantized.equal(at::tensor({-7.f, 3.f, -2.f, 0.f}))) << quantized;
  // NNI's truncation is literal: with s = 1/7 in float32 (slightly above 1/7), 1 / s is
  // 6.9999998 and truncates to 6, not 7.
  const at::Tensor fractions = at::tensor({1.f, .5f});
  auto small = test::quant_layer(fractions, weight_entry(4));
  test::AttachedQuantizer again(register_algorithms, "naive", {small.get()});
  const at::Tensor s = at::tensor(1.f) / 7;
  EXPECT_TRUE(again.quantizer->quantize_weight(fractions, *small, true)
                  .equal(at::tensor({6.f, 3.f}).mul(s)));
}

TEST(NaiveQuantizerTest, AllZeroWeightGivesZerosNotNan) {
  auto layer = test::quant_layer(at::zeros({3}), weight_entry(8));
  test::AttachedQuantizer naive(register_algorithms, "naive", {layer.get()});
  const at::Tensor quantized = naive.quantizer->quantize_weight(at::zeros({3}), *layer, true);
  EXPECT_TRUE(quantized.equal(at::zeros({3}))) << quantized;
  EXPECT_EQ(sdk::tensor_attribute(*layer, "weight_scale").item<float>(), 0.f);
  // Once the weight moves, the scale follows as usual.
  const at::Tensor later = naive.quantizer->quantize_weight(at::tensor({0.f, 1.f, -.5f}), *layer, true);
  EXPECT_TRUE(later.equal(nni_dequantized({0, 127, -63}, 1.f))) << later;
}

TEST(NaiveQuantizerTest, StraightThroughGradientThroughTheSdkAdapter) {
  const at::Tensor weight = at::tensor({.5f, 1.f, -.77f, .3f}).requires_grad_(true);
  auto layer = test::quant_layer(weight, weight_entry(8));
  test::AttachedQuantizer naive(register_algorithms, "naive", {layer.get()});
  // Evaluation mode quantizes too (NNI applies naive on every forward).
  const at::Tensor quantized =
      sdk::apply_quant_grad(*naive.quantizer, weight, sdk::QuantType::kWeight, *layer, false);
  EXPECT_TRUE(quantized.equal(nni_dequantized({63, 127, -97, 38}, 1.f)));
  const at::Tensor upstream = at::tensor({1.f, -2.f, 3.f, 4.f});
  (quantized * upstream).sum().backward();
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_TRUE(weight.grad().equal(upstream)) << weight.grad();
}

TEST(NaiveQuantizerTest, MatchesNniGoldenLenetWeightsAndScalesBitForBit) {
  const auto conformance = test::nni_data_dir();
  const auto golden = test::load_tensor_dict(conformance / "golden/naive_lenet_w8/tensors.pt");
  const test::GoldenLayers layers =
      test::golden_quant_layers("lenet", {"conv1", "conv2", "fc1", "fc2", "fc3"}, weight_entry(8));
  test::AttachedQuantizer naive(register_algorithms, "naive", layers.views);
  for (int forward = 0; forward < 2; ++forward) {  // the recorded eval forwards
    const std::string prefix = "fwd" + std::to_string(forward) + "/";
    for (sdk::LayerView* layer : layers.views) {
      const at::Tensor quantized =
          naive.quantizer->quantize_weight(layer->weight(), *layer, false);
      EXPECT_TRUE(quantized.equal(golden.at(prefix + layer->name() + ".weight")))
          << prefix << layer->name();
      EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale")
                      .equal(golden.at(prefix + "layer_scale." + layer->name())))
          << prefix << layer->name();
    }
  }
}

TEST(NaiveQuantizerConfigTest, AcceptsWeightOnlyAndReadsEveryKey) {
  test::AttachedQuantizer naive(register_algorithms, "naive", {});
  const sdk::Options entry = test::config_entry(weight_entry(8), 0);
  sdk::check_quant_config(entry);  // the host's common check, before validate_config
  EXPECT_NO_THROW(naive.quantizer->validate_config(entry));
  EXPECT_TRUE(sdk::unread_option_paths(entry).empty());
}

TEST(NaiveQuantizerConfigTest, RejectsInputAndOutputNamingTheJsonPath) {
  test::AttachedQuantizer naive(register_algorithms, "naive", {});
  for (const char* type : {"input", "output"}) {
    const sdk::Options entry =
        test::config_entry({{"quant_types", {"weight", type}}, {"quant_bits", 8}}, 2);
    EXPECT_THAT([&] { naive.quantizer->validate_config(entry); },
                ThrowsMessage<sdk::Error>(HasSubstr("/config_list/2/quant_types")));
    EXPECT_THAT([&] { naive.quantizer->validate_config(entry); },
                ThrowsMessage<sdk::Error>(HasSubstr("naive does not quantize \"" +
                                                    std::string(type) + "\"")));
  }
}

TEST(NaiveQuantizerConfigTest, RejectsOneBitNamingQuantBits) {
  test::AttachedQuantizer naive(register_algorithms, "naive", {});
  const sdk::Options entry = test::config_entry(weight_entry(1), 3);
  EXPECT_THAT([&] { naive.quantizer->validate_config(entry); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/3/quant_bits/weight: naive needs "
                                                  "at least 2 bits for \"weight\"")));
  EXPECT_EQ(test::error_code([&] { naive.quantizer->validate_config(entry); }),
            sdk::Errc::kInvalidConfig);
  EXPECT_NO_THROW(naive.quantizer->validate_config(test::config_entry(weight_entry(2), 0)));
}

TEST(NaiveQuantizerConfigTest, LayerWithoutWeightIsRejectedAtAttach) {
  auto relu = test::quant_layer(at::Tensor(), weight_entry(8), "relu1");
  EXPECT_THAT([&] { test::AttachedQuantizer naive(register_algorithms, "naive", {relu.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr("layer 'relu1': naive quantizes weights")));
}

TEST(NaiveQuantizerConfigTest, RegistersTheQuantizerUnderItsName) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  EXPECT_NE(registry.find(host::AlgorithmKind::kQuantizer, "naive"), nullptr);
  EXPECT_THAT([&] { register_algorithms(registry); },
              ThrowsMessage<sdk::Error>(HasSubstr("duplicate quantizer 'naive'")));
}

}  // namespace
}  // namespace lithe::plugins::naive
