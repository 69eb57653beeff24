// ptq's observers, grids, state and config checks on hand-made layers (test::FakeContext).
#include "plugins/ptq/ptq.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/quantizer.h"
#include "lithe/sdk_internal/options_json.h"
#include "plugins/ptq/observers.h"
#include "plugins/ptq/ptq_config.h"
#include "support/plugin_test.h"
#include "support/quantizer_test.h"

namespace lithe::plugins::ptq {
namespace {

using sdk::QuantType;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::testing::ThrowsMessage;
using Json = nlohmann::ordered_json;

/// {"quant_types": types, "quant_bits": bits} plus `extra` keys.
Json entry(std::vector<std::string> types, const Json& extra = Json::object(), int bits = 8) {
  Json e = test::quant_entry(types, bits);
  for (const auto& [k, v] : extra.items()) {
    e[k] = v;
  }
  return e;
}

/// A weightless layer quantizing its output with `extra` keys.
std::unique_ptr<sdk::LayerView> output_layer(const Json& extra, int bits = 8,
                                             const std::string& name = "relu") {
  return test::quant_layer(at::Tensor(), entry({"output"}, extra, bits), name);
}

float value(const sdk::LayerView& layer, const std::string& key) {
  return test::attribute_value(layer, key);
}

/// Same shape and float32 bit patterns.
bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
         a.contiguous().view(at::kInt).equal(b.contiguous().view(at::kInt));
}

/// The SDK's linear-grid formula in torch ops: (round_half_even(clamp(x / s + z)) − z) · s,
/// s and z broadcast (one value, or one per dim-0 slice).
at::Tensor sdk_formula(const at::Tensor& x, const at::Tensor& s, const at::Tensor& z, double qmin,
                       double qmax) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  if (s.numel() > 1) {
    shape[0] = s.numel();
  }
  const at::Tensor sv = s.reshape(shape);
  const at::Tensor zv = z.reshape(shape);
  return (at::round(at::clamp(x / sv + zv, qmin, qmax)) - zv) * sv;
}

/// Every tensor attribute of `layer`, cloned.
std::map<std::string, at::Tensor> snapshot(const sdk::LayerView& layer) {
  std::map<std::string, at::Tensor> out;
  for (const std::string& key : layer.attribute_keys()) {
    out[key] = sdk::tensor_attribute(layer, key).clone();
  }
  return out;
}

/// Whether two snapshots hold the same keys and the same values (NaN-free, +-inf equal).
bool same_state(const std::map<std::string, at::Tensor>& a,
                const std::map<std::string, at::Tensor>& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (const auto& [key, t] : a) {
    const auto it = b.find(key);
    if (it == b.end() || !t.equal(it->second)) {
      ADD_FAILURE() << key << ": " << t << " vs " << (it == b.end() ? at::Tensor() : it->second);
      return false;
    }
  }
  return true;
}

/// The validate_config error for `json` as config_list entry `index` ("" when accepted).
std::string config_error(const Json& json, int index = 0) {
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {});
  const sdk::Options options = test::config_entry(json, index);
  try {
    sdk::check_quant_config(options);
    ptq.quantizer->validate_config(options);
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidConfig) << e.what();
    return e.what();
  }
  EXPECT_TRUE(sdk::unread_option_paths(options).empty()) << "every key is read";
  return "";
}

double mse(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).square().mean().item<double>();
}

// --- min_max -------------------------------------------------------------------------------------

TEST(PtqMinMaxTest, ActivationGridIsTheHandComputedOneOfEveryBatchSeen) {
  auto relu = output_layer(Json::object());
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {relu.get()});
  ptq.quantizer->quantize_output(at::tensor({-1.f, .5f, 3.f}), *relu, true);
  // uint8 affine over [-1, 3]: scale 4/255, zero point round(1 / (4/255)) = round(63.75) = 64.
  EXPECT_EQ(value(*relu, "output_scale"), 4.f / 255.f);
  EXPECT_EQ(value(*relu, "output_zero_point"), 64.f);
  ptq.quantizer->quantize_output(at::tensor({-2.f, 1.f}), *relu, true);
  // Every batch seen: [-2, 3], scale 5/255, zero point round(2 / (5/255)) = 102.
  EXPECT_EQ(value(*relu, "output_observed_min"), -2.f);
  EXPECT_EQ(value(*relu, "output_observed_max"), 3.f);
  EXPECT_EQ(value(*relu, "output_batches"), 2.f);
  EXPECT_EQ(value(*relu, "output_scale"), 5.f / 255.f);
  EXPECT_EQ(value(*relu, "output_zero_point"), 102.f);
  EXPECT_EQ(value(*relu, "output_quant_min"), 0.f);
  EXPECT_EQ(value(*relu, "output_quant_max"), 255.f);
  const at::Tensor x = at::linspace(-3, 4, 101);
  const at::Tensor y = ptq.quantizer->quantize_output(x, *relu, false);
  EXPECT_TRUE(bit_equal(y, sdk_formula(x, at::tensor({5.f / 255.f}), at::tensor({102.f}), 0, 255)))
      << "the kernel is the SDK's formula bit for bit";
  EXPECT_FLOAT_EQ(y.max().item<float>(), 153.f * 5.f / 255.f) << "clipped at the grid's top";
}

