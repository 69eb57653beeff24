#include "plugins/qat/qat.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/quantizer.h"
#include "lithe/sdk_internal/options_json.h"
#include "plugins/qat/quant_params.h"
#include "plugins/qat/quant_scheme.h"
#include "plugins/qat/tracked_range.h"
#include "support/paths.h"
#include "support/plugin_test.h"
#include "support/quantizer_test.h"

namespace lithe::plugins::qat {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using sdk::QuantType;

/// test::quant_entry with NNI's default 8 bits and, when given, `quant_start_step`.
nlohmann::ordered_json qat_entry(std::vector<std::string> types, int bits = 8,
                                 std::optional<int> start_step = std::nullopt) {
  nlohmann::ordered_json entry = test::quant_entry(types, bits);
  if (start_step) {
    entry["quant_start_step"] = *start_step;
  }
  return entry;
}

/// Same shape and the same float32 bit patterns (at::equal treats −0 and +0 as equal).
bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == at::kFloat &&
         b.scalar_type() == at::kFloat &&
         a.contiguous().view(at::kInt).equal(b.contiguous().view(at::kInt));
}

/// NNI's QAT_Quantizer._quantize then _dequantize on the grid [qmin, qmax] (v2.5; v2.0 always
/// had [0, 2^bits − 1]), in torch ops, with the parameters as the float32 [1] buffers NNI keeps
/// them in: the reference the fused kernel must match bit for bit.
at::Tensor nni_fake_quantize_on(const at::Tensor& x, float scale, float zero_point, int64_t qmin,
                                int64_t qmax) {
  const at::Tensor s = at::tensor({scale});
  const at::Tensor zp = at::tensor({zero_point});
  const at::Tensor transformed = zp + x / s;
  const at::Tensor q = at::round(at::clamp(transformed, qmin, qmax));
  return s * (q - zp);
}

/// NNI v2.0's fake quantization: the unsigned grid [0, 2^bits − 1].
at::Tensor nni_fake_quantize(const at::Tensor& x, float scale, float zero_point, int bits) {
  return nni_fake_quantize_on(x, scale, zero_point, 0, (int64_t{1} << bits) - 1);
}

/// NNI's QATGrad keep-mask: round(x / scale + zp) inside [0, 2^bits − 1].
at::Tensor nni_grad_passes(const at::Tensor& x, float scale, float zero_point, int bits) {
  const at::Tensor q = at::round(x / at::tensor({scale}) + at::tensor({zero_point}));
  return q.ge(0).logical_and(q.le((int64_t{1} << bits) - 1));
}

// --- update_quantization_param (reference §7 case 20) ----------------------------------------

struct ParamCase {
  int bits;
  float rmin;
  float rmax;
  float zero_point;
};

void PrintTo(const ParamCase& c, std::ostream* os) {
  *os << c.bits << " bits, [" << c.rmin << ", " << c.rmax << "]";
}

class QuantParamsTest : public ::testing::TestWithParam<ParamCase> {};

TEST_P(QuantParamsTest, MatchesNniFloat32ArithmeticBitForBit) {
  const ParamCase c = GetParam();
  const QuantParams params = update_quantization_param(c.bits, c.rmin, c.rmax);
  // NNI: (max(rmax, 0) − min(rmin, 0)) / (qmax − 0), one float32 division.
  const float expected_scale = (std::max(c.rmax, 0.f) - std::min(c.rmin, 0.f)) /
                               static_cast<float>((1 << c.bits) - 1);
  EXPECT_EQ(params.scale, expected_scale);
  EXPECT_EQ(params.zero_point, c.zero_point);
}

INSTANTIATE_TEST_SUITE_P(
    NniCase20, QuantParamsTest,
    ::testing::Values(ParamCase{8, -1.f, 3.f, 64.f},   // scale 4/255
                      ParamCase{8, -1.f, 5.f, 42.f},   // z0 = 42.5: half to even
                      ParamCase{2, -1.5f, 1.5f, 2.f},  // z0 = 1.5
                      ParamCase{2, -.5f, 2.5f, 0.f},   // z0 = .5
                      ParamCase{8, .5f, 2.f, 0.f},     // range extended down to 0
                      ParamCase{8, -2.f, -.5f, 255.f}, // range extended up to 0
                      ParamCase{4, -.3f, .9f, 4.f}));  // scale .08, z0 = 3.75

TEST(QuantParamsTest, NniDecimalValues) {
  EXPECT_FLOAT_EQ(update_quantization_param(8, -1.f, 3.f).scale, 0.015686275f);
  EXPECT_FLOAT_EQ(update_quantization_param(4, -.3f, .9f).scale, .08f);
  EXPECT_EQ(update_quantization_param(8, -1.f, 3.f).zero_point, 64.f);
}

TEST(QuantParamsTest, AllZeroRangeGivesTheMinimumScaleNotNan) {
  // NNI: scale 0, zero point NaN (reference §7 case 20, last example).
  const QuantParams params = update_quantization_param(8, 0.f, 0.f);
  EXPECT_EQ(params.scale, kMinScale);
  EXPECT_EQ(params.zero_point, 0.f);
}

TEST(QuantParamsTest, ThirtyTwoBitsUseNnisFloat32Qmax) {
  // (1 << 32) − 1 becomes 4294967296.0 in float32 (conformance README, behaviour 14).
  const QuantParams params = update_quantization_param(32, 0.f, 4294967296.f);
  EXPECT_EQ(params.scale, 1.f);
}

TEST(TrackedRangeTest, FirstBatchInitialisesThenNnisEma) {
  TrackedRange range = TrackedRange::none();
  EXPECT_FALSE(range.observed());
  range = track(range, -.2f, .2f);
  EXPECT_TRUE(range.observed());
  EXPECT_EQ(range.min, -.2f);
  EXPECT_EQ(range.max, .2f);
  range = track(range, .2f, .8f);
  // NNI's _ema on float32 tensors: biased * decay + (1 − decay) * value.
  const at::Tensor decay = at::tensor({.99f});
  auto nni_ema = [&](float biased, float v) {
    return (at::tensor({biased}) * decay + (1 - decay) * v).item<float>();
  };
  EXPECT_EQ(range.min, nni_ema(-.2f, .2f));
  EXPECT_EQ(range.max, nni_ema(.2f, .8f));
}

// --- weights -----------------------------------------------------------------------------------

TEST(QatWeightTest, FusedKernelMatchesNnisTorchFormulaBitForBit) {
  at::manual_seed(7);
  std::vector<at::Tensor> weights = {
      at::randn({64, 64}) * .1,
      at::randn({300}) + 2.f,  // all positive: zero point 0
      at::tensor({-.001f, 1.f, .5f, -.0004f, .25f}),  // zero point 0 with negatives: ±0 results
      at::linspace(-1, 1, 257),  // values on and between grid points, halves
  };
  for (int bits : {2, 4, 8}) {
    for (const at::Tensor& w : weights) {
      auto layer = test::quant_layer(w, qat_entry({"weight"}, bits));
      test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
      const at::Tensor quantized = qat.quantizer->quantize_weight(w, *layer, true);
      const QuantParams params = update_quantization_param(
          bits, w.min().item<float>(), w.max().item<float>());
      EXPECT_EQ(test::attribute_value(*layer, "weight_scale"), params.scale);
      EXPECT_EQ(test::attribute_value(*layer, "weight_zero_point"), params.zero_point);
      EXPECT_TRUE(bit_equal(quantized, nni_fake_quantize(w, params.scale, params.zero_point, bits)))
          << bits << " bits, " << w.numel() << " weights";
    }
  }
}

