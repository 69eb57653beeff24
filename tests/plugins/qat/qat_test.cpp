#include "plugins/qat/qat.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
#include "plugins/qat/tracked_range.h"
#include "support/paths.h"
#include "support/plugin_test.h"
#include "support/quantizer_test.h"

namespace lithe::plugins::qat {
namespace {

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

/// NNI v2.0 QAT_Quantizer._quantize then _dequantize, in torch ops, with the parameters as the
/// float32 [1] buffers NNI keeps them in: the reference the fused kernel must match bit for bit.
at::Tensor nni_fake_quantize(const at::Tensor& x, float scale, float zero_point, int bits) {
  const at::Tensor s = at::tensor({scale});
  const at::Tensor zp = at::tensor({zero_point});
  const at::Tensor transformed = zp + x / s;
  const at::Tensor q = at::round(at::clamp(transformed, 0, (int64_t{1} << bits) - 1));
  return s * (q - zp);
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

}  // namespace
}  // namespace lithe::plugins::qat