TEST(PtqMinMaxTest, SymmetricInt8AndWeightPerTensorByHand) {
  const at::Tensor w = at::tensor({-1.f, .5f, 2.f, .25f}).reshape({2, 2});
  auto fc = test::quant_layer(
      w, entry({"weight", "output"}, {{"quant_scheme", {{"output", "per_tensor_symmetric"}}},
                                      {"quant_dtype", {{"output", "int"}}}}));
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {fc.get()});
  // The weight's grid from attach on: uint8 affine over [-1, 2]: scale 3/255, zero point 85.
  EXPECT_EQ(value(*fc, "weight_scale"), 3.f / 255.f);
  EXPECT_EQ(value(*fc, "weight_zero_point"), 85.f);
  EXPECT_EQ(value(*fc, "weight_quant_max"), 255.f);
  const at::Tensor wq = ptq.quantizer->quantize_weight(w, *fc, false);
  EXPECT_TRUE(bit_equal(wq, sdk_formula(w, at::tensor({3.f / 255.f}), at::tensor({85.f}), 0, 255)));
  ptq.quantizer->quantize_output(at::tensor({-.5f, 1.27f}), *fc, true);
  EXPECT_EQ(value(*fc, "output_scale"), 1.27f / 127.f);
  EXPECT_EQ(value(*fc, "output_zero_point"), 0.f);
  EXPECT_EQ(value(*fc, "output_quant_min"), -127.f);
  EXPECT_EQ(value(*fc, "output_quant_max"), 127.f);
}

TEST(PtqMinMaxTest, GradientIsStraightThrough) {
  const at::Tensor w = (at::randn({6, 5}) * .3).requires_grad_(true);
  auto fc = test::quant_layer(w, entry({"weight", "output"}));
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {fc.get()});
  const at::Tensor wq = sdk::apply_quant_grad(*ptq.quantizer, w, QuantType::kWeight, *fc, true);
  const at::Tensor x = at::randn({3, 6}).requires_grad_(true);
  const at::Tensor out = sdk::apply_quant_grad(*ptq.quantizer, x, QuantType::kOutput, *fc, true);
  const at::Tensor upstream = at::randn({6, 5});
  (wq * upstream).sum().backward();
  out.sum().backward();
  EXPECT_TRUE(w.grad().equal(upstream));
  EXPECT_TRUE(x.grad().equal(at::ones({3, 6})));
}

// --- moving_average ------------------------------------------------------------------------------

TEST(PtqMovingAverageTest, FirstBatchInitialisesThenTheEmaOfEachBatchsMinAndMax) {
  auto relu = output_layer({{"observer", "moving_average"}, {"averaging_constant", .1}});
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {relu.get()});
  ptq.quantizer->quantize_output(at::tensor({-1.f, 0.f, 2.f}), *relu, true);
  EXPECT_EQ(value(*relu, "output_observed_min"), -1.f);
  EXPECT_EQ(value(*relu, "output_observed_max"), 2.f);
  ptq.quantizer->quantize_output(at::tensor({-3.f, 4.f}), *relu, true);
  ptq.quantizer->quantize_output(at::tensor({0.f, 1.f}), *relu, true);
  // torch.ao: m = m + c * (batch - m) in float32, c = float(0.1).
  float lo = -1.f;
  float hi = 2.f;
  for (const auto& [b_lo, b_hi] : {std::pair{-3.f, 4.f}, std::pair{0.f, 1.f}}) {
    const float d_lo = .1f * (b_lo - lo);
    lo = lo + d_lo;
    const float d_hi = .1f * (b_hi - hi);
    hi = hi + d_hi;
  }
  EXPECT_EQ(value(*relu, "output_observed_min"), lo);
  EXPECT_EQ(value(*relu, "output_observed_max"), hi);
  EXPECT_NEAR(lo, -1.08f, 1e-6);  // -1 - .2 = -1.2, then -1.2 + .12
  EXPECT_NEAR(hi, 2.08f, 1e-6);   // 2 + .2 = 2.2, then 2.2 - .12
  EXPECT_EQ(value(*relu, "output_batches"), 3.f);
  EXPECT_EQ(value(*relu, "output_scale"), (hi - lo) / 255.f);
}

