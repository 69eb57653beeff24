#include "plugins/bnn/bnn.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/quantizer.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/fake_context.h"
#include "support/paths.h"
#include "support/plugin_test.h"

namespace lithe::plugins::bnn {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using sdk::QuantType;

nlohmann::ordered_json entry_json(std::vector<std::string> types) {
  return {{"quant_types", types}, {"quant_bits", 1}};
}

std::unique_ptr<sdk::LayerView> make_layer(const at::Tensor& weight,
                                           std::vector<std::string> types = {"weight", "output"},
                                           const std::string& name = "fc") {
  return std::make_unique<sdk::LayerView>(0, name, "Linear", weight, std::nullopt,
                                          test::config_entry(entry_json(std::move(types)), 0));
}

/// The "bnn" quantizer built by the registry and attached to `layers`, as the host does.
struct Attached {
  explicit Attached(std::vector<sdk::LayerView*> layers) {
    register_algorithms(registry);
    quantizer = registry.make_quantizer("bnn", test::options_json(nlohmann::ordered_json::object()));
    test::FakeContext context(std::move(layers), registry);
    quantizer->attach(context);
  }
  host::PluginRegistry registry;
  std::unique_ptr<sdk::Quantizer> quantizer;
};

TEST(BnnQuantizerTest, NniExampleSignWithBothZerosToPlusOne) {
  // Reference §7 case 25: [[.5, −1], [0, −0]] → [[1, −1], [1, 1]], for weights and outputs.
  const at::Tensor weight = at::tensor({.5f, -1.f, 0.f, -0.f}).reshape({2, 2});
  auto layer = make_layer(weight);
  Attached bnn({layer.get()});
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
  auto layer = make_layer(at::ones({2}));
  Attached bnn({layer.get()});
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
  sdk::LayerView layer(0, "fc", "Linear", at::ones({1}), std::nullopt,
                       test::config_entry(entry_json({"output"}), 0));
  const at::Tensor result = ClipGrad().backward(x, grad, QuantType::kOutput, layer);
  EXPECT_TRUE(result.equal(at::tensor({1.f, 0.f, 0.f, 1.f}))) << result;
  EXPECT_TRUE(grad.equal(at::ones({4}))) << "the expanded gradient is unchanged";
}

TEST(BnnQuantizerTest, WeightGradientIsPureStraightThrough) {
  const at::Tensor weight = at::tensor({.5f, -3.f, 2.f, 0.f}).requires_grad_(true);
  auto layer = make_layer(weight);
  Attached bnn({layer.get()});
  const at::Tensor w = sdk::apply_quant_grad(*bnn.quantizer, weight, QuantType::kWeight, *layer,
                                             true);
  EXPECT_TRUE(w.equal(at::tensor({1.f, -1.f, 1.f, 1.f})));
  w.sum().backward();
  EXPECT_TRUE(weight.grad().equal(at::ones({4}))) << "no |w| <= 1 clip on weights (NNI)";
}

TEST(BnnQuantizerTest, MatchesNniGoldenLenetWeightsBitForBit) {
  const auto conformance = test::shared_dir() / "conformance";
  const auto golden = test::load_tensor_dict(conformance / "golden/bnn_lenet/tensors.pt");
  const auto state = test::load_tensor_dict(conformance / "models/lenet_state.pt");
  std::vector<std::unique_ptr<sdk::LayerView>> owned;
  std::vector<sdk::LayerView*> layers;
  for (const char* name : {"conv2", "fc1", "fc2"}) {
    owned.push_back(make_layer(state.at(std::string(name) + ".weight"), {"weight", "output"}, name));
    layers.push_back(owned.back().get());
  }
  Attached bnn(layers);
  for (sdk::LayerView* layer : layers) {
    const at::Tensor w = bnn.quantizer->quantize_weight(layer->weight(), *layer, false);
    EXPECT_TRUE(w.equal(golden.at("fwd0/" + layer->name() + ".weight"))) << layer->name();
  }
}

TEST(BnnQuantizerConfigTest, AcceptsWeightAndOutputWithAnyBitsAndReadsEveryKey) {
  Attached bnn({});
  for (int bits : {1, 8, 32}) {
    const sdk::Options entry =
        test::config_entry({{"quant_types", {"weight", "output"}}, {"quant_bits", bits}}, 0);
    sdk::check_quant_config(entry);
    EXPECT_NO_THROW(bnn.quantizer->validate_config(entry));
    EXPECT_TRUE(sdk::unread_option_paths(entry).empty());
  }
}

TEST(BnnQuantizerConfigTest, RejectsInputNamingTheJsonPath) {
  Attached bnn({});
  const sdk::Options entry = test::config_entry(entry_json({"input", "output"}), 4);
  EXPECT_THAT([&] { bnn.quantizer->validate_config(entry); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/4/quant_types: bnn does not "
                                                  "quantize \"input\"")));
}

TEST(BnnQuantizerConfigTest, OutputOnlyLayerNeedsNoWeight) {
  sdk::LayerView relu(0, "relu1", "ReLU", at::Tensor(), std::nullopt,
                      test::config_entry(entry_json({"output"}), 0));
  Attached bnn({&relu});
  EXPECT_TRUE(bnn.quantizer->quantize_output(at::tensor({-2.f, 0.f}), relu, true)
                  .equal(at::tensor({-1.f, 1.f})));
  sdk::LayerView weighted_relu(0, "relu2", "ReLU", at::Tensor(), std::nullopt,
                               test::config_entry(entry_json({"weight"}), 0));
  EXPECT_THAT([&] { Attached again({&weighted_relu}); },
              ThrowsMessage<sdk::Error>(HasSubstr("layer 'relu2': bnn is configured to quantize "
                                                  "its weight")));
}

}  // namespace
}  // namespace lithe::plugins::bnn
