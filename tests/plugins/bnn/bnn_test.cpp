#include "plugins/bnn/bnn.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
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

namespace lithe::plugins::bnn {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using sdk::QuantType;

/// {"quant_types": types, "quant_bits": 1}.
nlohmann::ordered_json entry_json(std::vector<std::string> types) {
  return test::quant_entry(types, 1);
}

TEST(BnnQuantizerTest, NniExampleSignWithBothZerosToPlusOne) {
  // Reference §7 case 25: [[.5, −1], [0, −0]] → [[1, −1], [1, 1]], for weights and outputs.
  const at::Tensor weight = at::tensor({.5f, -1.f, 0.f, -0.f}).reshape({2, 2});
  auto layer = test::quant_layer(weight, entry_json({"weight", "output"}));
  test::AttachedQuantizer bnn(register_algorithms, "bnn", {layer.get()});
  const at::Tensor expected = at::tensor({1.f, -1.f, 1.f, 1.f}).reshape({2, 2});
  const at::Tensor w = bnn.quantizer->quantize_weight(weight, *layer, true);
  EXPECT_TRUE(w.equal(expected)) << w;
  EXPECT_FALSE(std::signbit(w[1][1].item<float>())) << "−0 becomes +1, not −1 or −0";
  EXPECT_TRUE(bnn.quantizer->quantize_output(weight, *layer, false).equal(expected));
  EXPECT_TRUE(weight.equal(at::tensor({.5f, -1.f, 0.f, -0.f}).reshape({2, 2})));
}

TEST(BnnQuantizerTest, ClippedOutputGradientThroughTheSdkAdapterWithAnExpandedGradient) {
  // Reference §7 case 25: pre-sign outputs [.7, 1.3] get gradients [1, 0]. y.sum().backward()
  // hands the adapter an expanded (stride-0) gradient: NNI's in-place masking would zero all of
  // it at the first clipped element; only the clipped elements may be zero.
  const at::Tensor out = at::tensor({.7f, 1.3f, -.4f, -2.f, 1.f, -1.f}).requires_grad_(true);
  auto layer = test::quant_layer(at::ones({2}), entry_json({"weight", "output"}));
  test::AttachedQuantizer bnn(register_algorithms, "bnn", {layer.get()});
  const at::Tensor y = sdk::apply_quant_grad(*bnn.quantizer, out, QuantType::kOutput, *layer, true);
  EXPECT_TRUE(y.equal(at::tensor({1.f, 1.f, -1.f, -1.f, 1.f, -1.f})));
  y.sum().backward();
  ASSERT_TRUE(out.grad().defined());
  EXPECT_TRUE(out.grad().equal(at::tensor({1.f, 0.f, 1.f, 0.f, 1.f, 1.f})))
      << "|x| = 1 keeps its gradient; only |x| > 1 is clipped: " << out.grad();
}

TEST(BnnQuantizerTest, ClipGradNeverWritesIntoTheIncomingGradient) {
  const at::Tensor grad = at::ones({1}).expand({4});
  const at::Tensor x = at::tensor({.5f, 3.f, -1.5f, 0.f});
  auto layer = test::quant_layer(at::ones({1}), entry_json({"output"}));
  const at::Tensor result = ClipGrad().backward(x, grad, QuantType::kOutput, *layer);
  EXPECT_TRUE(result.equal(at::tensor({1.f, 0.f, 0.f, 1.f}))) << result;
  EXPECT_TRUE(grad.equal(at::ones({4}))) << "the expanded gradient is unchanged";
}

TEST(BnnQuantizerTest, WeightGradientIsPureStraightThrough) {
  const at::Tensor weight = at::tensor({.5f, -3.f, 2.f, 0.f}).requires_grad_(true);
  auto layer = test::quant_layer(weight, entry_json({"weight", "output"}));
  test::AttachedQuantizer bnn(register_algorithms, "bnn", {layer.get()});
  const at::Tensor w = sdk::apply_quant_grad(*bnn.quantizer, weight, QuantType::kWeight, *layer,
                                             true);
  EXPECT_TRUE(w.equal(at::tensor({1.f, -1.f, 1.f, 1.f})));
  w.sum().backward();
  EXPECT_TRUE(weight.grad().equal(at::ones({4}))) << "no |w| <= 1 clip on weights (NNI)";
}

TEST(BnnQuantizerTest, MatchesNniGoldenLenetWeightsBitForBit) {
  const auto conformance = test::nni_data_dir();
  const auto golden = test::load_tensor_dict(conformance / "golden/bnn_lenet/tensors.pt");
  const test::GoldenLayers layers =
      test::golden_quant_layers("lenet", {"conv2", "fc1", "fc2"}, entry_json({"weight", "output"}));
  test::AttachedQuantizer bnn(register_algorithms, "bnn", layers.views);
  for (sdk::LayerView* layer : layers.views) {
    const at::Tensor w = bnn.quantizer->quantize_weight(layer->weight(), *layer, false);
    EXPECT_TRUE(w.equal(golden.at("fwd0/" + layer->name() + ".weight"))) << layer->name();
  }
}

TEST(BnnQuantizerConfigTest, AcceptsWeightAndOutputWithAnyBitsAndReadsEveryKey) {
  test::AttachedQuantizer bnn(register_algorithms, "bnn", {});
  for (int bits : {1, 8, 32}) {
    const sdk::Options entry =
        test::config_entry({{"quant_types", {"weight", "output"}}, {"quant_bits", bits}}, 0);
    sdk::check_quant_config(entry);
    EXPECT_NO_THROW(bnn.quantizer->validate_config(entry));
    EXPECT_TRUE(sdk::unread_option_paths(entry).empty());
  }
}

TEST(BnnQuantizerConfigTest, RejectsInputNamingTheJsonPath) {
  test::AttachedQuantizer bnn(register_algorithms, "bnn", {});
  const sdk::Options entry = test::config_entry(entry_json({"input", "output"}), 4);
  EXPECT_THAT([&] { bnn.quantizer->validate_config(entry); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/4/quant_types: bnn does not "
                                                  "quantize \"input\"")));
}

TEST(BnnQuantizerConfigTest, OutputOnlyLayerNeedsNoWeight) {
  auto relu = test::quant_layer(at::Tensor(), entry_json({"output"}), "relu1");
  test::AttachedQuantizer bnn(register_algorithms, "bnn", {relu.get()});
  EXPECT_TRUE(bnn.quantizer->quantize_output(at::tensor({-2.f, 0.f}), *relu, true)
                  .equal(at::tensor({-1.f, 1.f})));
  auto weighted_relu = test::quant_layer(at::Tensor(), entry_json({"weight"}), "relu2");
  EXPECT_THAT(
      [&] { test::AttachedQuantizer again(register_algorithms, "bnn", {weighted_relu.get()}); },
      ThrowsMessage<sdk::Error>(HasSubstr("layer 'relu2': bnn is configured to quantize "
                                          "its weight")));
}

}  // namespace
}  // namespace lithe::plugins::bnn