// --- percentile ----------------------------------------------------------------------------------

TEST(PtqPercentileTest, ClipsTheOneHugeValue) {
  auto relu = output_layer({{"observer", "percentile"}});  // 99.99
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {relu.get()});
  // 20000 values in [-1, 1] and one 1000: 0.01 % of 20001 values is 2 values per tail.
  const at::Tensor x = at::cat({at::linspace(-1, 1, 20000), at::tensor({1000.f})});
  ptq.quantizer->quantize_output(x, *relu, true);
  const float min_max_scale = 1001.f / 255.f;
  // The histogram spans [-1, 1000] in 2048 bins of width w: the 99.99th percentile lies in
  // the bin holding 1 (within w of it), the 0.01st in the first bin (within w of -1).
  const double w = 1001.0 / 2048.0;
  const float scale = value(*relu, "output_scale");
  EXPECT_GE(scale, (2.0 - 2 * w) / 255.0);
  EXPECT_LE(scale, (2.0 + w) / 255.0);
  EXPECT_LT(scale, min_max_scale / 300);
  EXPECT_EQ(value(*relu, "output_observed_max"), 1000.f) << "the observed range is kept";
  // The outlier is clipped to the grid's top.
  const float top = (255.f - value(*relu, "output_zero_point")) * scale;
  EXPECT_FLOAT_EQ(ptq.quantizer->quantize_output(at::tensor({1000.f}), *relu, false).item<float>(),
                  top);
}

TEST(PtqPercentileTest, WeightPercentilesAreExactPerChannel) {
  // Row 0: 0..100 (101 values) and row 1: 0..-100; the 90th and 10th percentiles are exact.
  const at::Tensor w = at::stack({at::arange(101, at::kFloat), -at::arange(101, at::kFloat)});
  auto fc = test::quant_layer(w, entry({"weight"}, {{"observer", "percentile"},
                                                    {"percentile", 90},
                                                    {"quant_scheme", "per_channel_affine"}}));
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {fc.get()});
  const at::Tensor scale = sdk::tensor_attribute(*fc, "weight_scale");
  // [10, 90] -> extended to [0, 90]; [-90, -10] -> [-90, 0].
  EXPECT_EQ(scale[0].item<float>(), 90.f / 255.f);
  EXPECT_EQ(scale[1].item<float>(), 90.f / 255.f);
  EXPECT_EQ(sdk::tensor_attribute(*fc, "weight_zero_point")[1].item<float>(), 255.f);
}

// --- mse -----------------------------------------------------------------------------------------

TEST(PtqMseTest, PicksAClipNoWiderThanMinMaxWithNoMoreErrorOnTheCalibrationData) {
  at::manual_seed(3);
  const at::Tensor x = at::cat({at::randn({10000}), at::tensor({20.f, -20.f, 19.f})});
  for (int bits : {4, 8}) {
    auto by_mse = output_layer({{"observer", "mse"}}, bits, "mse");
    auto by_min_max = output_layer(Json::object(), bits, "min_max");
    test::AttachedQuantizer ptq(register_algorithms, "ptq", {by_mse.get(), by_min_max.get()});
    ptq.quantizer->quantize_output(x, *by_mse, true);
    ptq.quantizer->quantize_output(x, *by_min_max, true);
    const float mse_scale = value(*by_mse, "output_scale");
    const float min_max_scale = value(*by_min_max, "output_scale");
    EXPECT_LE(mse_scale, min_max_scale) << bits << " bits";
    const double mse_error = mse(ptq.quantizer->quantize_output(x, *by_mse, false), x);
    const double min_max_error = mse(ptq.quantizer->quantize_output(x, *by_min_max, false), x);
    EXPECT_LE(mse_error, min_max_error) << bits << " bits";
    if (bits == 4) {  // 16 codes over [-20, 20] are coarse: clipping three outliers pays
      EXPECT_LT(mse_scale, min_max_scale / 2);
      EXPECT_LT(mse_error, min_max_error / 2);
    }
  }
}