TEST(QatWeightTest, NniExampleWeight) {
  // Reference §7 case 21.
  const at::Tensor w = at::tensor({1.1287f, 2.3456f, 3.7814f, 5.9723f}).reshape({2, 2});
  auto layer = test::quant_layer(w, qat_entry({"weight"}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  const at::Tensor quantized = qat.quantizer->quantize_weight(w, *layer, true);
  const at::Tensor expected = at::tensor({1.1242f, 2.3421f, 3.7707f, 5.9723f}).reshape({2, 2});
  EXPECT_TRUE(at::allclose(quantized, expected, 1e-4, 0)) << quantized;
  EXPECT_EQ(test::attribute_value(*layer, "weight_scale"), 5.9723f / 255.f);
  EXPECT_EQ(test::attribute_value(*layer, "weight_zero_point"), 0.f);
}

void expect_golden_weights(const std::string& model, const std::string& golden_case,
                           const std::vector<std::string>& names, bool check_params) {
  const auto conformance = test::nni_data_dir();
  const auto golden = test::load_tensor_dict(conformance / "golden" / golden_case / "tensors.pt");
  const test::GoldenLayers layers = test::golden_quant_layers(model, names, qat_entry({"weight"}));
  test::AttachedQuantizer qat(register_algorithms, "qat", layers.views);
  for (sdk::LayerView* layer : layers.views) {
    const at::Tensor quantized = qat.quantizer->quantize_weight(layer->weight(), *layer, true);
    EXPECT_TRUE(bit_equal(quantized, golden.at("step0/" + layer->name() + ".weight")))
        << golden_case << " " << layer->name();
    if (check_params) {  // NNI's shared buffers hold the weight's parameters in weight-only QAT
      EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale")
                      .equal(golden.at("step0/" + layer->name() + ".scale")));
      EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_zero_point")
                      .equal(golden.at("step0/" + layer->name() + ".zero_point")));
    }
  }
}

TEST(QatWeightTest, MatchesNniGoldenWeightsAndParamsBitForBit) {
  expect_golden_weights("mlp", "qat_mlp_w8_weight_only", {"fc1", "fc2", "fc3"}, true);
  // With output quantization NNI's buffers end up holding the output's parameters, but the
  // weights were quantized with their own.
  expect_golden_weights("lenet", "qat_lenet_w8_o8", {"conv1", "conv2", "fc1", "fc2", "fc3"},
                        false);
}

TEST(QatWeightTest, EvaluationQuantizesTheCurrentWeight) {
  // NNI v2.0 reuses the last training weight in evaluation (stale); Lithe recomputes.
  const at::Tensor w = at::tensor({-1.f, .5f, 2.f});
  auto layer = test::quant_layer(w, qat_entry({"weight"}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  qat.quantizer->quantize_weight(w, *layer, true);
  const at::Tensor updated = w * 3;  // an optimizer step later
  const at::Tensor quantized = qat.quantizer->quantize_weight(updated, *layer, false);
  const QuantParams params = update_quantization_param(8, -3.f, 6.f);
  EXPECT_EQ(test::attribute_value(*layer, "weight_scale"), params.scale);
  EXPECT_TRUE(bit_equal(quantized, nni_fake_quantize(updated, params.scale, params.zero_point, 8)));
}

TEST(QatWeightTest, WeightGradientIsStraightThroughThroughTheSdkAdapter) {
  const at::Tensor w = (at::randn({8, 8}) * .3).requires_grad_(true);
  auto layer = test::quant_layer(w, qat_entry({"weight"}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  const at::Tensor quantized =
      sdk::apply_quant_grad(*qat.quantizer, w, QuantType::kWeight, *layer, true);
  const at::Tensor upstream = at::randn({8, 8});
  (quantized * upstream).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().equal(upstream)) << "a weight's own range never clips it here";
}

TEST(QatWeightTest, AllZeroWeightGivesZerosNotNan) {
  auto layer = test::quant_layer(at::zeros({4, 2}), qat_entry({"weight"}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  const at::Tensor quantized = qat.quantizer->quantize_weight(at::zeros({4, 2}), *layer, true);
  EXPECT_TRUE(bit_equal(quantized, at::zeros({4, 2}))) << quantized;
  EXPECT_EQ(test::attribute_value(*layer, "weight_scale"), kMinScale);
  EXPECT_EQ(test::attribute_value(*layer, "weight_zero_point"), 0.f);
}

// --- activations -------------------------------------------------------------------------------

TEST(QatActivationTest, RangeStartsFromTheFirstTrainingBatchSoNothingIsClipped) {
  // Reference §7 case 22's inputs. NNI starts its EMA at 0 (tracked max 0.002 after the first
  // batch, outputs clipped to it); Lithe tracks [−.2, .2] and quantizes within one step.
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"output"}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  const at::Tensor first = at::tensor({-.2f, 0.f, .1f, .2f}).reshape({2, 2});
  const at::Tensor y = qat.quantizer->quantize_output(first, *relu, true);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_min"), -.2f);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_max"), .2f);
  const QuantParams params = update_quantization_param(8, -.2f, .2f);
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), params.scale);
  EXPECT_EQ(test::attribute_value(*relu, "output_zero_point"), params.zero_point);
  EXPECT_LE((y - first).abs().max().item<float>(), params.scale / 2 * 1.001f) << y;
  EXPECT_TRUE(bit_equal(y, nni_fake_quantize(first, params.scale, params.zero_point, 8)));

  // The second batch moves the range by NNI's EMA and is clipped at its new top.
  const at::Tensor second = at::tensor({.2f, .4f, .6f, .8f}).reshape({2, 2});
  const at::Tensor y2 = qat.quantizer->quantize_output(second, *relu, true);
  const TrackedRange expected = track({-.2f, .2f}, .2f, .8f);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_min"), expected.min);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_max"), expected.max);
  const QuantParams params2 = update_quantization_param(8, expected.min, expected.max);
  EXPECT_TRUE(bit_equal(y2, nni_fake_quantize(second, params2.scale, params2.zero_point, 8)));
  EXPECT_NEAR(y2.max().item<float>(), expected.max, params2.scale);
}

TEST(QatActivationTest, WeightAndOutputKeepSeparateParameters) {
  // Reference §7 case 23's layer: W = [[1, 2], [3, 5]], float output [2, 9]. NNI shares one
  // scale, and its EMA from 0 turns the output into [0.09, 0.09]; Lithe keeps both.
  const at::Tensor w = at::tensor({1.f, 2.f, 3.f, 5.f}).reshape({2, 2});
  auto layer = test::quant_layer(w, qat_entry({"weight", "output"}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  qat.quantizer->quantize_weight(w, *layer, true);
  const at::Tensor out = at::tensor({2.f, 9.f});
  const at::Tensor y = qat.quantizer->quantize_output(out, *layer, true);
  EXPECT_EQ(test::attribute_value(*layer, "weight_scale"), 5.f / 255.f);
  EXPECT_EQ(test::attribute_value(*layer, "output_scale"), 9.f / 255.f);
  EXPECT_EQ(test::attribute_value(*layer, "weight_zero_point"), 0.f);
  EXPECT_EQ(test::attribute_value(*layer, "output_zero_point"), 0.f);
  EXPECT_TRUE(at::allclose(y, out, 0, 9.f / 255.f / 2)) << y;
}

TEST(QatActivationTest, EvaluationUsesTheStoredParametersAndLeavesThemAlone) {
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"output"}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  qat.quantizer->quantize_output(at::linspace(-1, 1, 11), *relu, true);
  const float scale = test::attribute_value(*relu, "output_scale");
  const float zero_point = test::attribute_value(*relu, "output_zero_point");
  const at::Tensor x = at::tensor({-3.f, -.31f, .5f, 3.f});
  const at::Tensor y = qat.quantizer->quantize_output(x, *relu, false);
  EXPECT_TRUE(bit_equal(y, nni_fake_quantize(x, scale, zero_point, 8))) << y;
  EXPECT_NEAR(y[0].item<float>(), -1.f, scale) << "clipped at the tracked range";
  EXPECT_NEAR(y[3].item<float>(), 1.f, scale);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_min"), -1.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_max"), 1.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), scale);
}

