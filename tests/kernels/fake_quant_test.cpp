// Fused fake quantization: bit-exactness against ATen's fake-quant ops (QuantFormula::kAten) and
// against NNI's tensor expressions (QuantFormula::kNni), the STE mask rule, per-channel axes,
// thread-count independence, NNI conformance numbers and the error message of every check.

#include "lithe/kernels/fake_quant_ops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "lithe/kernels/fake_quant.h"
#include "lithe/sdk/error.h"

namespace lithe::kernels {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Property;
using ::testing::Throws;
using ::testing::ThrowsMessage;

/// Byte equality (NaN payloads included), which at::equal does not give for NaN.
bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor ca = a.contiguous();
  const at::Tensor cb = b.contiguous();
  return ca.sizes() == cb.sizes() && ca.scalar_type() == cb.scalar_type() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

/// Random values spread over and beyond the clamp range, plus values placed exactly on .5
/// rounding boundaries of x * (1/scale) and of x / scale + zp (for a power-of-two scale both are
/// exact), plus exact grid points and signed zeros.
at::Tensor boundary_data(int64_t n, double scale, double zp, int64_t qmin, int64_t qmax,
                         uint64_t seed) {
  at::manual_seed(seed);
  const double span = static_cast<double>(qmax - qmin) * scale;
  at::Tensor x = (at::rand({n}) * 3.0 - 1.0) * span - zp * scale;
  const int64_t k = n / 4;
  // (j + 0.5 - zp) * scale for integers j around and beyond the range.
  const at::Tensor j = at::randint(qmin - 20, qmax + 20, {k}, at::kDouble);
  x.slice(0, 0, k).copy_(((j + 0.5 - zp) * scale).to(at::kFloat));
  x.slice(0, k, 2 * k).copy_(((j - zp) * scale).to(at::kFloat));
  x[2 * k] = 0.0f;
  x[2 * k + 1] = -0.0f;
  return x;
}

at::Tensor bools(const std::vector<int>& values) {
  return at::tensor(values, at::kInt).to(at::kBool);
}

at::Tensor nni_grid(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zp) {
  return at::round(x / scale + zp);  // NNI QuantGrad._quantize, float32 throughout
}

/// NNI QAT fake quantization and QATGrad's mask, spelled with tensor ops as NNI does.
std::pair<at::Tensor, at::Tensor> nni_reference(const at::Tensor& x, const at::Tensor& scale,
                                                const at::Tensor& zp, int64_t qmin,
                                                int64_t qmax) {
  const at::Tensor r = nni_grid(x, scale, zp);
  const at::Tensor q = at::clamp(zp + x / scale, static_cast<double>(qmin),
                                 static_cast<double>(qmax))
                           .round();  // NNI clamps before rounding; equal for integer bounds
  const at::Tensor y = scale * (q - zp);
  const at::Tensor mask = ((r < qmin) | (r > qmax)).logical_not();
  return {y, mask};
}

// ---------------------------------------------------------------- ATen order, per tensor

TEST(FakeQuantPerTensorTest, AtenOrderMatchesAtenFakeQuantizeBitForBit) {
  struct Case {
    double scale;
    int64_t zp, qmin, qmax;
  };
  const std::vector<Case> cases = {{0.25, 0, 0, 255},     {6.0 / 255.0, 128, 0, 255},
                                   {0.0173, -3, -128, 127}, {0.5, 7, 0, 15},
                                   {1e-3, 0, -127, 127},    {3.0, 1, 0, 1}};
  uint64_t seed = 10;
  for (const Case& c : cases) {
    const at::Tensor x = boundary_data(100003, c.scale, static_cast<double>(c.zp), c.qmin, c.qmax,
                                       seed++);
    const auto ref = at::fake_quantize_per_tensor_affine_cachemask(x, c.scale, c.zp, c.qmin,
                                                                   c.qmax);
    const FakeQuantResult got =
        fake_quantize_per_tensor(x, c.scale, static_cast<double>(c.zp), c.qmin, c.qmax,
                                 QuantFormula::kAten);
    EXPECT_TRUE(same_bytes(got.output, std::get<0>(ref))) << "scale " << c.scale;
    EXPECT_TRUE(at::equal(got.mask, std::get<1>(ref))) << "scale " << c.scale;
    EXPECT_TRUE(same_bytes(got.output,
                           at::fake_quantize_per_tensor_affine(x, c.scale, c.zp, c.qmin, c.qmax)));
  }
}

// The inputs both ATen kernels are checked on off the grid: NaN, infinities, values too large
// for int64, then ordinary ones.
at::Tensor off_grid_values() {
  const float inf = std::numeric_limits<float>::infinity();
  return at::tensor({std::nanf(""), inf, -inf, 1e30f, -1e30f, 0.3f, 2.0f, 1.1f, -0.7f, 0.5f,
                     1.5f, 2.5f, -2.5f, 100.0f, 3.0f, -3.0f, 0.0f});
}

TEST(FakeQuantPerTensorTest, AtenOrderReproducesAtensSaturationOnNanAndInfinity) {
  // libtorch 2.x's per-tensor kernel clamps with fmin/fmax: NaN and -inf to qmin, +inf and 1e30
  // to qmax, on every CPU.
  const at::Tensor x = off_grid_values();
  const auto ref = at::fake_quantize_per_tensor_affine_cachemask(x, 0.5, 3, 0, 7);
  const FakeQuantResult got = fake_quantize_per_tensor(x, 0.5, 3, 0, 7, QuantFormula::kAten);
  EXPECT_EQ(std::get<0>(ref)[1].item<float>(), (7 - 3) * 0.5f);
  EXPECT_EQ(std::get<0>(ref)[0].item<float>(), (0 - 3) * 0.5f);
  EXPECT_TRUE(same_bytes(got.output, std::get<0>(ref))) << got.output << std::get<0>(ref);
  EXPECT_TRUE(at::equal(got.mask, std::get<1>(ref))) << got.mask << std::get<1>(ref);
}

TEST(FakeQuantPerChannelTest, AtenOrderReproducesAtensInt64ConversionOnNanAndInfinity) {
#if !defined(__x86_64__)
  // ATen's per-channel kernel turns out-of-range values into int64 with the CPU's conversion:
  // INT64_MIN on x86-64 (what the kernel reproduces), saturation elsewhere.
  GTEST_SKIP() << "non-finite and out-of-range inputs follow x86-64's float-to-int64 rule";
#endif
  // Every one of them lands on qmin.
  const at::Tensor rows = off_grid_values().reshape({1, -1}).repeat({2, 1});
  const at::Tensor scales = at::full({2}, 0.5, at::kFloat);
  const at::Tensor zero_points = at::full({2}, 3, at::kInt);
  const auto ref =
      at::fake_quantize_per_channel_affine_cachemask(rows, scales, zero_points, 0, 0, 7);
  const FakeQuantResult got = fake_quantize_per_channel(rows, scales, zero_points.to(at::kFloat),
                                                        0, 0, 7, QuantFormula::kAten);
  EXPECT_EQ(std::get<0>(ref)[0][1].item<float>(), (0 - 3) * 0.5f);
  EXPECT_TRUE(same_bytes(got.output, std::get<0>(ref))) << got.output << std::get<0>(ref);
  EXPECT_TRUE(at::equal(got.mask, std::get<1>(ref))) << got.mask << std::get<1>(ref);
}

// ---------------------------------------------------------------- NNI order, per tensor

TEST(FakeQuantPerTensorTest, NniOrderMatchesNniTensorExpressionsBitForBit) {
  struct Case {
    float scale, zp;
    int64_t qmin, qmax;
  };
  // Includes a fractional zero point (NNI allows it for clamped z0 only, but the formula does).
  const std::vector<Case> cases = {{0.25f, 0.0f, 0, 255},        {6.0f / 255.0f, 128.0f, 0, 255},
                                   {0.0173f, 42.0f, 0, 255},      {0.08f, 4.0f, 0, 15},
                                   {5.9723f / 255.0f, 0.0f, 0, 255}, {0.3f, 0.5f, 0, 3}};
  uint64_t seed = 30;
  for (const Case& c : cases) {
    const at::Tensor x = boundary_data(100003, c.scale, c.zp, c.qmin, c.qmax, seed++);
    const at::Tensor s = at::full({1}, c.scale);
    const at::Tensor z = at::full({1}, c.zp);
    const auto [y_ref, mask_ref] = nni_reference(x, s, z, c.qmin, c.qmax);
    const FakeQuantResult got = fake_quantize_per_tensor(x, c.scale, c.zp, c.qmin, c.qmax);
    EXPECT_TRUE(same_bytes(got.output, y_ref)) << "scale " << c.scale;
    EXPECT_TRUE(at::equal(got.mask, mask_ref)) << "scale " << c.scale;
  }
}

TEST(FakeQuantPerTensorTest, RoundsHalfToEvenAndMasksLikeQatGrad) {
  // scale 1, zp 0: r = nearbyint(x). 42.5 -> 42, 1.5 -> 2, 0.5 -> 0, 2.5 -> 2, -0.5 -> -0.
  const at::Tensor x = at::tensor({42.5f, 1.5f, 0.5f, 2.5f, -0.5f, -0.6f, 255.4f, 255.5f, 256.5f});
  const FakeQuantResult got = fake_quantize_per_tensor(x, 1.0, 0.0, 0, 255);
  EXPECT_TRUE(at::equal(got.output,
                        at::tensor({42.0f, 2.0f, 0.0f, 2.0f, 0.0f, 0.0f, 255.0f, 255.0f, 255.0f})))
      << got.output;
  // -0.6 rounds to -1 < qmin (clipped); 255.5 rounds to 256 > qmax; -0.5 rounds to -0 (inside).
  EXPECT_TRUE(at::equal(got.mask, bools({1, 1, 1, 1, 1, 0, 1, 0, 0})))
      << got.mask;
}

TEST(FakeQuantPerTensorTest, NniOrderKeepsNanAndClampsInfinityLikeTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor x = at::tensor({std::nanf(""), inf, -inf, 1.0f});
  const at::Tensor s = at::full({1}, 0.5f);
  const at::Tensor z = at::full({1}, 2.0f);
  const auto [y_ref, mask_ref] = nni_reference(x, s, z, 0, 7);
  const FakeQuantResult got = fake_quantize_per_tensor(x, 0.5, 2.0, 0, 7);
  EXPECT_TRUE(std::isnan(got.output[0].item<float>()));
  EXPECT_TRUE(same_bytes(got.output.slice(0, 1), y_ref.slice(0, 1))) << got.output << y_ref;
  EXPECT_TRUE(at::equal(got.mask, mask_ref)) << got.mask << mask_ref;
  EXPECT_TRUE(got.mask[0].item<bool>());  // QATGrad never zeroes a NaN's gradient
}

TEST(FakeQuantPerTensorTest, NniCase20ZeroPointsAndCase21WeightFakeQuant) {
  // §7 case 20: the half-even rounding of z0 (42.5 -> 42, 1.5 -> 2, 0.5 -> 0) is the kernel's
  // rounding of x / 1 + 0.
  const FakeQuantResult z0 = fake_quantize_per_tensor(at::tensor({42.5f, 1.5f, 0.5f}), 1.0, 0.0,
                                                      0, 255);
  EXPECT_TRUE(at::equal(z0.output, at::tensor({42.0f, 2.0f, 0.0f})));
  // §7 case 21: W = [[1.1287, 2.3456], [3.7814, 5.9723]], 8 bits, scale = 5.9723 / 255 computed
  // in float32 as NNI does, zp 0.
  const at::Tensor w = at::tensor({1.1287f, 2.3456f, 3.7814f, 5.9723f}).view({2, 2});
  const float scale = 5.9723f / 255.0f;
  const FakeQuantResult got = fake_quantize_per_tensor(w, scale, 0.0, 0, 255);
  const at::Tensor expected = at::tensor({1.1242f, 2.3421f, 3.7707f, 5.9723f}).view({2, 2});
  EXPECT_TRUE(at::allclose(got.output, expected, 1e-4, 0.0)) << got.output;
  EXPECT_TRUE(got.mask.all().item<bool>());
  // §7 case 23: the first output quantization clamps [2, 9] at q = 255 with scale 0.01 * 9 / 255.
  const float out_scale = (0.01f * 9.0f) / 255.0f;
  const FakeQuantResult out = fake_quantize_per_tensor(at::tensor({2.0f, 9.0f}), out_scale, 0.0,
                                                       0, 255);
  EXPECT_TRUE(at::equal(out.output, at::full({2}, 255.0f * out_scale)));
  EXPECT_NEAR(out.output[0].item<float>(), 0.09f, 1e-6f);
  EXPECT_FALSE(out.mask.any().item<bool>());
}

TEST(FakeQuantPerTensorTest, ReadsNonContiguousInputInLogicalOrderAndKeepsShape) {
  at::manual_seed(3);
  const at::Tensor base = at::randn({37, 53});
  const at::Tensor before = base.clone();
  const at::Tensor t = base.t();
  ASSERT_FALSE(t.is_contiguous());
  const FakeQuantResult got = fake_quantize_per_tensor(t, 0.05, 10.0, 0, 31);
  const FakeQuantResult want = fake_quantize_per_tensor(t.contiguous(), 0.05, 10.0, 0, 31);
  EXPECT_EQ(got.output.sizes(), t.sizes());
  EXPECT_EQ(got.mask.scalar_type(), at::kBool);
  EXPECT_TRUE(same_bytes(got.output, want.output));
  EXPECT_TRUE(at::equal(got.mask, want.mask));
  EXPECT_TRUE(same_bytes(base, before));  // the input is never modified
}

TEST(FakeQuantPerTensorTest, AcceptsEmptyAndScalarTensors) {
  const FakeQuantResult empty = fake_quantize_per_tensor(at::empty({0, 3}), 0.1, 0.0, 0, 255);
  EXPECT_EQ(empty.output.sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(empty.mask.sizes(), (std::vector<int64_t>{0, 3}));
  const FakeQuantResult scalar = fake_quantize_per_tensor(at::scalar_tensor(0.26), 0.1, 0.0, 0, 7);
  EXPECT_EQ(scalar.output.dim(), 0);
  EXPECT_EQ(scalar.output.item<float>(), 3.0f * 0.1f);
}

TEST(FakeQuantPerTensorTest, RawKernelWithoutMaskAndInPlace) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({4099});
  const FakeQuantResult want = fake_quantize_per_tensor(x, 0.02, 5.0, -8, 7);
  at::Tensor y = x.clone();
  fake_quant_per_tensor_cpu(y.data_ptr<float>(), y.numel(), 0.02f, 5.0f, -8, 7,
                            y.data_ptr<float>(), nullptr);
  EXPECT_TRUE(same_bytes(y, want.output));
}

// ---------------------------------------------------------------- per channel

TEST(FakeQuantPerChannelTest, AtenOrderMatchesAtenOnAxis0And1) {
  at::manual_seed(5);
  for (const int64_t axis : {0, 1, -1, 3}) {
    const at::Tensor x = at::randn({6, 5, 7, 9}) * 3.0;
    const int64_t ax = axis < 0 ? axis + 4 : axis;
    const int64_t c = x.size(ax);
    const at::Tensor scale = at::rand({c}) * 0.1 + 0.01;
    const at::Tensor zp = at::randint(0, 16, {c}, at::kInt);
    // ATen accepts only a non-negative axis (Lithe counts negative ones from the end).
    const auto ref = at::fake_quantize_per_channel_affine_cachemask(x, scale, zp, ax, 0, 15);
    const FakeQuantResult got =
        fake_quantize_per_channel(x, scale, zp.to(at::kFloat), axis, 0, 15, QuantFormula::kAten);
    EXPECT_TRUE(same_bytes(got.output, std::get<0>(ref))) << "axis " << axis;
    EXPECT_TRUE(at::equal(got.mask, std::get<1>(ref))) << "axis " << axis;
    EXPECT_TRUE(same_bytes(got.output,
                           at::fake_quantize_per_channel_affine(x, scale, zp, ax, 0, 15)));
  }
}

TEST(FakeQuantPerChannelTest, AtenOrderMatchesAtenOnHalfBoundaries) {
  // Power-of-two scales make every (j + 0.5) * scale an exact .5 boundary.
  const at::Tensor scale = at::tensor({0.25f, 0.125f, 1.0f});
  const at::Tensor zp = at::tensor({0, 3, 7}, at::kInt);
  const at::Tensor j = at::arange(-20, 40, at::kFloat) + 0.5f;
  const at::Tensor x = at::stack({j * 0.25f, j * 0.125f, j}, 1);  // [60, 3], axis 1
  const auto ref = at::fake_quantize_per_channel_affine_cachemask(x, scale, zp, 1, 0, 15);
  const FakeQuantResult got =
      fake_quantize_per_channel(x, scale, zp.to(at::kFloat), 1, 0, 15, QuantFormula::kAten);
  EXPECT_TRUE(same_bytes(got.output, std::get<0>(ref)));
  EXPECT_TRUE(at::equal(got.mask, std::get<1>(ref)));
}

TEST(FakeQuantPerChannelTest, NniOrderMatchesBroadcastExpressionsOnAxis0And1) {
  at::manual_seed(6);
  for (const int64_t axis : {0, 1}) {
    const at::Tensor x = at::randn({8, 12, 3, 3}) * 2.0;
    const int64_t c = x.size(axis);
    const at::Tensor scale = at::rand({c}) * 0.05 + 0.005;
    const at::Tensor zp = at::randint(0, 256, {c}).to(at::kFloat);
    std::vector<int64_t> shape(4, 1);
    shape[static_cast<std::size_t>(axis)] = c;
    const auto [y_ref, mask_ref] =
        nni_reference(x, scale.view(shape), zp.view(shape), 0, 255);
    const FakeQuantResult got = fake_quantize_per_channel(x, scale, zp, axis, 0, 255);
    EXPECT_TRUE(same_bytes(got.output, y_ref)) << "axis " << axis;
    EXPECT_TRUE(at::equal(got.mask, mask_ref)) << "axis " << axis;
  }
}

TEST(FakeQuantPerChannelTest, LongRowsSplitIntoChunksMatchPerTensorPerRow) {
  at::manual_seed(7);
  const at::Tensor x = at::randn({3, 150001});  // rows longer than one scheduling chunk
  const at::Tensor scale = at::tensor({0.01f, 0.02f, 0.03f});
  const at::Tensor zp = at::tensor({1.0f, 100.0f, 200.0f});
  const FakeQuantResult got = fake_quantize_per_channel(x, scale, zp, 0, 0, 255);
  for (int64_t c = 0; c < 3; ++c) {
    const FakeQuantResult row = fake_quantize_per_tensor(
        x[c], scale[c].item<float>(), zp[c].item<float>(), 0, 255);
    EXPECT_TRUE(same_bytes(got.output[c], row.output)) << "channel " << c;
    EXPECT_TRUE(at::equal(got.mask[c], row.mask)) << "channel " << c;
  }
}

// ---------------------------------------------------------------- threads

TEST(FakeQuantThreadsTest, OneAndTwoThreadsWriteIdenticalBytes) {
  const int saved = at::get_num_threads();
  const at::Tensor x = boundary_data((int64_t{1} << 21) + 14, 0.0173, 100.0, 0, 255, 99);
  const at::Tensor scale = at::rand({2}) * 0.05 + 0.01;
  const at::Tensor zp = at::tensor({3.0f, 250.0f});
  std::vector<FakeQuantResult> tensor_results;
  std::vector<FakeQuantResult> channel_results;
  for (const int threads : {1, 2}) {
    at::set_num_threads(threads);
    tensor_results.push_back(fake_quantize_per_tensor(x, 0.0173, 100.0, 0, 255));
    channel_results.push_back(fake_quantize_per_channel(x.view({2, -1}).t().contiguous().t(),
                                                        scale, zp, 0, 0, 255));
  }
  at::set_num_threads(saved);
  EXPECT_TRUE(same_bytes(tensor_results[0].output, tensor_results[1].output));
  EXPECT_TRUE(same_bytes(tensor_results[0].mask, tensor_results[1].mask));
  EXPECT_TRUE(same_bytes(channel_results[0].output, channel_results[1].output));
  EXPECT_TRUE(same_bytes(channel_results[0].mask, channel_results[1].mask));

  // The raw kernel with explicit thread counts, too.
  std::vector<at::Tensor> ys;
  std::vector<at::Tensor> masks;
  for (const int threads : {1, 2, 3}) {
    ys.push_back(at::empty_like(x));
    masks.push_back(at::empty(x.sizes(), at::kByte));
    fake_quant_per_tensor_cpu(x.data_ptr<float>(), x.numel(), 0.0173f, 100.0f, 0, 255,
                              ys.back().data_ptr<float>(), masks.back().data_ptr<uint8_t>(),
                              QuantFormula::kAten, threads);
  }
  for (std::size_t i = 1; i < ys.size(); ++i) {
    EXPECT_TRUE(same_bytes(ys[0], ys[i]));
    EXPECT_TRUE(same_bytes(masks[0], masks[i]));
  }
}

// ---------------------------------------------------------------- argument errors

template <class Fn>
void expect_error(Fn fn, sdk::Errc code, const std::vector<std::string>& parts) {
  EXPECT_THAT(fn, Throws<sdk::Error>(Property(&sdk::Error::code, code)));
  for (const std::string& part : parts) {
    EXPECT_THAT(fn, ThrowsMessage<sdk::Error>(HasSubstr(part)));
  }
}

TEST(FakeQuantErrorsTest, PerTensorArgumentChecksNameTheRuleAndTheValue) {
  const at::Tensor x = at::ones({4});
  using sdk::Errc;
  expect_error([&] { (void)fake_quantize_per_tensor(x, 0.0, 0.0, 0, 255); },
               Errc::kInvalidConfig, {"scale must be finite and > 0", "got 0"});
  expect_error([&] { (void)fake_quantize_per_tensor(x, -0.5, 0.0, 0, 255); },
               Errc::kInvalidConfig, {"scale must be finite and > 0", "got -0.5"});
  expect_error(
      [&] { (void)fake_quantize_per_tensor(x, std::numeric_limits<double>::infinity(), 0, 0, 1); },
      Errc::kInvalidConfig, {"scale must be finite and > 0", "got inf"});
  expect_error([&] { (void)fake_quantize_per_tensor(x, 1e-50, 0.0, 0, 255); },
               Errc::kInvalidConfig, {"(also as float32)", "got 1e-50"});
  expect_error([&] { (void)fake_quantize_per_tensor(x, 0.1, std::nan(""), 0, 255); },
               Errc::kInvalidConfig, {"zero_point must be finite", "got nan"});
  expect_error([&] { (void)fake_quantize_per_tensor(x, 1e39, 0.0, 0, 255); },
               Errc::kInvalidConfig, {"(also as float32)", "got 1e+39"});
  expect_error([&] { (void)fake_quantize_per_tensor(x, 0.1, 1e39, 0, 255); },
               Errc::kInvalidConfig, {"zero_point must be finite (also as float32)", "got 1e+39"});
  expect_error([&] { (void)fake_quantize_per_tensor(x, 0.1, 0.0, 5, 5); }, Errc::kInvalidConfig,
               {"qmin < qmax", "qmin = 5, qmax = 5"});
  expect_error(
      [&] { (void)fake_quantize_per_tensor(x, 0.1, 2.5, 0, 255, QuantFormula::kAten); },
      Errc::kInvalidConfig, {"zero_point must be an integer with QuantFormula::kAten", "got 2.5"});
  expect_error(
      [&] { (void)fake_quantize_per_tensor(x, 0.1, 300, 0, 255, QuantFormula::kAten); },
      Errc::kInvalidConfig, {"zero_point must be in [qmin, qmax] = [0, 255]", "got 300"});
  expect_error([&] { (void)fake_quantize_per_tensor(x.to(at::kDouble), 0.1, 0, 0, 255); },
               Errc::kDeviceMismatch, {"x must have dtype float32 (Float), got Double"});
  expect_error([&] { (void)fake_quantize_per_tensor(at::Tensor(), 0.1, 0, 0, 255); },
               Errc::kInvalidConfig, {"x must be a defined tensor"});
  expect_error(
      [&] { (void)fake_quantize_per_tensor(at::ones({4}, at::device(at::kMeta)), 0.1, 0, 0, 255); },
      Errc::kDeviceMismatch, {"x must be on the CPU or a CUDA device, got meta"});
  expect_error(
      [&] { (void)fake_quantize_per_tensor(at::eye(3).to_sparse(), 0.1, 0, 0, 255); },
      Errc::kUnsupported, {"x must be a dense (strided) tensor"});
}

TEST(FakeQuantErrorsTest, PerChannelArgumentChecksNameTheRuleAndTheValue) {
  const at::Tensor x = at::ones({2, 3});
  const at::Tensor s3 = at::full({3}, 0.1f);
  const at::Tensor z3 = at::zeros({3});
  using sdk::Errc;
  expect_error([&] { (void)fake_quantize_per_channel(x, s3, z3, 2, 0, 255); },
               Errc::kInvalidConfig, {"axis must be in [-2, 2) for x of shape [2, 3]", "got 2"});
  expect_error([&] { (void)fake_quantize_per_channel(x, s3, z3, -3, 0, 255); },
               Errc::kInvalidConfig, {"axis must be in [-2, 2)", "got -3"});
  expect_error([&] { (void)fake_quantize_per_channel(x, s3, z3, 0, 0, 255); },
               Errc::kShapeMismatch,
               {"scale must be 1-D with x.size(0) = 2 elements for x of shape [2, 3]",
                "got shape [3]"});
  expect_error([&] { (void)fake_quantize_per_channel(x, s3, at::zeros({1, 3}), 1, 0, 255); },
               Errc::kShapeMismatch, {"zero_point must be 1-D with x.size(1) = 3", "got shape [1, 3]"});
  expect_error(
      [&] {
        (void)fake_quantize_per_channel(x, at::tensor({0.1f, 0.0f, 0.1f}), z3, 1, 0, 255);
      },
      Errc::kInvalidConfig, {"scale[1] must be finite and > 0", "got 0"});
  expect_error(
      [&] {
        (void)fake_quantize_per_channel(x, s3, at::tensor({0.0f, 0.0f, 1.5f}), 1, 0, 255,
                                        QuantFormula::kAten);
      },
      Errc::kInvalidConfig, {"zero_point[2] must be an integer", "got 1.5"});
  expect_error([&] { (void)fake_quantize_per_channel(x, s3, z3, 1, 9, 3); }, Errc::kInvalidConfig,
               {"qmin < qmax", "qmin = 9, qmax = 3"});
  expect_error([&] { (void)fake_quantize_per_channel(x, s3.to(at::kInt), z3, 1, 0, 255); },
               Errc::kDeviceMismatch, {"scale must have a floating dtype, got Int"});
  expect_error([&] { (void)fake_quantize_per_channel(at::scalar_tensor(1.0f), s3, z3, 0, 0, 255); },
               Errc::kInvalidConfig, {"at least one dimension", "got a 0-d tensor"});
  expect_error(
      [&] { (void)fake_quantize_per_channel(x, s3.to(at::kMeta), z3, 1, 0, 255); },
      Errc::kDeviceMismatch, {"scale must be on x's device cpu, got meta"});
}

}  // namespace
}  // namespace lithe::kernels