TEST(PtqMseTest, WeightSearchPerChannelNeverWidensAndNeverLosesToMinMax) {
  at::manual_seed(4);
  at::Tensor w = at::randn({4, 300});
  w[0][0] = 12.f;  // one channel with an outlier
  for (const char* scheme : {"per_channel_affine", "per_channel_symmetric"}) {
    auto by_mse = test::quant_layer(
        w, entry({"weight"}, {{"observer", "mse"}, {"quant_scheme", scheme}}, 4), "mse");
    auto by_min_max =
        test::quant_layer(w, entry({"weight"}, {{"quant_scheme", scheme}}, 4), "min_max");
    test::AttachedQuantizer ptq(register_algorithms, "ptq", {by_mse.get(), by_min_max.get()});
    const at::Tensor q_mse = ptq.quantizer->quantize_weight(w, *by_mse, false);
    const at::Tensor q_min_max = ptq.quantizer->quantize_weight(w, *by_min_max, false);
    EXPECT_TRUE(sdk::tensor_attribute(*by_mse, "weight_scale")
                    .le(sdk::tensor_attribute(*by_min_max, "weight_scale"))
                    .all()
                    .item<bool>())
        << scheme;
    const at::Tensor e_mse = (q_mse - w).square().sum(1);
    const at::Tensor e_min_max = (q_min_max - w).square().sum(1);
    EXPECT_TRUE(e_mse.le(e_min_max).all().item<bool>()) << scheme << e_mse << e_min_max;
    EXPECT_LT(e_mse[0].item<float>(), e_min_max[0].item<float>()) << "the outlier is clipped";
  }
}

// --- kl ------------------------------------------------------------------------------------------

TEST(PtqKlTest, ThresholdLiesBetweenTheBulkAndTheOutliers) {
  at::manual_seed(5);
  const at::Tensor bulk = at::randn({100000});
  const at::Tensor x = at::cat({bulk, at::full({10}, 50.f), at::full({10}, -50.f)});
  auto relu = output_layer(
      {{"observer", "kl"}, {"quant_scheme", "per_tensor_symmetric"}, {"quant_dtype", "int"}});
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {relu.get()});
  ptq.quantizer->quantize_output(x, *relu, true);
  const double threshold = value(*relu, "output_scale") * 127.0;  // symmetric: t / 127
  const double w = 50.0 / 2048;                                   // |x| histogram over [0, 50]
  const double bulk_max = bulk.abs().max().item<double>();
  // Candidates start at 128 bins (int8's 128 levels); a threshold in the empty gap would leave
  // outliers where Q has nothing (infinite divergence), so t ends at most one bin above the
  // bulk.
  EXPECT_GE(threshold, 128 * w * (1 - 1e-6));
  EXPECT_LE(threshold, bulk_max + w * (1 + 1e-6));
  EXPECT_LT(threshold, 50.0 / 8);
  EXPECT_GT(threshold, 2.5) << "most of the bulk is kept";
  EXPECT_EQ(value(*relu, "output_observed_max"), 50.f);
}

TEST(PtqKlTest, ThresholdSearchByHand) {
  // A decreasing bulk in bins 0..127 and one outlier in bin 2000, 128 levels: every threshold
  // in the empty gap leaves the outlier where Q has nothing (infinite divergence); the full
  // range merges 16 bins per level, flattening the slope; 128 bins map one to one and only
  // move the outlier into bin 127: the least divergence.
  Histogram h;
  h.start = 0;
  h.width = 1;
  for (int b = 0; b < 128; ++b) {
    h.counts[static_cast<size_t>(b)] = 1000 + 10 * (127 - b);
  }
  h.counts[2000] = 1;
  EXPECT_EQ(kl_threshold(h, 128), 128.0);
  EXPECT_EQ(kl_threshold(h, 4096), 2048.0) << "more levels than bins: no clipping";
}

// --- histograms ----------------------------------------------------------------------------------