TEST(QatActivationTest, EvaluationBeforeAnyTrainingPassesThrough) {
  // NNI quantizes with its initial scale 1 here, rounding outputs to integers.
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"input", "output"}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  const at::Tensor x = at::tensor({-.7f, .26f, 3.3f}).requires_grad_(true);
  const at::Tensor y = sdk::apply_quant_grad(*qat.quantizer, x, QuantType::kOutput, *relu, false);
  EXPECT_TRUE(bit_equal(y, x.detach()));
  EXPECT_TRUE(bit_equal(qat.quantizer->quantize_input(x.detach(), *relu, false), x.detach()));
  y.sum().backward();
  EXPECT_TRUE(x.grad().equal(at::ones({3})));
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_min"),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_max"),
            -std::numeric_limits<float>::infinity());
}

TEST(QatActivationTest, AllZeroOutputGivesZerosNotNan) {
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"output"}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  const at::Tensor y = qat.quantizer->quantize_output(at::zeros({3, 3}), *relu, true);
  EXPECT_TRUE(bit_equal(y, at::zeros({3, 3}))) << y;
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), kMinScale);
  EXPECT_EQ(test::attribute_value(*relu, "output_zero_point"), 0.f);
  // Only zero was ever seen: later values collapse onto (almost exactly) 0, never NaN.
  const at::Tensor later = qat.quantizer->quantize_output(at::tensor({-5.f, 7.f}), *relu, false);
  EXPECT_FALSE(at::isnan(later).any().item<bool>());
  EXPECT_LE(later.abs().max().item<float>(), 1e-30f) << later;
}

TEST(QatActivationTest, InputIsQuantizedWithItsOwnState) {
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"input", "output"}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  const at::Tensor x = at::tensor({-2.f, 0.f, 2.f});
  qat.quantizer->quantize_input(x, *relu, true);
  qat.quantizer->quantize_output(x.clamp_min(0), *relu, true);
  EXPECT_EQ(test::attribute_value(*relu, "input_tracked_min"), -2.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_min"), 0.f);
  EXPECT_EQ(test::attribute_value(*relu, "input_scale"), 4.f / 255.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), 2.f / 255.f);
}

// --- QATGrad -----------------------------------------------------------------------------------

TEST(QatGradTest, ZeroesExactlyTheOutOfRangeElementsOfAnExpandedGradient) {
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"output"}, 4), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  qat.quantizer->quantize_output(at::tensor({-1.f, 1.f}), *relu, true);  // range [−1, 1]
  const float scale = test::attribute_value(*relu, "output_scale");
  const float zero_point = test::attribute_value(*relu, "output_zero_point");
  const at::Tensor x = at::linspace(-2, 2, 81).requires_grad_(true);
  const at::Tensor y = sdk::apply_quant_grad(*qat.quantizer, x, QuantType::kOutput, *relu, false);
  y.sum().backward();  // an expanded (stride-0) gradient reaches QATGrad
  const at::Tensor passes = nni_grad_passes(x.detach(), scale, zero_point, 4);
  EXPECT_TRUE(x.grad().equal(passes.to(at::kFloat))) << x.grad();
  const int64_t kept = passes.sum().item<int64_t>();
  EXPECT_GT(kept, 30);  // about [−1, 1]: 41 of 81 points
  EXPECT_LT(kept, 50);
  EXPECT_EQ(x.grad()[0].item<float>(), 0.f);
  EXPECT_EQ(x.grad()[40].item<float>(), 1.f);
}

TEST(QatGradTest, TrainingGradientUsesTheParametersOfThatForward) {
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"output"}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  qat.quantizer->quantize_output(at::tensor({-1.f, 1.f}), *relu, true);
  // The second batch is wider than the EMA range: its ends are clipped.
  const at::Tensor x = at::tensor({-4.f, -1.f, 0.f, .9f, 4.f}).requires_grad_(true);
  const at::Tensor y = sdk::apply_quant_grad(*qat.quantizer, x, QuantType::kOutput, *relu, true);
  (y * at::tensor({1.f, 2.f, 3.f, 4.f, 5.f})).sum().backward();
  EXPECT_TRUE(x.grad().equal(at::tensor({0.f, 2.f, 3.f, 4.f, 0.f}))) << x.grad();
}

// The backward reuses the mask the forward's kernel produced; for a tensor that is not the
// latest forward's (a module called twice) it recomputes it. Both must agree.
TEST(QatGradTest, RecomputedMaskEqualsTheForwardsMask) {
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"output"}, 4), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  qat.quantizer->quantize_output(at::tensor({-1.f, 1.f}), *relu, true);
  const at::Tensor x = at::linspace(-2, 2, 81).requires_grad_(true);
  sdk::apply_quant_grad(*qat.quantizer, x, QuantType::kOutput, *relu, false).sum().backward();
  const at::Tensor same_values = x.detach().clone();  // another TensorImpl: no cached mask
  const at::Tensor recomputed = qat.quantizer->quant_grad().backward(
      same_values, at::ones({81}), QuantType::kOutput, *relu);
  EXPECT_TRUE(recomputed.equal(x.grad()));
  EXPECT_GT(recomputed.eq(0).sum().item<int64_t>(), 0);
}

// --- quant_start_step and steps ------------------------------------------------------------------

TEST(QatStartStepTest, FloatBeforeTheStartStepQuantizedFromItOn) {
  // Reference §7 case 23: quant_start_step 3 → forwards at steps 1 and 2 are float.
  const at::Tensor w = at::tensor({.11f, -.52f, .93f, .3f});
  auto layer = test::quant_layer(w, qat_entry({"weight", "output"}, 8, 3));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  const at::Tensor out = at::tensor({-.33f, 1.71f});
  for (int steps = 1; steps <= 4; ++steps) {
    EXPECT_EQ(test::attribute_value(*layer, "steps"), static_cast<float>(steps));
    const at::Tensor qw = qat.quantizer->quantize_weight(w, *layer, true);
    const at::Tensor qo = qat.quantizer->quantize_output(out, *layer, true);
    if (steps == 1) {  // the range is tracked from the first training forward, before the start
      EXPECT_EQ(test::attribute_value(*layer, "output_tracked_min"), -.33f);
      EXPECT_EQ(test::attribute_value(*layer, "output_tracked_max"), 1.71f);
    }
    // The SDK's linear grid says whether the type quantizes (what the QDQ export emits).
    const float grid = steps < 3 ? 0.f : 255.f;
    EXPECT_EQ(test::attribute_value(*layer, "weight_quant_max"), grid) << "step " << steps;
    EXPECT_EQ(test::attribute_value(*layer, "output_quant_max"), grid) << "step " << steps;
    if (steps < 3) {
      EXPECT_TRUE(bit_equal(qw, w)) << "float weight at step " << steps;
      EXPECT_TRUE(bit_equal(qo, out)) << "float output at step " << steps;
    } else {
      EXPECT_FALSE(qw.equal(w)) << "quantized weight at step " << steps;
      EXPECT_TRUE(bit_equal(
          qw, nni_fake_quantize(w, test::attribute_value(*layer, "weight_scale"),
                                test::attribute_value(*layer, "weight_zero_point"), 8)));
      EXPECT_TRUE(bit_equal(
          qo, nni_fake_quantize(out, test::attribute_value(*layer, "output_scale"),
                                test::attribute_value(*layer, "output_zero_point"), 8)));
    }
    qat.quantizer->step();  // the host calls this after every optimizer step
  }
}

TEST(QatStartStepTest, BackwardBeforeTheStartStepIsStraightThrough) {
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"output"}, 2, 5), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  qat.quantizer->quantize_output(at::tensor({-.1f, .1f}), *relu, true);
  const at::Tensor x = at::tensor({-9.f, 9.f}).requires_grad_(true);
  sdk::apply_quant_grad(*qat.quantizer, x, QuantType::kOutput, *relu, true).sum().backward();
  EXPECT_TRUE(x.grad().equal(at::ones({2})));
}

