#include "plugins/lsq/lsq.h"

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
#include "support/plugin_test.h"
#include "support/quantizer_test.h"

namespace lithe::plugins::lsq {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

void set_value(const at::Tensor& state, float v) {
  at::NoGradGuard no_grad;  // as an optimizer step writes it
  state.fill_(v);
}

bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() &&
         a.contiguous().view(at::kInt).equal(b.contiguous().view(at::kInt));
}

TEST(LsqQuantizerTest, GradientReachesTheWeightAndTheStepSize) {
  // 3 bits: grid [−4, 3]. With s = .25, W / s = [1.2, −3.2, 8, −5.2]: the first two are inside
  // the grid, 8 and −5.2 clip to 3 and −4. For L = Σ c·Ŵ with c = [1, 2, 3, 4]:
  //   ∂L/∂W = c where inside, 0 where clipped                         = [1, 2, 0, 0]
  //   ∂L/∂s = g · Σ c · (round(v) − v inside, the bound outside), g = 1/√(qmax · numel)
  //         = (1·(1 − 1.2) + 2·(−3 + 3.2) + 3·3 + 4·(−4)) / √(3 · 4) = −6.8 / √12
  const at::Tensor weight = at::tensor({.3f, -.8f, 2.f, -1.3f}).requires_grad_(true);
  auto layer = test::quant_layer(weight, test::quant_entry({"weight"}, 3));
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {layer.get()});
  ASSERT_TRUE(lsq.quantizer->records_autograd());
  const at::Tensor scale = sdk::tensor_attribute(*layer, "weight_scale");
  set_value(scale, .25f);
  const at::Tensor quantized = lsq.quantizer->quantize_weight(weight, *layer, true);
  EXPECT_TRUE(at::allclose(quantized, at::tensor({.25f, -.75f, .75f, -1.f}), 0, 1e-6))
      << quantized;
  (quantized * at::tensor({1.f, 2.f, 3.f, 4.f})).sum().backward();
  ASSERT_TRUE(weight.grad().defined());
  ASSERT_TRUE(scale.grad().defined()) << "the step size is learned";
  EXPECT_TRUE(at::allclose(weight.grad(), at::tensor({1.f, 2.f, 0.f, 0.f}), 0, 1e-6))
      << weight.grad();
  EXPECT_TRUE(at::isfinite(scale.grad()).all().item<bool>());
  EXPECT_NEAR(scale.grad().item<float>(), -6.8 / std::sqrt(12.0), 1e-5);
}

TEST(LsqQuantizerTest, ForwardIsNnisExpressionBitForBit) {
  // NNI v2.10 LsqQuantizer.quantize with a 0-dim step size, transcribed op for op.
  at::manual_seed(3);
  const at::Tensor x = at::randn({5, 7});
  const int64_t qmax = 7;
  const int64_t qmin = -8;
  const at::Tensor s = at::tensor(.21f).requires_grad_(true);
  const double g = 1.0 / std::pow(static_cast<double>(qmax * x.numel()), 0.5);
  const at::Tensor s_grad = s * g;
  const at::Tensor scaled = (s - s_grad).detach() + s_grad;
  at::Tensor y = at::clamp(x / scaled, qmin, qmax);
  y = (y.round() - y).detach() + y;
  const at::Tensor nni = y * scaled;
  EXPECT_TRUE(bit_equal(lsq_quantize(x, at::tensor({.21f}), 4), nni.detach()));
}

TEST(LsqQuantizerTest, WeightStepSizeStartsAtTwiceMeanAbsOverRootQmax) {
  const at::Tensor weight = at::tensor({.3f, -.8f, 2.f, -1.3f});
  auto layer = test::quant_layer(weight, test::quant_entry({"weight"}, 3));
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {layer.get()});
  const at::Tensor scale = sdk::tensor_attribute(*layer, "weight_scale");
  EXPECT_NEAR(scale.item<float>(), 2 * 1.1 / std::sqrt(3.0), 1e-6);  // mean|W| = 1.1
  EXPECT_TRUE(scale.requires_grad());
  EXPECT_EQ(scale.sizes(), at::IntArrayRef({1}));
  EXPECT_EQ(scale.scalar_type(), at::kFloat);
}