TEST(PtqHistogramTest, GrowingMergesWholeBinsAndKeepsEveryCount) {
  Histogram h;
  cover(h, 0.0, 2048.0);
  EXPECT_EQ(h.start, 0.0);
  EXPECT_EQ(h.width, 1.0);
  double total = 0.0;
  for (size_t b = 0; b < h.counts.size(); ++b) {
    h.counts[b] = static_cast<double>(b % 3);
    total += h.counts[b];
  }
  cover(h, 0.0, 2048.0);
  EXPECT_EQ(h.width, 1.0) << "a covered range changes nothing";
  cover(h, -3.0, 5000.0);  // 3 old bins below: start -3, width 4 covers [-3, 8189)
  EXPECT_EQ(h.start, -3.0);
  EXPECT_EQ(h.width, 4.0);
  double sum = 0.0;
  for (double c : h.counts) {
    sum += c;
  }
  EXPECT_EQ(sum, total);
  // New bin 0 holds old bins 0 (shifted to 3), i.e. old 0 only: [-3, 1); bin 1 old 1..4.
  EXPECT_EQ(h.counts[0], 0.0);
  EXPECT_EQ(h.counts[1], 1.0 + 2.0 + 0.0 + 1.0);
  EXPECT_DOUBLE_EQ(quantile(h, 0.0), -3.0 + 4.0) << "the first non-empty bin's start";
}

// --- state ---------------------------------------------------------------------------------------

const char* const kObservers[] = {"min_max", "moving_average", "percentile", "mse", "kl"};

TEST(PtqStateTest, BeforeAnyObservationActivationsPassThroughWithAnEmptyGrid) {
  for (const char* observer : kObservers) {
    auto relu = output_layer({{"observer", observer}});
    test::AttachedQuantizer ptq(register_algorithms, "ptq", {relu.get()});
    EXPECT_EQ(value(*relu, "output_quant_max"), 0.f) << observer;
    EXPECT_EQ(value(*relu, "output_quant_min"), 0.f) << observer;
    const at::Tensor x = at::tensor({-1.234f, 5.678f});
    EXPECT_TRUE(ptq.quantizer->quantize_output(x, *relu, false).equal(x)) << observer;
    EXPECT_EQ(value(*relu, "output_batches"), 0.f) << observer;
  }
}

TEST(PtqStateTest, EvaluationForwardsChangeNothing) {
  for (const char* observer : kObservers) {
    const at::Tensor w = at::randn({5, 3});
    auto fc = test::quant_layer(
        w, entry({"input", "weight", "output"}, {{"observer", {{"output", observer}}}}));
    test::AttachedQuantizer ptq(register_algorithms, "ptq", {fc.get()});
    ptq.quantizer->quantize_input(at::randn({4, 3}), *fc, true);
    ptq.quantizer->quantize_output(at::randn({4, 5}), *fc, true);
    const auto before = snapshot(*fc);
    const at::Tensor x = at::randn({4, 5}) * 100;  // far outside the observed range
    const at::Tensor y1 = ptq.quantizer->quantize_output(x, *fc, false);
    ptq.quantizer->quantize_input(x.t(), *fc, false);
    ptq.quantizer->quantize_weight(w, *fc, false);
    const at::Tensor y2 = ptq.quantizer->quantize_output(x, *fc, false);
    EXPECT_TRUE(same_state(before, snapshot(*fc))) << observer;
    EXPECT_TRUE(y1.equal(y2)) << observer;
  }
}

TEST(PtqStateTest, StateHasFixedShapesFromAttachOn) {
  auto fc = test::quant_layer(
      at::randn({6, 2}),
      entry({"weight", "output"}, {{"observer", {{"output", "kl"}}},
                                   {"quant_scheme", {{"weight", "per_channel_symmetric"}}},
                                   {"quant_dtype", {{"weight", "int"}}}}));
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {fc.get()});
  EXPECT_THAT(
      fc->attribute_keys(),
      ::testing::ElementsAre("output_batches", "output_histogram", "output_histogram_bin_width",
                             "output_histogram_start", "output_observed_max", "output_observed_min",
                             "output_observer", "output_quant_max", "output_quant_min",
                             "output_scale", "output_zero_point", "weight_quant_max",
                             "weight_quant_min", "weight_scale", "weight_zero_point"));
  EXPECT_EQ(sdk::tensor_attribute(*fc, "output_histogram").sizes(), at::IntArrayRef({kBins}));
  EXPECT_EQ(sdk::tensor_attribute(*fc, "weight_scale").sizes(), at::IntArrayRef({6}));
  EXPECT_EQ(value(*fc, "output_observer"), 4.f);
  EXPECT_EQ(value(*fc, "output_observed_min"), std::numeric_limits<float>::infinity());
  for (const std::string& key : fc->attribute_keys()) {
    EXPECT_EQ(sdk::tensor_attribute(*fc, key).scalar_type(), at::kFloat) << key;
  }
}

