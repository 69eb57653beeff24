// Each line below is one float32 operation of NNI's tensor code, in NNI's order: IEEE float
// arithmetic is not associative, so reordering would change the last bit of scales and zero
// points that must match NNI exactly. There is no multiply-add to contract into an FMA.
#include "quant_params.h"

#include <algorithm>
#include <cmath>

namespace lithe::plugins::qat {

int64_t quant_max(int64_t bits) { return (int64_t{1} << bits) - 1; }

QuantGrid quant_grid(int64_t bits, QuantDtype dtype) {
  if (dtype == QuantDtype::kInt) {
    const int64_t half = int64_t{1} << (bits - 1);
    return {-half + 1, half - 1};
  }
  return {0, quant_max(bits)};
}

QuantParams quantization_param(const QuantGrid& grid, bool symmetric, float rmin, float rmax) {
  rmin = std::min(rmin, 0.0f);
  rmax = std::max(rmax, 0.0f);
  // NNI builds its bounds from Python integers; the tensor arithmetic rounds them to float32
  // (2^32 − 1 becomes 2^32).
  const auto qmin = static_cast<float>(grid.qmin);
  const auto qmax = static_cast<float>(grid.qmax);
  QuantParams params;
  if (symmetric) {
    // NNI v2.5: abs_max / (float(qmax − qmin) / 2), the divisor a Python float (exact for
    // every grid up to 24 bits) rounded to float32 by the tensor division.
    const float abs_max = std::max(std::fabs(rmin), std::fabs(rmax));
    const auto half_width =
        static_cast<float>(static_cast<double>(grid.qmax - grid.qmin) / 2.0);
    params.scale = std::max(abs_max / half_width, kMinScale);
    // The middle code: 0 on an int grid ((−m + m + 1) / 2 truncates to 0), 2^(bits−1) on a
    // uint grid.
    params.zero_point = static_cast<float>((grid.qmin + grid.qmax + 1) / 2);
    return params;
  }
  // NNI v2.0 divides by the float32 tensor (qmax − qmin); v2.5 by float(qmax − qmin): both are
  // the integer width rounded to float32 once (qmin = 0 there, so qmax − 0 is exact).
  const auto width = static_cast<float>(grid.qmax - grid.qmin);
  params.scale = std::max((rmax - rmin) / width, kMinScale);
  // NNI v2.5: qmin − round(rmin / scale), then clamp. A NaN (an infinite range) stays NaN, as
  // in NNI v2.0's round(clamp(0 − rmin / scale)).
  const float zero_point = qmin - std::nearbyint(rmin / params.scale);  // torch.round: half even
  if (zero_point < qmin) {
    params.zero_point = qmin;
  } else if (zero_point > qmax) {
    params.zero_point = qmax;
  } else {
    params.zero_point = zero_point;
  }
  return params;
}

QuantParams update_quantization_param(int64_t bits, float rmin, float rmax) {
  return quantization_param(QuantGrid{0, quant_max(bits)}, /*symmetric=*/false, rmin, rmax);
}

}  // namespace lithe::plugins::qat