TEST(QatStartStepTest, StepIncrementsEveryLayersCounterInPlace) {
  auto a = test::quant_layer(at::ones({2}), qat_entry({"weight"}), "a");
  auto b = test::quant_layer(at::Tensor(), qat_entry({"output"}), "b");
  test::AttachedQuantizer qat(register_algorithms, "qat", {a.get(), b.get()});
  const at::Tensor registered = sdk::tensor_attribute(*a, "steps");
  qat.quantizer->step();
  qat.quantizer->step();
  EXPECT_TRUE(sdk::tensor_attribute(*a, "steps").is_same(registered));
  EXPECT_EQ(registered.item<float>(), 3.f);
  EXPECT_EQ(test::attribute_value(*b, "steps"), 3.f);
}

TEST(QatStartStepTest, ALayerAddedToARestoredModelJoinsTheModelsStepCount) {
  auto restored = test::quant_layer(at::ones({2}), qat_entry({"weight"}), "restored");
  restored->set_attribute("steps", at::full({1}, 5.f));  // as a saved model hands it back
  auto added = test::quant_layer(at::Tensor(), qat_entry({"output"}), "added");
  test::AttachedQuantizer qat(register_algorithms, "qat", {restored.get(), added.get()});
  EXPECT_EQ(test::attribute_value(*restored, "steps"), 5.f);
  EXPECT_EQ(test::attribute_value(*added, "steps"), 5.f);
}

// --- state -------------------------------------------------------------------------------------

TEST(QatStateTest, AttributesExistOnlyForTheConfiguredTypesAsFloatOneElementTensors) {
  auto fc = test::quant_layer(at::ones({2, 2}), qat_entry({"weight"}), "fc");
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"input", "output"}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {fc.get(), relu.get()});
  EXPECT_THAT(fc->attribute_keys(),
              ElementsAre("steps", "weight_quant_max", "weight_quant_min", "weight_scale",
                          "weight_zero_point"));
  EXPECT_THAT(relu->attribute_keys(),
              ElementsAre("input_quant_max", "input_quant_min", "input_scale",
                          "input_tracked_max", "input_tracked_min", "input_zero_point",
                          "output_quant_max", "output_quant_min", "output_scale",
                          "output_tracked_max", "output_tracked_min", "output_zero_point",
                          "steps"));
  for (const sdk::LayerView* layer : {fc.get(), relu.get()}) {
    for (const std::string& key : layer->attribute_keys()) {
      const at::Tensor t = sdk::tensor_attribute(*layer, key);
      EXPECT_EQ(t.scalar_type(), at::kFloat) << key;
      EXPECT_EQ(t.sizes(), at::IntArrayRef({1})) << key;
    }
  }
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), 1.f) << "NNI's initial buffers";
  EXPECT_EQ(test::attribute_value(*relu, "output_zero_point"), 0.f);
  EXPECT_EQ(test::attribute_value(*fc, "weight_scale"), 1.f / 255.f)
      << "the weight's own, from attach on";
  EXPECT_EQ(test::attribute_value(*fc, "steps"), 1.f);
  // The SDK's linear grid: the weight quantizes from attach on; the activations have no range.
  EXPECT_EQ(test::attribute_value(*fc, "weight_quant_min"), 0.f);
  EXPECT_EQ(test::attribute_value(*fc, "weight_quant_max"), 255.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_quant_max"), 0.f) << "empty grid: no range yet";
}

TEST(QatStateTest, WeightParametersFollowTheWeightAfterEveryOptimizerStep) {
  // A saved model's weight parameters (and the calibration file) match its final weights, not
  // those of the last forward before the last optimizer step.
  const at::Tensor w = at::tensor({-1.f, 2.f});
  auto layer = test::quant_layer(w, qat_entry({"weight"}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  qat.quantizer->quantize_weight(w, *layer, true);
  {
    at::NoGradGuard no_grad;
    w.mul_(2);  // the optimizer updates the live weight in place
  }
  qat.quantizer->step();
  const QuantParams params = update_quantization_param(8, -2.f, 4.f);
  EXPECT_EQ(test::attribute_value(*layer, "weight_scale"), params.scale);
  EXPECT_EQ(test::attribute_value(*layer, "weight_zero_point"), params.zero_point);
}

TEST(QatStateTest, RestoredStateContinuesWhereTheSavedModelStopped) {
  const at::Tensor w = at::tensor({-.5f, 1.5f});
  auto layer = test::quant_layer(w, qat_entry({"weight", "output"}, 8, 4));
  // A model saved after four optimizer steps and some training: the host sets these before
  // attach.
  layer->set_attribute("steps", at::tensor({5.f}));
  layer->set_attribute("output_tracked_min", at::tensor({-1.f}));
  layer->set_attribute("output_tracked_max", at::tensor({1.f}));
  const QuantParams saved = update_quantization_param(8, -1.f, 1.f);
  layer->set_attribute("output_scale", at::tensor({saved.scale}));
  layer->set_attribute("output_zero_point", at::tensor({saved.zero_point}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  EXPECT_EQ(test::attribute_value(*layer, "steps"), 5.f);
  EXPECT_FALSE(qat.quantizer->quantize_weight(w, *layer, false).equal(w)) << "past the start step";
  const at::Tensor x = at::tensor({-2.f, .3f, 2.f});
  EXPECT_TRUE(bit_equal(qat.quantizer->quantize_output(x, *layer, false),
                        nni_fake_quantize(x, saved.scale, saved.zero_point, 8)));
  qat.quantizer->quantize_output(at::tensor({0.f, 3.f}), *layer, true);
  EXPECT_EQ(test::attribute_value(*layer, "output_tracked_max"), track({-1.f, 1.f}, 0.f, 3.f).max)
      << "the EMA continues from the restored range";
}

// --- config ------------------------------------------------------------------------------------

TEST(QatConfigTest, AcceptsEveryQuantTypeAndReadsEveryKey) {
  test::AttachedQuantizer qat(register_algorithms, "qat", {});
  const sdk::Options entry = test::config_entry(
      {{"quant_types", {"input", "weight", "output"}},
       {"quant_bits", {{"input", 8}, {"weight", 4}, {"output", 6}}},
       {"quant_start_step", 10}},
      0);
  sdk::check_quant_config(entry);
  EXPECT_NO_THROW(qat.quantizer->validate_config(entry));
  EXPECT_TRUE(sdk::unread_option_paths(entry).empty());
}

TEST(QatConfigTest, RejectsABadQuantStartStepNamingTheJsonPath) {
  test::AttachedQuantizer qat(register_algorithms, "qat", {});
  EXPECT_THAT([&] { qat.quantizer->validate_config(test::config_entry(qat_entry({"weight"}, 8, -1), 2)); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/2/quant_start_step must be an "
                                                  "integer >= 0, got -1")));
  for (const nlohmann::ordered_json& bad : {nlohmann::ordered_json(1.5), nlohmann::ordered_json("3")}) {
    nlohmann::ordered_json json = qat_entry({"weight"});
    json["quant_start_step"] = bad;
    const sdk::Options entry = test::config_entry(json, 1);
    EXPECT_THAT([&] { qat.quantizer->validate_config(entry); },
                ThrowsMessage<sdk::Error>(HasSubstr("/config_list/1/quant_start_step")));
    EXPECT_EQ(test::error_code([&] { qat.quantizer->validate_config(entry); }),
              sdk::Errc::kInvalidConfig);
  }
}

TEST(QatConfigTest, WeightOnALayerWithoutWeightIsRejectedAtAttach) {
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"weight", "output"}), "relu1");
  EXPECT_THAT([&] { test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr("layer 'relu1': qat is configured to quantize "
                                                  "its weight")));
}

TEST(QatConfigTest, RegistersTheQuantizerUnderItsName) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  EXPECT_NE(registry.find(host::AlgorithmKind::kQuantizer, "qat"), nullptr);
}

// --- data-parallel runs ----------------------------------------------------------------------------