TEST(LsqQuantizerTest, ActivationStepSizeIsInitialisedOnceFromTheFirstTrainingBatch) {
  auto relu = test::quant_layer(at::Tensor(), test::quant_entry({"output"}, 8), "relu");
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {relu.get()});
  const at::Tensor scale = sdk::tensor_attribute(*relu, "output_scale");
  const at::Tensor initialized = sdk::tensor_attribute(*relu, "output_initialized");
  // Evaluation before any training batch: no step size yet, the output passes through.
  const at::Tensor x0 = at::tensor({.5f, -1.25f});
  EXPECT_TRUE(bit_equal(lsq.quantizer->quantize_output(x0, *relu, false), x0));
  EXPECT_EQ(initialized.item<float>(), 0.f);
  EXPECT_EQ(scale.item<float>(), 1.f);

  const at::Tensor x1 = at::tensor({1.f, -3.f, 2.f, 0.f});  // mean|x| = 1.5
  lsq.quantizer->quantize_output(x1, *relu, true);
  EXPECT_EQ(initialized.item<float>(), 1.f);
  EXPECT_NEAR(scale.item<float>(), 3.0 / std::sqrt(127.0), 1e-7);
  const float first = scale.item<float>();
  lsq.quantizer->quantize_output(x1 * 10, *relu, true);
  EXPECT_EQ(scale.item<float>(), first) << "later batches leave the step size to the optimizer";
  EXPECT_TRUE(sdk::tensor_attribute(*relu, "output_scale").is_same(scale)) << "updated in place";
}

TEST(LsqQuantizerTest, GradientReachesTheActivationAndItsStepSize) {
  auto relu = test::quant_layer(at::Tensor(), test::quant_entry({"input"}, 2), "relu");
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {relu.get()});
  const at::Tensor x = at::tensor({.1f, -.2f, .9f, -3.f}).requires_grad_(true);
  const at::Tensor y = lsq.quantizer->quantize_input(x, *relu, true);
  y.sum().backward();
  const at::Tensor scale = sdk::tensor_attribute(*relu, "input_scale");
  ASSERT_TRUE(x.grad().defined());
  ASSERT_TRUE(scale.grad().defined());
  EXPECT_TRUE(at::isfinite(scale.grad()).all().item<bool>());
  EXPECT_NE(scale.grad().item<float>(), 0.f);
}

TEST(LsqQuantizerTest, RestoredStepSizeIsNotReinitialised) {
  auto relu = test::quant_layer(at::Tensor(), test::quant_entry({"output"}, 4), "relu");
  relu->set_attribute("output_scale", at::tensor({.5f}));
  relu->set_attribute("output_initialized", at::tensor({1.f}));
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {relu.get()});
  const at::Tensor y = lsq.quantizer->quantize_output(at::tensor({.74f, -9.f}), *relu, true);
  EXPECT_EQ(sdk::tensor_attribute(*relu, "output_scale").item<float>(), .5f);
  EXPECT_TRUE(at::allclose(y, at::tensor({.5f, -4.f}), 0, 1e-6)) << y;
}

TEST(LsqQuantizerTest, ParametersAreTheStepSizeAttributes) {
  auto fc = test::quant_layer(at::ones({2, 2}),
                              test::quant_entry({"input", "weight", "output"}, 8), "fc");
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {fc.get()});
  const std::vector<at::Tensor> params = lsq.quantizer->parameters();
  ASSERT_EQ(params.size(), 3u);
  EXPECT_TRUE(params[0].is_same(sdk::tensor_attribute(*fc, "input_scale")));
  EXPECT_TRUE(params[1].is_same(sdk::tensor_attribute(*fc, "weight_scale")));
  EXPECT_TRUE(params[2].is_same(sdk::tensor_attribute(*fc, "output_scale")));
  for (const at::Tensor& p : params) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_EQ(fc->attribute_keys(),
            (std::vector<std::string>{"input_initialized", "input_quant_max", "input_quant_min",
                                      "input_scale", "output_initialized", "output_quant_max",
                                      "output_quant_min", "output_scale", "weight_quant_max",
                                      "weight_quant_min", "weight_scale"}));
}

TEST(LsqQuantizerTest, AllZeroTensorsAndNonPositiveStepSizesNeverGiveNan) {
  const at::Tensor weight = at::zeros({3}).requires_grad_(true);
  auto layer = test::quant_layer(weight, test::quant_entry({"weight"}, 8));
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {layer.get()});
  const at::Tensor scale = sdk::tensor_attribute(*layer, "weight_scale");
  EXPECT_EQ(scale.item<float>(), kMinScale);
  const at::Tensor quantized = lsq.quantizer->quantize_weight(weight, *layer, true);
  EXPECT_TRUE(quantized.equal(at::zeros({3})));
  quantized.sum().backward();
  EXPECT_TRUE(at::isfinite(weight.grad()).all().item<bool>());
  EXPECT_TRUE(at::isfinite(scale.grad()).all().item<bool>());

  // An optimizer that drives the step size to 0 or below: the forward uses kMinScale, and the
  // gradient still reaches the stored step size so it can grow back.
  for (float bad : {0.f, -.5f}) {
    set_value(scale, bad);
    scale.mutable_grad() = at::Tensor();
    const at::Tensor w = at::tensor({.5f, -1.f, 0.f}).requires_grad_(true);
    const at::Tensor y = lsq.quantizer->quantize_weight(w, *layer, true);
    EXPECT_TRUE(at::isfinite(y).all().item<bool>()) << y;
    (y * at::tensor({1.f, 2.f, 3.f})).sum().backward();
    EXPECT_TRUE(at::isfinite(scale.grad()).all().item<bool>());
    EXPECT_NE(scale.grad().item<float>(), 0.f);
  }
}