TEST(PtqStateTest, PerChannelSymmetricInt8WeightsHaveZeroPointZeroAndMaxAbsOver127) {
  const at::Tensor w = at::tensor({-.5f, .25f, .1f, .3f,     // max |w| .5
                                   1.27f, -1.f, 0.f, .5f,    // 1.27
                                   .02f, -.03f, .01f, 0.f})  // .03
                           .reshape({3, 4});
  auto fc = test::quant_layer(
      w, entry({"weight"}, {{"quant_scheme", "per_channel_symmetric"}, {"quant_dtype", "int"}}));
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {fc.get()});
  const at::Tensor scale = sdk::tensor_attribute(*fc, "weight_scale");
  const at::Tensor zero_point = sdk::tensor_attribute(*fc, "weight_zero_point");
  EXPECT_TRUE(scale.equal(at::tensor({.5f / 127.f, 1.27f / 127.f, .03f / 127.f}))) << scale;
  EXPECT_TRUE(zero_point.equal(at::zeros({3}))) << zero_point;
  EXPECT_EQ(value(*fc, "weight_quant_min"), -127.f);
  EXPECT_EQ(value(*fc, "weight_quant_max"), 127.f);
  const at::Tensor q = ptq.quantizer->quantize_weight(w, *fc, true);
  EXPECT_TRUE(bit_equal(q, sdk_formula(w, scale, zero_point, -127, 127)));
  EXPECT_TRUE((q / scale.reshape({3, 1})).abs().amax(1).round().equal(at::full({3}, 127.f)))
      << "each channel reaches the end of its own grid";
}

TEST(PtqStateTest, ARestoredStateContinuesExactlyAsIfNeverSaved) {
  at::manual_seed(6);
  const std::vector<at::Tensor> first = {at::randn({200}), at::randn({300}) * 2};
  const std::vector<at::Tensor> then = {at::randn({100}) * 5 + 1, at::randn({50})};
  for (const char* observer : kObservers) {
    const Json keys = {{"observer", observer}};
    auto whole = output_layer(keys, 8, "whole");
    auto saved = output_layer(keys, 8, "saved");
    test::AttachedQuantizer a(register_algorithms, "ptq", {whole.get(), saved.get()});
    for (const at::Tensor& x : first) {
      a.quantizer->quantize_output(x, *whole, true);
      a.quantizer->quantize_output(x, *saved, true);
    }
    // A model saved here and quantized again: the host sets the state before attach.
    auto restored = output_layer(keys, 8, "restored");
    for (const auto& [key, t] : snapshot(*saved)) {
      restored->set_attribute(key, t);
    }
    test::AttachedQuantizer b(register_algorithms, "ptq", {restored.get()});
    EXPECT_TRUE(same_state(snapshot(*saved), snapshot(*restored))) << observer;
    for (const at::Tensor& x : then) {
      a.quantizer->quantize_output(x, *whole, true);
      b.quantizer->quantize_output(x, *restored, true);
    }
    EXPECT_TRUE(same_state(snapshot(*whole), snapshot(*restored))) << observer;
    EXPECT_EQ(value(*restored, "output_batches"), 4.f) << observer;
  }
}