TEST(QatDataParallelTest, ATrainingBatchRangeCoversEveryRanksShare) {
  // Another rank saw [-.5, .9] in the same step: both track the whole step's range, as one
  // process with both shares would; evaluation forwards exchange nothing.
  auto relu = test::quant_layer(at::Tensor(), qat_entry({"output"}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  qat.context->peer = [](std::vector<at::Tensor>& tensors, sdk::Reduction op) {
    ASSERT_EQ(op, sdk::Reduction::kMax);
    ASSERT_EQ(tensors.size(), 1u);
    tensors[0] = at::maximum(tensors[0], at::tensor({.5f, .9f}));  // {-min, max} of the peer
  };
  const at::Tensor mine = at::tensor({-.2f, .1f});
  qat.quantizer->quantize_output(mine, *relu, true);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_min"), -.5f);
  EXPECT_EQ(test::attribute_value(*relu, "output_tracked_max"), .9f);
  EXPECT_EQ(qat.context->reductions, 1);
  qat.quantizer->quantize_output(mine, *relu, false);
  EXPECT_EQ(qat.context->reductions, 1) << "evaluation forwards do not exchange ranges";
}


// --- quant_dtype / quant_scheme (NNI v2.5) ------------------------------------------------------

/// qat_entry plus "quant_scheme" and/or "quant_dtype" (a string, or an object per quant type).
nlohmann::ordered_json scheme_entry(std::vector<std::string> types,
                                    const nlohmann::ordered_json& scheme,
                                    const nlohmann::ordered_json& dtype = nullptr, int bits = 8) {
  nlohmann::ordered_json entry = qat_entry(std::move(types), bits);
  if (!scheme.is_null()) {
    entry["quant_scheme"] = scheme;
  }
  if (!dtype.is_null()) {
    entry["quant_dtype"] = dtype;
  }
  return entry;
}

/// The integer codes of a fake-quantized tensor on a grid with `scale` and zero point 0:
/// y / scale, which must be integers (checked) when y lies on the grid.
at::Tensor codes(const at::Tensor& y, float scale) {
  const at::Tensor q = y / scale;
  EXPECT_TRUE(at::allclose(q, at::round(q), 0, 1e-4)) << "not on the grid of scale " << scale;
  return at::round(q);
}

TEST(QuantGridTest, NniV25QminQmax) {
  // calculate_qmin_qmax: uint [0, 2^b − 1]; int [−2^(b−1) + 1, 2^(b−1) − 1].
  EXPECT_EQ(quant_grid(8, QuantDtype::kUint).qmin, 0);
  EXPECT_EQ(quant_grid(8, QuantDtype::kUint).qmax, 255);
  EXPECT_EQ(quant_grid(8, QuantDtype::kInt).qmin, -127);
  EXPECT_EQ(quant_grid(8, QuantDtype::kInt).qmax, 127);
  EXPECT_EQ(quant_grid(4, QuantDtype::kInt).qmin, -7);
  EXPECT_EQ(quant_grid(4, QuantDtype::kInt).qmax, 7);
  EXPECT_EQ(quant_grid(2, QuantDtype::kInt).qmin, -1);
  EXPECT_EQ(quant_grid(2, QuantDtype::kInt).qmax, 1);
  EXPECT_EQ(quant_grid(32, QuantDtype::kInt).qmax, 2147483647);
}

TEST(QuantParamsTest, SymmetricInt8ByHand) {
  // [−0.5, 1.27] on the int8 grid [−127, 127]: abs_max = max(0.5, 1.27) = 1.27, half width
  // (127 − (−127)) / 2 = 127, scale = 1.27 / 127 = 0.01, zero point 0.
  const QuantGrid int8 = quant_grid(8, QuantDtype::kInt);
  QuantParams p = quantization_param(int8, true, -.5f, 1.27f);
  EXPECT_EQ(p.scale, 1.27f / 127.f);
  EXPECT_FLOAT_EQ(p.scale, .01f);
  EXPECT_EQ(p.zero_point, 0.f);
  // The negative end decides when it is the larger: [−2.54, 1] → 2.54 / 127 = 0.02.
  p = quantization_param(int8, true, -2.54f, 1.f);
  EXPECT_EQ(p.scale, 2.54f / 127.f);
  EXPECT_EQ(p.zero_point, 0.f);
  // A range not containing 0 is extended to it first: [0.5, 1.27] → abs_max 1.27 as well.
  EXPECT_EQ(quantization_param(int8, true, .5f, 1.27f).scale, 1.27f / 127.f);
  // 4 bits: grid [−7, 7], scale 1.4 / 7 = 0.2.
  EXPECT_EQ(quantization_param(quant_grid(4, QuantDtype::kInt), true, -1.4f, .3f).scale,
            1.4f / 7.f);
}

TEST(QuantParamsTest, SymmetricUint8IsCentredOn128) {
  // [−0.5, 1.27] on [0, 255]: half width 255 / 2 = 127.5, scale = 1.27 / 127.5; zero point
  // (0 + 255 + 1) / 2 = 128, the code of 0 (NNI v2.5 writes (0 + 255) // 2 = 127).
  const QuantParams p = quantization_param(quant_grid(8, QuantDtype::kUint), true, -.5f, 1.27f);
  EXPECT_EQ(p.scale, 1.27f / 127.5f);
  EXPECT_EQ(p.zero_point, 128.f);
}

TEST(QuantParamsTest, AffineInt8ByHand) {
  // [−1, 5] on [−127, 127]: scale = 6 / 254 = 0.0236220..., rmin / scale = −42.33 → round
  // −42, zero point = qmin − (−42) = −127 + 42 = −85.
  const QuantParams p = quantization_param(quant_grid(8, QuantDtype::kInt), false, -1.f, 5.f);
  EXPECT_EQ(p.scale, 6.f / 254.f);
  EXPECT_EQ(p.zero_point, -85.f);
  // All-positive range: extended down to 0, so 0 is the grid's bottom, code −127.
  EXPECT_EQ(quantization_param(quant_grid(8, QuantDtype::kInt), false, .5f, 2.f).zero_point,
            -127.f);
}

TEST(QuantParamsTest, DegenerateRangesGiveTheMinimumScaleInEveryScheme) {
  for (QuantDtype dtype : {QuantDtype::kUint, QuantDtype::kInt}) {
    for (bool symmetric : {false, true}) {
      const QuantGrid grid = quant_grid(8, dtype);
      const QuantParams p = quantization_param(grid, symmetric, 0.f, 0.f);
      EXPECT_EQ(p.scale, kMinScale);
      EXPECT_FALSE(std::isnan(p.zero_point));
      EXPECT_GE(p.zero_point, grid.qmin);
      EXPECT_LE(p.zero_point, grid.qmax);
    }
  }
}

TEST(QuantParamsTest, TheGeneralisedAffineFormulaIsNniV20sOnTheUintGridBitForBit) {
  // Lithe <= 1.1 computed NNI v2.0's round(clamp(0 − rmin / scale, 0, qmax)); the v2.5 form is
  // clamp(qmin − round(rmin / scale)). Both must give the same bits on [0, qmax].
  at::manual_seed(3);
  const int64_t n = 20000;
  const at::Tensor lo =
      (at::randn({n}) * at::pow(10.f, at::randint(-6, 4, {n}).to(at::kFloat))).contiguous();
  const at::Tensor hi =
      (at::randn({n}) * at::pow(10.f, at::randint(-6, 4, {n}).to(at::kFloat))).contiguous();
  const float* los = lo.data_ptr<float>();
  const float* his = hi.data_ptr<float>();
  for (int bits : {1, 2, 4, 7, 8, 16, 32}) {
    const auto qmax = static_cast<float>((int64_t{1} << bits) - 1);
    for (int64_t i = 0; i < n; ++i) {
      const float rmin = std::min(los[i], 0.f);
      const float rmax = std::max(his[i], 0.f);
      const float scale = std::max((rmax - rmin) / qmax, kMinScale);
      const float z0 = 0.f - rmin / scale;
      const float v20 = z0 < 0.f ? 0.f : z0 > qmax ? qmax : std::nearbyint(z0);
      const QuantParams p = update_quantization_param(bits, los[i], his[i]);
      ASSERT_EQ(p.scale, scale) << bits << " bits, " << rmin << ", " << rmax;
      ASSERT_EQ(std::signbit(p.zero_point), std::signbit(v20));
      ASSERT_EQ(p.zero_point, v20) << bits << " bits, " << rmin << ", " << rmax;
    }
  }
}

TEST(QatSchemeTest, PerTensorSymmetricInt8WeightByHand) {
  // Range [−0.5, 1.27] → scale 1.27 / 127 = 0.01, zero point 0 (SymmetricInt8ByHand). Codes:
  // −0.5 / 0.01 = −50; 0.004 / 0.01 = 0.4 → 0; 0.006 / 0.01 = 0.6 → 1; 1.27 / 0.01 = 127.
  const at::Tensor w = at::tensor({-.5f, .004f, .006f, 1.27f}).reshape({2, 2});
  auto layer = test::quant_layer(w, scheme_entry({"weight"}, "per_tensor_symmetric", "int"));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  const at::Tensor y = qat.quantizer->quantize_weight(w, *layer, true);
  const float scale = 1.27f / 127.f;
  EXPECT_EQ(test::attribute_value(*layer, "weight_scale"), scale);
  EXPECT_EQ(test::attribute_value(*layer, "weight_zero_point"), 0.f);
  EXPECT_EQ(test::attribute_value(*layer, "weight_quant_min"), -127.f);
  EXPECT_EQ(test::attribute_value(*layer, "weight_quant_max"), 127.f);
  EXPECT_TRUE(codes(y, scale).equal(at::tensor({-50.f, 0.f, 1.f, 127.f}).reshape({2, 2})))
      << codes(y, scale);
  EXPECT_TRUE(bit_equal(y, nni_fake_quantize_on(w, scale, 0.f, -127, 127)));
  EXPECT_FLOAT_EQ(y[1][1].item<float>(), 1.27f) << "abs_max is a grid point: 127 · s";
}

TEST(QatSchemeTest, ActivationsOnTheSignedGridAndSymmetricUintGrid) {
  // Output int8 symmetric over [−2, 1]: scale 2 / 127, zero point 0; input uint8 symmetric over
  // the same range: scale 2 / 127.5, zero point 128.
  auto relu = test::quant_layer(
      at::Tensor(),
      scheme_entry({"input", "output"}, "per_tensor_symmetric", {{"output", "int"}}), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  const at::Tensor x = at::tensor({-2.f, -.3f, 0.f, .77f, 1.f});
  const at::Tensor in = qat.quantizer->quantize_input(x, *relu, true);
  const at::Tensor out = qat.quantizer->quantize_output(x, *relu, true);
  EXPECT_EQ(test::attribute_value(*relu, "input_scale"), 2.f / 127.5f);
  EXPECT_EQ(test::attribute_value(*relu, "input_zero_point"), 128.f);
  EXPECT_EQ(test::attribute_value(*relu, "input_quant_min"), 0.f);
  EXPECT_EQ(test::attribute_value(*relu, "input_quant_max"), 255.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), 2.f / 127.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_zero_point"), 0.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_quant_min"), -127.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_quant_max"), 127.f);
  EXPECT_TRUE(bit_equal(in, nni_fake_quantize_on(x, 2.f / 127.5f, 128.f, 0, 255)));
  EXPECT_TRUE(bit_equal(out, nni_fake_quantize_on(x, 2.f / 127.f, 0.f, -127, 127)));
  EXPECT_EQ(out[2].item<float>(), 0.f);
  // An evaluation value beyond the range clips to the grid's ends.
  const at::Tensor far = qat.quantizer->quantize_output(at::tensor({-9.f, 9.f}), *relu, false);
  EXPECT_EQ(far[0].item<float>(), -127.f * (2.f / 127.f));
  EXPECT_EQ(far[1].item<float>(), 127.f * (2.f / 127.f));
}

TEST(QatSchemeTest, AffineInt8OutputUsesNniV25ZeroPoint) {
  // [−1, 5] on [−127, 127]: scale 6 / 254, zero point −85 (AffineInt8ByHand).
  auto relu = test::quant_layer(at::Tensor(), scheme_entry({"output"}, nullptr, "int"), "relu");
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  const at::Tensor x = at::tensor({-1.f, 0.f, 2.f, 5.f});
  const at::Tensor y = qat.quantizer->quantize_output(x, *relu, true);
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), 6.f / 254.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_zero_point"), -85.f);
  EXPECT_TRUE(bit_equal(y, nni_fake_quantize_on(x, 6.f / 254.f, -85.f, -127, 127)));
  EXPECT_EQ(y[1].item<float>(), 0.f) << "0 is exactly representable";
}

TEST(QatSchemeTest, PerChannelSymmetricInt8WeightsUseEachChannelsOwnGrid) {
  // A conv weight [3, 1, 2, 2]; each output channel's scale is its own abs_max / 127:
  //   channel 0: {−1.27, 0.5, 0.004, 1}  abs_max 1.27 → scale 0.01, codes {−127, 50, 0, 100}
  //   channel 1: {0.2, 0.4, 2.54, 1}     abs_max 2.54 → scale 0.02, codes {10, 20, 127, 50}
  //   channel 2: all zero                → scale kMinScale (no range), codes 0
  // and every zero point is 0.
  const at::Tensor w = at::tensor({-1.27f, .5f, .004f, 1.f, .2f, .4f, 2.54f, 1.f, 0.f, 0.f, 0.f,
                                   0.f})
                           .reshape({3, 1, 2, 2});
  auto layer = test::quant_layer(w, scheme_entry({"weight"}, "per_channel_symmetric", "int"));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  const at::Tensor scale = sdk::tensor_attribute(*layer, "weight_scale");
  const at::Tensor zero_point = sdk::tensor_attribute(*layer, "weight_zero_point");
  EXPECT_EQ(scale.sizes(), at::IntArrayRef({3})) << "one per output channel, from attach on";
  EXPECT_EQ(zero_point.sizes(), at::IntArrayRef({3}));
  const at::Tensor y = qat.quantizer->quantize_weight(w, *layer, true);
  EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale").is_same(scale)) << "updated in place";
  const float expected_scale[3] = {1.27f / 127.f, 2.54f / 127.f, kMinScale};
  const std::vector<std::vector<float>> expected_codes = {
      {-127, 50, 0, 100}, {10, 20, 127, 50}, {0, 0, 0, 0}};
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_EQ(scale[c].item<float>(), expected_scale[c]) << "channel " << c;
    EXPECT_EQ(zero_point[c].item<float>(), 0.f) << "channel " << c;
    const at::Tensor row = y[c].reshape({-1});
    EXPECT_TRUE(codes(row, expected_scale[c]).equal(at::tensor(expected_codes[c])))
        << "channel " << c << ": " << codes(row, expected_scale[c]);
    // Bit for bit NNI's formula with that channel's own parameters.
    EXPECT_TRUE(bit_equal(y[c], nni_fake_quantize_on(w[c], expected_scale[c], 0.f, -127, 127)))
        << "channel " << c;
  }
  // The grid bounds are shared: one [qmin, qmax] for all channels.
  EXPECT_EQ(test::attribute_value(*layer, "weight_quant_min"), -127.f);
  EXPECT_EQ(test::attribute_value(*layer, "weight_quant_max"), 127.f);
  // Per tensor, channel 0 would share channel 1's scale 0.02 and lose resolution.
  EXPECT_FALSE(bit_equal(y[0], nni_fake_quantize_on(w[0], 2.54f / 127.f, 0.f, -127, 127)));
}

