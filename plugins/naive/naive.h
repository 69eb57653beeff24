#pragma once
// Naive weight quantization (NNI v2.0 NaiveQuantizer, reference §3.1). Declared for unit tests,
// which link this plugin's object library and register it into their own registry.

#include <ATen/core/Tensor.h>
#include <lithe/sdk/registry.h>

#include <cstdint>

namespace lithe::plugins::naive {

/// Fewest bits naive accepts: the signed grid's qmax = 2^(bits−1) − 1 must be at least 1.
inline constexpr int64_t kMinBits = 2;

/// Registers quantizer "naive".
void register_algorithms(sdk::Registry& registry);

/// One forward of NNI's math with qmax = 2^(bits−1) − 1 (127 at NNI's 8 bits):
/// `scale` (a float32 tensor of one element, the layer's running scale) becomes
/// max(scale, max|weight| / qmax) in place, so it never decreases, and the result is
/// float(trunc(weight / scale)) · scale, truncated toward zero (NNI casts to int8; no rounding,
/// no clamp). Bit-identical to NNI at 8 bits. While the scale is still 0 (every weight seen so
/// far was 0) the result is zeros, where NNI divides 0 by 0 into NaN. `weight` is not modified.
at::Tensor naive_quantize(const at::Tensor& weight, const at::Tensor& scale, int64_t bits);

}  // namespace lithe::plugins::naive
