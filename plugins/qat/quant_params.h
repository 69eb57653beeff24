#pragma once
// QAT's quantization parameters (NNI v2.0 update_quantization_param, reference §3.2, and its
// v2.5 generalisation to quant_dtype / quant_scheme), in plain float32 arithmetic: no ATen, so
// unit tests can check them alone.

#include <cstdint>

namespace lithe::plugins::qat {

/// Scale and zero point of an integer grid [qmin, qmax]: x̂ = scale · (q − zero_point).
struct QuantParams {
  float scale = 1.0f;       ///< > 0 and finite for finite ranges
  float zero_point = 0.0f;  ///< an integer in [qmin, qmax]
};

/// NNI v2.5's quant_dtype: the integer grid the codes live on.
enum class QuantDtype {
  kUint,  ///< [0, 2^bits − 1] (NNI's default; what NNI v2.0 always used)
  kInt,   ///< [−(2^(bits−1)) + 1, 2^(bits−1) − 1]: symmetric around 0, e.g. [−127, 127]
};

/// The integer grid [qmin, qmax] of one quant type.
struct QuantGrid {
  int64_t qmin = 0;
  int64_t qmax = 0;
};

/// NNI v2.5 calculate_qmin_qmax(bits, dtype): uint [0, 2^bits − 1], int
/// [−(2^(bits−1)) + 1, 2^(bits−1) − 1] (bits in 1..32; an int grid needs bits >= 2 to be
/// non-empty, which the config check enforces).
QuantGrid quant_grid(int64_t bits, QuantDtype dtype);

/// 2^bits − 1, the top of the unsigned grid (bits in 1..32).
int64_t quant_max(int64_t bits);

/// Smallest scale QAT uses: a range that is a single point (rmin = rmax = 0, an all-zero
/// tensor) or so narrow that its scale underflows gives this scale instead of NNI's 0, whose
/// zero point is NaN. The grid then still contains the whole range, zeros quantize to exactly
/// 0, and every other value collapses to within ~1e-29 of 0.
inline constexpr float kMinScale = 1.17549435e-38f;  // the smallest normal float32

/// NNI v2.5's update_quantization_param(bits, rmin, rmax, dtype, scheme) on one range, in
/// float32, operation for operation:
///   rmin = min(rmin, 0); rmax = max(rmax, 0)             (0 must be exactly representable)
///   affine:    scale = (rmax − rmin) / float(qmax − qmin)                 (not below kMinScale)
///              zero_point = clamp(qmin − round_half_even(rmin / scale), qmin, qmax)
///   symmetric: scale = max(|rmin|, |rmax|) / float((qmax − qmin) / 2)     (not below kMinScale)
///              zero_point = 0 on an int grid, (qmin + qmax + 1) / 2 = 2^(bits−1) on a uint grid
///              (NNI v2.5: (qmin + qmax) // 2 = 2^(bits−1) − 1; see the README)
/// On the uint grid the affine parameters are bit-identical to NNI v2.0's (which computed
/// round(clamp(0 − rmin / scale)): 0 − x is exact and rounding half to even is odd-symmetric).
QuantParams quantization_param(const QuantGrid& grid, bool symmetric, float rmin, float rmax);

/// NNI v2.0's update_quantization_param: quantization_param({0, quant_max(bits)}, affine, ...).
///   rmin = min(rmin, 0); rmax = max(rmax, 0)
///   scale = (rmax − rmin) / (qmax − 0)                 (Lithe: not below kMinScale)
///   zero_point = clamp(round_half_even(0 − rmin / scale), 0, qmax)
/// Bit-identical to NNI whenever NNI's scale is a normal float (e.g. (8, −1, 5) gives scale
/// 6/255 and zero point 42: 42.5 rounds to even).
QuantParams update_quantization_param(int64_t bits, float rmin, float rmax);

}  // namespace lithe::plugins::qat