TEST(QatSchemeTest, PerChannelAffineUint8GivesEachChannelItsZeroPoint) {
  // Rows of a Linear weight [3, 2] with NNI v2.0's known ranges (ParamCase): [−1, 5] → scale
  // 6/255, zero point 42 (42.5 to even); [0.5, 2] → extended to [0, 2]: 2/255, 0; [−2, −0.5]
  // → [−2, 0]: 2/255, 255.
  const at::Tensor w = at::tensor({-1.f, 5.f, .5f, 2.f, -2.f, -.5f}).reshape({3, 2});
  auto layer = test::quant_layer(w, scheme_entry({"weight"}, "per_channel_affine"));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  const at::Tensor y = qat.quantizer->quantize_weight(w, *layer, true);
  const at::Tensor scale = sdk::tensor_attribute(*layer, "weight_scale");
  const at::Tensor zero_point = sdk::tensor_attribute(*layer, "weight_zero_point");
  const float expected_zero_point[3] = {42.f, 0.f, 255.f};
  for (int64_t c = 0; c < 3; ++c) {
    const QuantParams p =
        update_quantization_param(8, w[c].min().item<float>(), w[c].max().item<float>());
    EXPECT_EQ(scale[c].item<float>(), p.scale) << "channel " << c;
    EXPECT_EQ(zero_point[c].item<float>(), expected_zero_point[c]) << "channel " << c;
    EXPECT_TRUE(bit_equal(y[c], nni_fake_quantize(w[c], p.scale, p.zero_point, 8)))
        << "channel " << c;
  }
  EXPECT_EQ(test::attribute_value(*layer, "weight_quant_min"), 0.f);
  EXPECT_EQ(test::attribute_value(*layer, "weight_quant_max"), 255.f);
}