TEST(LsqQuantizerConfigTest, AcceptsEveryQuantTypeAndReadsEveryKey) {
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {});
  const sdk::Options entry = test::config_entry(
      {{"quant_types", {"input", "weight", "output"}},
       {"quant_bits", {{"input", 8}, {"weight", 2}, {"output", 32}}}},
      0);
  sdk::check_quant_config(entry);
  EXPECT_NO_THROW(lsq.quantizer->validate_config(entry));
  EXPECT_TRUE(sdk::unread_option_paths(entry).empty());
}

TEST(LsqPerChannelTest, EachOutputChannelStartsAtItsOwnTwiceMeanAbsOverRootQmax) {
  const at::Tensor weight = at::tensor({.3f, -.9f, 2.f, -1.f, 0.f, 0.f}).reshape({3, 2});
  nlohmann::ordered_json entry = test::quant_entry({"weight"}, 3);
  entry["quant_scheme"] = {{"weight", "per_channel_symmetric"}};
  auto layer = test::quant_layer(weight, entry);
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {layer.get()});
  const at::Tensor scale = sdk::tensor_attribute(*layer, "weight_scale");
  ASSERT_EQ(scale.sizes(), at::IntArrayRef({3}));
  EXPECT_TRUE(scale.requires_grad());
  // mean|W| per row: .6, 1.5, 0 (an all-zero channel starts at kMinScale, not 0).
  EXPECT_NEAR(scale[0].item<float>(), 2 * .6 / std::sqrt(3.0), 1e-6);
  EXPECT_NEAR(scale[1].item<float>(), 2 * 1.5 / std::sqrt(3.0), 1e-6);
  EXPECT_EQ(scale[2].item<float>(), kMinScale);
}

TEST(LsqPerChannelTest, EveryChannelIsQuantizedExactlyAsAPerTensorLsqWithItsStepSize) {
  // The forward and both gradients of a per-channel weight are those of per-tensor LSQ run on
  // each output channel alone with that channel's step size (g = 1/√(qmax·numel(channel))).
  at::manual_seed(4);
  const at::Tensor w = at::randn({4, 3, 2, 2});
  const at::Tensor scales = at::tensor({.05f, .2f, .4f, 1.f});
  const at::Tensor w_all = w.clone().requires_grad_(true);
  const at::Tensor s_all = scales.clone().requires_grad_(true);
  const at::Tensor upstream = at::randn({4, 3, 2, 2});
  const at::Tensor y_all = lsq_quantize(w_all, s_all, 4);
  (y_all * upstream).sum().backward();
  for (int64_t c = 0; c < 4; ++c) {
    const at::Tensor w_c = w[c].clone().requires_grad_(true);
    const at::Tensor s_c = scales.narrow(0, c, 1).clone().requires_grad_(true);
    const at::Tensor y_c = lsq_quantize(w_c, s_c, 4);
    (y_c * upstream[c]).sum().backward();
    EXPECT_TRUE(bit_equal(y_all[c].detach(), y_c.detach())) << "channel " << c;
    EXPECT_TRUE(bit_equal(w_all.grad()[c], w_c.grad())) << "channel " << c;
    EXPECT_NEAR(s_all.grad()[c].item<float>(), s_c.grad().item<float>(), 1e-6) << "channel " << c;
  }
  // Four distinct step sizes: the channels really use different grids.
  EXPECT_FALSE(bit_equal(y_all.detach(), lsq_quantize(w, scales.narrow(0, 0, 1), 4)));
}

