#pragma once
/// \file
/// Fused affine fake quantization with the straight-through-estimator (STE) mask, the core of
/// QAT-style quantizers. Raw-pointer CPU API (no ATen), usable from any translation unit cheaply.
///
/// One pass over x writes
///   r    = rounding of x onto the integer grid (see QuantFormula; round half to even),
///   q    = r clamped to [qmin, qmax] (kNni: the value is clamped before rounding, see below),
///   y    = (q - zero_point) * scale,
///   mask = 1 where the gradient passes (r inside [qmin, qmax]), 0 where it is clipped.
/// Every element is computed independently, so the bytes written are identical for every thread
/// count. Rounding is the current FP environment's round-to-nearest-even (never changed by Lithe).

#include <cstdint>
#include "lithe/kernels/export.h"

namespace lithe::kernels {

/// Which operation order produces r. The two orders differ in the last bit for some inputs, so a
/// bit-exact port has to pick the one of the code it reproduces.
enum class QuantFormula : std::uint8_t {
  /// NNI's `QuantGrad._quantize` / QAT_Quantizer: r = nearbyint(x / scale + zero_point), in
  /// float32 with an IEEE division (not x * (1/scale)). zero_point may be fractional. The output
  /// uses q = nearbyint(clamp(x / scale + zero_point, qmin, qmax)), NNI's clamp-then-round order:
  /// it equals clamp(r) except that it gives +0 where clamp(r) gives -0 (e.g. r = -0 with
  /// qmin = 0), which matters for bit-exactness when zero_point is 0. The mask is
  /// QATGrad's rule `!(r < qmin || r > qmax)`: NaN inputs keep their gradient (mask 1) and give
  /// y = NaN, because torch.clamp propagates NaN.
  kNni,
  /// `at::fake_quantize_per_tensor_affine` / `_per_channel_affine` (libtorch 2.x's kernels):
  /// r = nearbyint(x * (1.0f / scale)) + zero_point, zero_point integral; mask 1 where
  /// qmin <= r <= qmax. Off the grid the two kernels differ, and each function here follows its
  /// own: per tensor, q = fmin(fmax(r, qmin), qmax), so NaN and -inf give qmin and +inf (or any
  /// r above qmax) qmax; per channel, r is converted to int64 first, so NaN, +-inf and
  /// |r| >= 2^63 become INT64_MIN: q = qmin. Bit-exact with ATen when |qmin|, |qmax|,
  /// |zero_point| <= 2^24.
  kAten,
};

/// Per-tensor fake quantization of n floats. `mask` may be null (not written); otherwise it
/// receives 0/1 bytes. Preconditions (checked by the ATen glue, not here): scale finite and > 0,
/// qmin < qmax, x/y/mask hold n elements; y may alias x (in place), mask overlaps neither.
/// `num_threads` <= 0 means "use the current OpenMP thread count".
LITHE_KERNELS_API
void fake_quant_per_tensor_cpu(const float* x, std::int64_t n, float scale, float zero_point,
                               std::int64_t qmin, std::int64_t qmax, float* y,
                               std::uint8_t* mask, QuantFormula formula = QuantFormula::kNni,
                               int num_threads = 0);

/// Per-channel fake quantization of a contiguous tensor viewed as [outer, channels, inner]
/// (channels = size of the quantization axis, outer/inner = products of the sizes before/after
/// it). Element (o, c, i) uses scale[c] and zero_point[c]. Same preconditions as the per-tensor
/// variant for every channel; scale and zero_point hold `channels` floats.
LITHE_KERNELS_API
void fake_quant_per_channel_cpu(const float* x, std::int64_t outer, std::int64_t channels,
                                std::int64_t inner, const float* scale, const float* zero_point,
                                std::int64_t qmin, std::int64_t qmax, float* y,
                                std::uint8_t* mask, QuantFormula formula = QuantFormula::kNni,
                                int num_threads = 0);

}  // namespace lithe::kernels