TEST(QatSchemeTest, PerChannelWeightGradientAndRecomputedMask) {
  const at::Tensor w = (at::randn({4, 3, 3}) * .3).requires_grad_(true);
  auto layer = test::quant_layer(w, scheme_entry({"weight"}, "per_channel_symmetric", "int"));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  const at::Tensor y = sdk::apply_quant_grad(*qat.quantizer, w, QuantType::kWeight, *layer, true);
  const at::Tensor upstream = at::randn({4, 3, 3});
  (y * upstream).sum().backward();
  EXPECT_TRUE(w.grad().equal(upstream)) << "each channel's own range never clips it";
  // The backward of another tensor recomputes the mask with the per-channel parameters: values
  // beyond a channel's range (channel 0 scaled up 10×) are clipped there only.
  at::Tensor wider = w.detach().clone();
  wider[0].mul_(10);
  const at::Tensor grad =
      qat.quantizer->quant_grad().backward(wider, at::ones({4, 3, 3}), QuantType::kWeight, *layer);
  EXPECT_LT(grad[0].sum().item<float>(), 9.f);
  EXPECT_TRUE(grad.slice(0, 1).equal(at::ones({3, 3, 3})));
}

TEST(QatSchemeTest, PerChannelParametersFollowTheWeightAfterAStep) {
  const at::Tensor w = at::tensor({-1.f, 2.f, .5f, .25f}).reshape({2, 2});
  auto layer = test::quant_layer(w, scheme_entry({"weight"}, "per_channel_symmetric", "int"));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  EXPECT_EQ(sdk::tensor_attribute(*layer, "weight_scale")[1].item<float>(), .5f / 127.f)
      << "set at attach";
  {
    at::NoGradGuard no_grad;
    w[1].mul_(4);  // the optimizer updates the live weight in place: channel 1's abs_max is 2
  }
  qat.quantizer->step();
  EXPECT_EQ(sdk::tensor_attribute(*layer, "weight_scale")[0].item<float>(), 2.f / 127.f);
  EXPECT_EQ(sdk::tensor_attribute(*layer, "weight_scale")[1].item<float>(), 2.f / 127.f);
}

TEST(QatSchemeTest, DefaultsKeepTheStateShapesAndGridOfNniV20) {
  // No quant_scheme / quant_dtype, or the defaults spelled out: the same state, bit for bit.
  const at::Tensor w = at::tensor({-1.f, 5.f, .5f, 2.f}).reshape({2, 2});
  auto plain = test::quant_layer(w, qat_entry({"weight", "output"}), "plain");
  auto spelled = test::quant_layer(
      w, scheme_entry({"weight", "output"}, "per_tensor_affine", "uint"), "spelled");
  test::AttachedQuantizer qat(register_algorithms, "qat", {plain.get(), spelled.get()});
  for (sdk::LayerView* layer : {plain.get(), spelled.get()}) {
    const at::Tensor y = qat.quantizer->quantize_weight(w, *layer, true);
    qat.quantizer->quantize_output(w.sum(1), *layer, true);
    EXPECT_TRUE(bit_equal(y, nni_fake_quantize(w, 6.f / 255.f, 42.f, 8))) << layer->name();
    EXPECT_EQ(test::attribute_value(*layer, "weight_quant_min"), 0.f);
    EXPECT_EQ(test::attribute_value(*layer, "weight_quant_max"), 255.f);
    EXPECT_EQ(test::attribute_value(*layer, "output_quant_min"), 0.f);
    for (const std::string& key : layer->attribute_keys()) {
      EXPECT_EQ(sdk::tensor_attribute(*layer, key).sizes(), at::IntArrayRef({1})) << key;
    }
  }
  for (const std::string& key : plain->attribute_keys()) {
    EXPECT_TRUE(bit_equal(sdk::tensor_attribute(*plain, key),
                          sdk::tensor_attribute(*spelled, key)))
        << key;
  }
}

// --- quant_dtype / quant_scheme and saved state --------------------------------------------------

TEST(QatSchemeStateTest, APerTensorStateRestoredIntoAPerChannelConfigIsRefusedByName) {
  const at::Tensor w = at::randn({3, 2});
  auto layer = test::quant_layer(w, scheme_entry({"weight"}, "per_channel_symmetric", "int"));
  // A model saved by a per-tensor session of the same algorithm and bits (the host checks
  // those) hands back one scale.
  layer->set_attribute("steps", at::tensor({4.f}));
  layer->set_attribute("weight_scale", at::tensor({.01f}));
  layer->set_attribute("weight_zero_point", at::tensor({0.f}));
  EXPECT_THAT([&] { test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "layer 'fc': its saved qat state 'weight_scale' holds 1 value (quantized per "
                  "tensor), but this entry's quant_scheme for the weight needs 3 (one per output "
                  "channel); keep the saved model's quant_scheme, or quantize the float model")));
  EXPECT_EQ(test::error_code(
                [&] { test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()}); }),
            sdk::Errc::kInvalidModel);
}

TEST(QatSchemeStateTest, APerChannelStateRestoredIntoAPerTensorConfigIsRefusedByName) {
  auto layer = test::quant_layer(at::randn({3, 2}), qat_entry({"weight"}));
  layer->set_attribute("weight_scale", at::full({3}, .01f));
  layer->set_attribute("weight_zero_point", at::zeros({3}));
  EXPECT_THAT([&] { test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "'weight_scale' holds 3 values (quantized per channel), but this entry's "
                  "quant_scheme for the weight needs 1 (per tensor)")));
}

