#include "plugins/dorefa/dorefa.h"

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

namespace lithe::plugins::dorefa {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

/// {"quant_types": ["weight"], "quant_bits": bits}.
nlohmann::ordered_json weight_entry(int bits) {
  return test::quant_entry({"weight"}, bits);
}

/// NNI's last two steps for grid indices k at 2^bits − 1 = levels: t = k / levels; 2t − 1.
at::Tensor from_grid(std::vector<float> k, double levels) {
  return at::tensor(k) / levels * 2 - 1;
}

TEST(DorefaQuantizerTest, NniExampleTwoBits) {
  // Reference §7 case 25: W = [.5, 1, −.77, 0] → grid [2, 3, 0, 2] of 3 → [1/3, 1, −1, 1/3];
  // the zero weight sits at t = .5, t·3 = 1.5, rounded to 2.
  const at::Tensor weight = at::tensor({.5f, 1.f, -.77f, 0.f});
  auto layer = test::quant_layer(weight, weight_entry(2));
  test::AttachedQuantizer dorefa(register_algorithms, "dorefa", {layer.get()});
  const at::Tensor quantized = dorefa.quantizer->quantize_weight(weight, *layer, true);
  EXPECT_TRUE(quantized.equal(from_grid({2, 3, 0, 2}, 3))) << quantized;
  EXPECT_NEAR(quantized[0].item<float>(), 1.0 / 3.0, 1e-6);
  EXPECT_TRUE(weight.equal(at::tensor({.5f, 1.f, -.77f, 0.f}))) << "the float weight is kept";
}

TEST(DorefaQuantizerTest, RoundsHalfToEven) {
  // One bit: levels = 1 and the zero weight lands exactly on t = .5, which rounds to 0 (half to
  // even), not 1 (half away from zero): W_q = 2·0 − 1 = −1.
  const at::Tensor quantized = dorefa_quantize(at::tensor({1.f, 0.f, -1.f}), 1);
  EXPECT_TRUE(quantized.equal(at::tensor({1.f, -1.f, -1.f}))) << quantized;
}

TEST(DorefaQuantizerTest, AllZeroWeightGivesZerosNotNan) {
  const at::Tensor quantized = dorefa_quantize(at::zeros({2, 3}), 4);
  EXPECT_TRUE(quantized.equal(at::zeros({2, 3}))) << quantized;
  EXPECT_FALSE(at::isnan(dorefa_quantize(at::zeros({1}), 1)).any().item<bool>());
}

TEST(DorefaQuantizerTest, StraightThroughGradientThroughTheSdkAdapter) {
  const at::Tensor weight = at::tensor({.5f, 1.f, -.77f, 0.f}).requires_grad_(true);
  auto layer = test::quant_layer(weight, weight_entry(2));
  test::AttachedQuantizer dorefa(register_algorithms, "dorefa", {layer.get()});
  const at::Tensor quantized =
      sdk::apply_quant_grad(*dorefa.quantizer, weight, sdk::QuantType::kWeight, *layer, true);
  EXPECT_TRUE(quantized.equal(from_grid({2, 3, 0, 2}, 3)));
  const at::Tensor upstream = at::tensor({1.f, -2.f, 3.f, 4.f});
  (quantized * upstream).sum().backward();
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_TRUE(weight.grad().equal(upstream)) << weight.grad();
}

class DorefaGoldenTest : public ::testing::TestWithParam<int> {};

TEST_P(DorefaGoldenTest, MatchesNniGoldenLenetWeightsBitForBit) {
  const int bits = GetParam();
  const auto conformance = test::nni_data_dir();
  const auto golden = test::load_tensor_dict(
      conformance / "golden" / ("dorefa_lenet_w" + std::to_string(bits)) / "tensors.pt");
  const test::GoldenLayers layers = test::golden_quant_layers(
      "lenet", {"conv1", "conv2", "fc1", "fc2", "fc3"}, weight_entry(bits));
  test::AttachedQuantizer dorefa(register_algorithms, "dorefa", layers.views);
  for (sdk::LayerView* layer : layers.views) {
    const at::Tensor quantized = dorefa.quantizer->quantize_weight(layer->weight(), *layer, false);
    EXPECT_TRUE(quantized.equal(golden.at("fwd0/" + layer->name() + ".weight"))) << layer->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Bits, DorefaGoldenTest, ::testing::Values(2, 4, 8));

TEST(DorefaQuantizerConfigTest, AcceptsWeightOnlyAndReadsEveryKey) {
  test::AttachedQuantizer dorefa(register_algorithms, "dorefa", {});
  const sdk::Options entry = test::config_entry(weight_entry(3), 0);
  sdk::check_quant_config(entry);
  EXPECT_NO_THROW(dorefa.quantizer->validate_config(entry));
  EXPECT_TRUE(sdk::unread_option_paths(entry).empty());
}

TEST(DorefaQuantizerConfigTest, RejectsInputAndOutputNamingTheJsonPath) {
  test::AttachedQuantizer dorefa(register_algorithms, "dorefa", {});
  for (const char* type : {"input", "output"}) {
    const sdk::Options entry = test::config_entry({{"quant_types", {type}}, {"quant_bits", 8}}, 1);
    EXPECT_THAT([&] { dorefa.quantizer->validate_config(entry); },
                ThrowsMessage<sdk::Error>(HasSubstr("/config_list/1/quant_types: dorefa does not "
                                                    "quantize \"" + std::string(type) + "\"")));
  }
}

TEST(DorefaQuantizerConfigTest, LayerWithoutWeightIsRejectedAtAttach) {
  auto relu = test::quant_layer(at::Tensor(), weight_entry(2), "relu1");
  EXPECT_THAT([&] { test::AttachedQuantizer dorefa(register_algorithms, "dorefa", {relu.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr("layer 'relu1': dorefa quantizes weights")));
}

TEST(DorefaQuantizerConfigTest, RegistersTheQuantizerUnderItsName) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  EXPECT_NE(registry.find(host::AlgorithmKind::kQuantizer, "dorefa"), nullptr);
}

}  // namespace
}  // namespace lithe::plugins::dorefa