TEST(PtqStateTest, AStateOfAnotherObserverIsRefusedByName) {
  auto saved = output_layer(Json::object());
  test::AttachedQuantizer a(register_algorithms, "ptq", {saved.get()});
  a.quantizer->quantize_output(at::randn({10}), *saved, true);
  auto restored = output_layer({{"observer", "kl"}}, 8, "relu3");
  for (const auto& [key, t] : snapshot(*saved)) {
    restored->set_attribute(key, t);
  }
  EXPECT_THAT([&] { test::AttachedQuantizer b(register_algorithms, "ptq", {restored.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "layer 'relu3': its saved ptq state for the output was observed by "
                  "\"min_max\", but this entry's observer is \"kl\"; keep the saved model's "
                  "observer, or quantize the float model")));
}

TEST(PtqStateTest, APerTensorWeightStateIsRefusedForAPerChannelEntry) {
  const at::Tensor w = at::randn({3, 2});
  auto layer = test::quant_layer(w, entry({"weight"}, {{"quant_scheme", "per_channel_affine"}}));
  layer->set_attribute("weight_scale", at::ones({1}));
  EXPECT_THAT([&] { test::AttachedQuantizer b(register_algorithms, "ptq", {layer.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "layer 'fc': its saved ptq state 'weight_scale' has shape [1], but this entry "
                  "needs [3]")));
}

TEST(PtqStateTest, WeightGridFollowsTheWeightAfterAnOptimizerStep) {
  const at::Tensor w = at::tensor({-1.f, 2.f});
  for (const char* observer : {"min_max", "mse", "percentile"}) {
    auto layer = test::quant_layer(w.clone(), entry({"weight"}, {{"observer", observer}}));
    test::AttachedQuantizer ptq(register_algorithms, "ptq", {layer.get()});
    const float before = value(*layer, "weight_scale");
    {
      at::NoGradGuard no_grad;
      layer->weight().mul_(2);  // the optimizer updates the live weight in place
    }
    ptq.quantizer->step();
    EXPECT_FLOAT_EQ(value(*layer, "weight_scale"), 2 * before) << observer;
  }
}

// --- data-parallel runs --------------------------------------------------------------------------

TEST(PtqDataParallelTest, EveryRanksBatchRangeAndCountsAreCombined) {
  auto relu = output_layer({{"observer", "percentile"}, {"percentile", 100}});
  test::AttachedQuantizer ptq(register_algorithms, "ptq", {relu.get()});
  // A second rank whose batch spans [-4, 1] and holds 3 values in the first bin.
  ptq.context->peer = [](std::vector<at::Tensor>& tensors, sdk::Reduction op) {
    if (op == sdk::Reduction::kMax) {
      tensors[0] = at::maximum(tensors[0], at::tensor({4.f, 1.f}));
    } else {
      ASSERT_EQ(op, sdk::Reduction::kSum);
      tensors[0][0] += 3;
    }
  };
  ptq.quantizer->quantize_output(at::tensor({-1.f, 0.f, 2.f}), *relu, true);
  EXPECT_EQ(ptq.context->reductions, 2) << "the range, then the histogram";
  EXPECT_EQ(value(*relu, "output_observed_min"), -4.f);
  EXPECT_EQ(value(*relu, "output_observed_max"), 2.f);
  EXPECT_EQ(value(*relu, "output_histogram_start"), -4.f) << "the step's range, on every rank";
  EXPECT_EQ(sdk::tensor_attribute(*relu, "output_histogram").sum().item<float>(), 6.f);
  EXPECT_EQ(value(*relu, "output_scale"), 6.f / 255.f) << "percentile 100: [-4, 2]";
}

// --- config --------------------------------------------------------------------------------------

TEST(PtqConfigTest, AcceptsEveryObserverInStringAndObjectForms) {
  for (const char* observer : kObservers) {
    EXPECT_EQ(config_error(entry({"input", "output"}, {{"observer", observer}})), "") << observer;
  }
  EXPECT_EQ(config_error(entry({"input", "weight", "output"},
                               {{"observer", {{"weight", "mse"}, {"output", "percentile"}}},
                                {"percentile", 99.9},
                                {"quant_scheme", {{"weight", "per_channel_symmetric"}}},
                                {"quant_dtype", "int"}})),
            "");
  EXPECT_EQ(
      config_error(entry({"output"}, {{"observer", "moving_average"}, {"averaging_constant", 1}})),
      "");
  EXPECT_EQ(config_error(entry({"weight"}, {{"observer", "percentile"}, {"percentile", 50}})), "");
}

TEST(PtqConfigTest, RefusesUnknownObserversAndWrongTypesNamingPathRuleAndValue) {
  EXPECT_EQ(config_error(entry({"output"}, {{"observer", "minmax"}}), 2),
            "/config_list/2/observer must be one of \"min_max\", \"moving_average\", "
            "\"percentile\", \"mse\", \"kl\", or an object giving one per quant type, got "
            "\"minmax\"");
  EXPECT_EQ(config_error(entry({"output"}, {{"observer", 5}})),
            "/config_list/0/observer must be one of \"min_max\", \"moving_average\", "
            "\"percentile\", \"mse\", \"kl\", or an object giving one per quant type, got 5");
  EXPECT_EQ(config_error(entry({"output"}, {{"observer", {{"output", true}}}})),
            "/config_list/0/observer/output must be one of \"min_max\", \"moving_average\", "
            "\"percentile\", \"mse\", \"kl\", got true");
  EXPECT_EQ(config_error(entry({"output"}, {{"observer", {{"weight", "mse"}}}})),
            "/config_list/0/observer/weight: the keys of observer must be quant types of this "
            "entry (\"output\"), got \"weight\"");
}

TEST(PtqConfigTest, RefusesKlAndMovingAverageForTheWeight) {
  EXPECT_EQ(config_error(entry({"weight"}, {{"observer", "kl"}})),
            "/config_list/0/observer must be \"min_max\", \"mse\" or \"percentile\" for the "
            "weight (its range comes from the current weight, not from a stream of batches), "
            "got \"kl\"");
  EXPECT_THAT(config_error(entry({"weight", "output"}, {{"observer", "moving_average"}})),
              HasSubstr("give each quant type its own, e.g. {\"weight\": \"min_max\", "
                        "\"output\": \"kl\"}), got \"moving_average\""));
  EXPECT_THAT(config_error(entry({"weight", "output"}, {{"observer", {{"weight", "kl"}}}})),
              HasSubstr("/config_list/0/observer/weight must be \"min_max\""));
}

TEST(PtqConfigTest, RefusesPerChannelActivationsAndOneBitSignedGrids) {
  EXPECT_EQ(config_error(entry({"output"}, {{"quant_scheme", "per_channel_affine"}})),
            "/config_list/0/quant_scheme must be \"per_tensor_affine\" or "
            "\"per_tensor_symmetric\" for the output (per-channel grids are for the weight only, "
            "one per output channel), got \"per_channel_affine\"");
  EXPECT_THAT(config_error(entry({"weight", "output"},
                                 {{"quant_scheme", {{"output", "per_channel_symmetric"}}}})),
              HasSubstr("/config_list/0/quant_scheme/output must be \"per_tensor_affine\""));
  EXPECT_EQ(config_error(entry({"weight"}, {{"quant_dtype", "int"}}, 1)),
            "/config_list/0/quant_dtype must be \"uint\" for the weight's 1-bit grid "
            "(/config_list/0/quant_bits; the signed grid [-(2^(bits-1))+1, 2^(bits-1)-1] needs "
            "at least 2 bits), got \"int\"");
  EXPECT_THAT(config_error(entry({"weight"}, {{"quant_dtype", "int8"}})),
              HasSubstr("/config_list/0/quant_dtype must be one of \"uint\", \"int\""));
}

TEST(PtqConfigTest, RefusesBadPercentilesAndAveragingConstants) {
  const Json percentile = {{"observer", "percentile"}};
  auto with = [](Json keys, const char* key, const Json& v) {
    keys[key] = v;
    return keys;
  };
  // The SDK's rule text writes 50 as "5e+01" (its shortest round-tripping text picks one
  // significant digit); either spelling names the path, the rule and the value.
  EXPECT_THAT(config_error(entry({"output"}, with(percentile, "percentile", 150)), 1),
              AnyOf("/config_list/1/percentile must be a number in [50, 100], got 150",
                    "/config_list/1/percentile must be a number in [5e+01, 1e+02], got 1.5e+02"));
  EXPECT_THAT(config_error(entry({"output"}, with(percentile, "percentile", 10))),
              AllOf(StartsWith("/config_list/0/percentile must be a number in ["),
                    AnyOf(EndsWith("got 10"), EndsWith("got 1e+01"))));
  EXPECT_THAT(config_error(entry({"output"}, with(percentile, "percentile", "high"))),
              HasSubstr("/config_list/0/percentile must be a number"));
  const Json average = {{"observer", "moving_average"}};
  EXPECT_THAT(config_error(entry({"output"}, with(average, "averaging_constant", 0))),
              HasSubstr("/config_list/0/averaging_constant must be a number in (0, 1], got 0"));
  EXPECT_EQ(config_error(entry({"output"}, {{"percentile", 99.9}})),
            "/config_list/0/percentile is read only by the \"percentile\" observer, which no "
            "quant type of this entry uses (set \"observer\"), got 99.9");
  EXPECT_THAT(config_error(entry({"output"}, with(percentile, "averaging_constant", .5))),
              HasSubstr("/config_list/0/averaging_constant is read only by the "
                        "\"moving_average\" observer"));
}

TEST(PtqConfigTest, AttachChecksTheSameRulesAndRegistersTheName) {
  auto relu = output_layer({{"observer", "entropy"}});
  EXPECT_THAT([&] { test::AttachedQuantizer ptq(register_algorithms, "ptq", {relu.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/observer must be one of")));
  auto weightless = test::quant_layer(at::Tensor(), entry({"weight"}), "relu1");
  EXPECT_THAT([&] { test::AttachedQuantizer ptq(register_algorithms, "ptq", {weightless.get()}); },
              ThrowsMessage<sdk::Error>(HasSubstr("layer 'relu1': ptq is configured to quantize "
                                                  "its weight")));
  host::PluginRegistry registry;
  register_algorithms(registry);
  EXPECT_NE(registry.find(host::AlgorithmKind::kQuantizer, "ptq"), nullptr);
}

}  // namespace
}  // namespace lithe::plugins::ptq