TEST(QatSchemeStateTest, APerChannelStateContinuesIntoTheSameConfig) {
  const at::Tensor w = at::tensor({-1.f, 2.f, .5f, .25f}).reshape({2, 2});
  auto layer = test::quant_layer(w, scheme_entry({"weight"}, "per_channel_symmetric", "int"));
  const at::Tensor saved_scale = at::tensor({2.f / 127.f, .5f / 127.f});
  layer->set_attribute("steps", at::tensor({7.f}));
  layer->set_attribute("weight_scale", saved_scale.clone());
  layer->set_attribute("weight_zero_point", at::zeros({2}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {layer.get()});
  EXPECT_EQ(test::attribute_value(*layer, "steps"), 7.f);
  EXPECT_TRUE(sdk::tensor_attribute(*layer, "weight_scale").equal(saved_scale));
}

TEST(QatSchemeStateTest, ARestoredActivationRangeContinuesOnTheEntrysGrid) {
  // Saved with the default uint affine parameters of [−1, 1]; this session quantizes the output
  // int8 symmetric: the parameters come from the restored range on the new grid at attach.
  auto relu = test::quant_layer(at::Tensor(),
                                scheme_entry({"output"}, "per_tensor_symmetric", "int"), "relu");
  relu->set_attribute("steps", at::tensor({3.f}));
  relu->set_attribute("output_tracked_min", at::tensor({-1.f}));
  relu->set_attribute("output_tracked_max", at::tensor({1.f}));
  const QuantParams saved = update_quantization_param(8, -1.f, 1.f);
  relu->set_attribute("output_scale", at::tensor({saved.scale}));
  relu->set_attribute("output_zero_point", at::tensor({saved.zero_point}));
  test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()});
  EXPECT_EQ(test::attribute_value(*relu, "output_scale"), 1.f / 127.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_zero_point"), 0.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_quant_min"), -127.f);
  EXPECT_EQ(test::attribute_value(*relu, "output_quant_max"), 127.f);
  const at::Tensor x = at::tensor({-1.f, .5f, 1.f});
  EXPECT_TRUE(bit_equal(qat.quantizer->quantize_output(x, *relu, false),
                        nni_fake_quantize_on(x, 1.f / 127.f, 0.f, -127, 127)));
}

// --- quant_dtype / quant_scheme config -----------------------------------------------------------

/// validate_config's message for `entry` (config_list index 0), or "" when it accepts it.
std::string config_error(const nlohmann::ordered_json& entry, int index = 0) {
  test::AttachedQuantizer qat(register_algorithms, "qat", {});
  const sdk::Options options = test::config_entry(entry, index);
  sdk::check_quant_config(options);
  try {
    qat.quantizer->validate_config(options);
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidConfig) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
    return e.what();
  }
  EXPECT_TRUE(sdk::unread_option_paths(options).empty()) << "every key is read";
  return "";
}

TEST(QatSchemeConfigTest, AcceptsNniV25sStringAndObjectForms) {
  EXPECT_EQ(config_error(scheme_entry({"weight"}, "per_channel_symmetric", "int")), "");
  EXPECT_EQ(config_error(scheme_entry({"weight", "output"}, "per_tensor_symmetric", "int")), "");
  EXPECT_EQ(config_error(scheme_entry(
                {"input", "weight", "output"},
                {{"weight", "per_channel_symmetric"}, {"output", "per_tensor_affine"}},
                {{"weight", "int"}, {"input", "uint"}})),
            "");
  EXPECT_EQ(config_error(scheme_entry({"weight"}, nlohmann::ordered_json::object(),
                                      nlohmann::ordered_json::object())),
            "")
      << "an empty object keeps every default";
  for (const char* scheme : {"per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
                             "per_channel_symmetric"}) {
    EXPECT_EQ(config_error(scheme_entry({"weight"}, scheme, "uint")), "") << scheme;
  }
}

TEST(QatSchemeConfigTest, RefusesUnknownValuesNamingPathRuleAndValue) {
  EXPECT_EQ(config_error(scheme_entry({"weight"}, "per_tensor"), 3),
            "/config_list/3/quant_scheme must be one of \"per_tensor_affine\", "
            "\"per_tensor_symmetric\", \"per_channel_affine\", \"per_channel_symmetric\", or an "
            "object giving one per quant type, got \"per_tensor\"");
  EXPECT_EQ(config_error(scheme_entry({"weight"}, nullptr, "int8")),
            "/config_list/0/quant_dtype must be one of \"uint\", \"int\", or an object giving one "
            "per quant type, got \"int8\"");
  EXPECT_EQ(config_error(scheme_entry({"weight", "output"}, nullptr, {{"output", "signed"}})),
            "/config_list/0/quant_dtype/output must be one of \"uint\", \"int\", got \"signed\"");
}

TEST(QatSchemeConfigTest, RefusesWrongJsonTypesNamingPathRuleAndValue) {
  EXPECT_THAT(config_error(scheme_entry({"weight"}, 5)),
              AllOf(HasSubstr("/config_list/0/quant_scheme must be one of \"per_tensor_affine\""),
                    HasSubstr("or an object giving one per quant type, got 5")));
  EXPECT_THAT(config_error(scheme_entry({"weight"}, nullptr, {"int"})),
              AllOf(HasSubstr("/config_list/0/quant_dtype must be one of"),
                    HasSubstr("got [\"int\"]")));
  EXPECT_EQ(config_error(scheme_entry({"weight"}, {{"weight", 8}})),
            "/config_list/0/quant_scheme/weight must be one of \"per_tensor_affine\", "
            "\"per_tensor_symmetric\", \"per_channel_affine\", \"per_channel_symmetric\", got 8");
}

TEST(QatSchemeConfigTest, RefusesObjectKeysThatAreNotQuantTypesOfTheEntry) {
  EXPECT_EQ(config_error(scheme_entry({"weight"}, {{"output", "per_tensor_affine"}})),
            "/config_list/0/quant_scheme/output: the keys of quant_scheme must be quant types of "
            "this entry (\"weight\"), got \"output\"");
  EXPECT_THAT(config_error(scheme_entry({"weight"}, nullptr, {{"bias", "int"}})),
              HasSubstr("/config_list/0/quant_dtype/bias: the keys of quant_dtype must be quant "
                        "types of this entry"));
}

TEST(QatSchemeConfigTest, RefusesPerChannelActivations) {
  EXPECT_EQ(config_error(scheme_entry({"output"}, "per_channel_affine")),
            "/config_list/0/quant_scheme must be \"per_tensor_affine\" or "
            "\"per_tensor_symmetric\" for the output (per-channel grids are for the weight "
            "only, one per output channel), got \"per_channel_affine\"");
  // The string form applies to every quant type: the message shows the object form.
  EXPECT_THAT(config_error(scheme_entry({"weight", "input"}, "per_channel_symmetric")),
              AllOf(HasSubstr("/config_list/0/quant_scheme must be \"per_tensor_affine\" or "
                              "\"per_tensor_symmetric\" for the input"),
                    HasSubstr("give each quant type its own scheme, e.g. {\"weight\": "
                              "\"per_channel_symmetric\", \"output\": \"per_tensor_affine\"}"),
                    HasSubstr("got \"per_channel_symmetric\"")));
  EXPECT_THAT(config_error(scheme_entry({"weight", "output"},
                                        {{"output", "per_channel_symmetric"}})),
              HasSubstr("/config_list/0/quant_scheme/output must be \"per_tensor_affine\" or "
                        "\"per_tensor_symmetric\" for the output"));
}

TEST(QatSchemeConfigTest, RefusesASignedGridWithOneBit) {
  EXPECT_EQ(config_error(scheme_entry({"weight"}, nullptr, "int", 1)),
            "/config_list/0/quant_dtype must be \"uint\" for the weight's 1-bit grid "
            "(/config_list/0/quant_bits; the signed grid [-(2^(bits-1))+1, 2^(bits-1)-1] needs "
            "at least 2 bits), got \"int\"");
}

TEST(QatSchemeConfigTest, AttachChecksTheSameRules) {
  // Attach reads the keys itself (a host always validates first; this is the second line).
  auto relu = test::quant_layer(at::Tensor(), scheme_entry({"output"}, "per_channel_affine"),
                                "relu");
  EXPECT_THAT([&] { test::AttachedQuantizer qat(register_algorithms, "qat", {relu.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/quant_scheme must be")));
  // A per-channel weight needs a dimension to split.
  auto scalar = test::quant_layer(at::scalar_tensor(1.5f),
                                  scheme_entry({"weight"}, "per_channel_affine"), "scalar");
  EXPECT_THAT([&] { test::AttachedQuantizer qat(register_algorithms, "qat", {scalar.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "layer 'scalar': qat's per_channel quant_scheme quantizes the weight per "
                  "output channel (dim 0), but this Linear's weight is a scalar")));
}

}  // namespace
}  // namespace lithe::plugins::qat