TEST(LsqPerChannelTest, QuantSchemeAcceptsLsqsSymmetricSchemesOnlyNamingThePath) {
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {});
  const auto entry_with = [](const nlohmann::ordered_json& scheme) {
    nlohmann::ordered_json json = {{"quant_types", {"weight", "output"}}, {"quant_bits", 8}};
    json["quant_scheme"] = scheme;
    return test::config_entry(json, 2);
  };
  const sdk::Options ok = entry_with({{"weight", "per_channel_symmetric"},
                                      {"output", "per_tensor_symmetric"}});
  sdk::check_quant_config(ok);
  EXPECT_NO_THROW(lsq.quantizer->validate_config(ok));
  EXPECT_TRUE(sdk::unread_option_paths(ok).empty())
      << testing::PrintToString(sdk::unread_option_paths(ok));
  EXPECT_NO_THROW(lsq.quantizer->validate_config(entry_with("per_tensor_symmetric")));
  EXPECT_THAT([&] { lsq.quantizer->validate_config(entry_with("per_channel_symmetric")); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "/config_list/2/quant_scheme must be \"per_tensor_symmetric\" for the output "
                  "(per-channel step sizes are for the weight only")));
  EXPECT_THAT([&] { lsq.quantizer->validate_config(entry_with({{"weight", "per_channel_affine"}})); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "/config_list/2/quant_scheme/weight must be \"per_tensor_symmetric\" or "
                  "\"per_channel_symmetric\" (lsq's grid is signed and symmetric, zero point 0), "
                  "got \"per_channel_affine\"")));
  EXPECT_THAT([&] { lsq.quantizer->validate_config(entry_with({{"input", "per_tensor_symmetric"}})); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "/config_list/2/quant_scheme/input: the keys of quant_scheme must be quant "
                  "types of this entry, got \"input\"")));
  EXPECT_THAT([&] { lsq.quantizer->validate_config(entry_with(7)); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "/config_list/2/quant_scheme must be a scheme name, or an object giving one "
                  "per quant type, got 7")));
}

TEST(LsqQuantizerConfigTest, RejectsOneBitNamingQuantBits) {
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {});
  const sdk::Options entry = test::config_entry(
      {{"quant_types", {"weight", "output"}}, {"quant_bits", {{"weight", 8}, {"output", 1}}}}, 5);
  EXPECT_THAT([&] { lsq.quantizer->validate_config(entry); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/5/quant_bits/output: lsq needs at "
                                                  "least 2 bits for \"output\"")));
}

TEST(LsqQuantizerConfigTest, WeightOnALayerWithoutWeightIsRejectedAtAttach) {
  auto relu = test::quant_layer(at::Tensor(), test::quant_entry({"weight"}, 8), "relu1");
  EXPECT_THAT([&] { test::AttachedQuantizer lsq(register_algorithms, "lsq", {relu.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr("layer 'relu1': lsq is configured to quantize "
                                                  "its weight")));
}

TEST(LsqQuantizerConfigTest, RegistersTheQuantizerUnderItsName) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  EXPECT_NE(registry.find(host::AlgorithmKind::kQuantizer, "lsq"), nullptr);
}

TEST(LsqDataParallelTest, TheFirstStepSizeComesFromEveryRanksShareOfTheBatch) {
  // This rank: mean|x| = 1.5 over 4 values; the other rank: mean 3 over 4 values; together
  // 2.25, the mean one process would see.
  auto relu = test::quant_layer(at::Tensor(), test::quant_entry({"output"}, 8), "relu");
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {relu.get()});
  int64_t counted = 0;
  lsq.context->peer = [&](std::vector<at::Tensor>& tensors, sdk::Reduction op) {
    ASSERT_EQ(op, sdk::Reduction::kSum);
    if (tensors[0].numel() == 2) {
      tensors[0] = tensors[0] + at::tensor({3.0 * 4, 4.0}, at::kDouble);  // {mean·n, n}
    } else {  // the step's element count for the step-size gradient scale
      tensors[0] = tensors[0] + 4.0;
      counted = static_cast<int64_t>(tensors[0].item<double>());
    }
  };
  lsq.quantizer->quantize_output(at::tensor({1.f, -3.f, 2.f, 0.f}), *relu, true);
  EXPECT_NEAR(test::attribute_value(*relu, "output_scale"), 2 * 2.25 / std::sqrt(127.0), 1e-7);
  EXPECT_EQ(counted, 8) << "the gradient scale counts both ranks' elements";
}

TEST(LsqDataParallelTest, ASingleProcessGetsExactlyTheLocalStepSize) {
  auto relu = test::quant_layer(at::Tensor(), test::quant_entry({"output"}, 8), "relu");
  test::AttachedQuantizer lsq(register_algorithms, "lsq", {relu.get()});
  const at::Tensor x = at::randn({7, 13});
  lsq.quantizer->quantize_output(x, *relu, true);
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), initial_scale(x, 8).item<float>())
      << "the float64 round trip of mean·n / n is exact";
}

}  // namespace
}  // namespace lithe::plugins::lsq
