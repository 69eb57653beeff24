#pragma once
// QAT's asymmetric per-tensor quantization parameters (NNI v2.0 update_quantization_param,
// reference §3.2), in plain float32 arithmetic: no ATen, so unit tests can check them alone.

#include <cstdint>

namespace lithe::plugins::qat {

/// Scale and zero point of an unsigned grid [0, quant_max(bits)]: x̂ = scale · (q − zero_point).
struct QuantParams {
  float scale = 1.0f;       ///< > 0 and finite for finite ranges
  float zero_point = 0.0f;  ///< an integer in [0, quant_max(bits)]
};

/// 2^bits − 1, the top of QAT's unsigned grid (bits in 1..32).
int64_t quant_max(int64_t bits);

/// Smallest scale QAT uses: a range that is a single point (rmin = rmax = 0, an all-zero
/// tensor) or so narrow that (rmax − rmin) / qmax underflows gives this scale instead of NNI's
/// 0, whose zero point is NaN. The grid [0, qmax · kMinScale] then still contains the whole
/// range, zeros quantize to exactly 0, and every other value collapses to within ~1e-29 of 0.
inline constexpr float kMinScale = 1.17549435e-38f;  // the smallest normal float32

/// NNI's update_quantization_param in float32, operation for operation:
///   rmin = min(rmin, 0); rmax = max(rmax, 0)          (0 must be exactly representable)
///   scale = (rmax − rmin) / (qmax − 0)                 (Lithe: not below kMinScale)
///   z0 = 0 − rmin / scale
///   zero_point = 0 if z0 < 0, qmax if z0 > qmax, else round half to even(z0)
/// Bit-identical to NNI whenever NNI's scale is a normal float (e.g. (8, −1, 5) gives scale
/// 6/255 and zero point 42: 42.5 rounds to even).
QuantParams update_quantization_param(int64_t bits, float rmin, float rmax);

}  // namespace lithe::plugins::qat
