// Each line below is one float32 operation of NNI's tensor code, in NNI's order: IEEE float
// arithmetic is not associative, so reordering would change the last bit of scales and zero
// points that must match NNI exactly. There is no multiply-add to contract into an FMA.
#include "quant_params.h"

#include <algorithm>
#include <cmath>

namespace lithe::plugins::qat {

int64_t quant_max(int64_t bits) { return (int64_t{1} << bits) - 1; }

QuantParams update_quantization_param(int64_t bits, float rmin, float rmax) {
  rmin = std::min(rmin, 0.0f);
  rmax = std::max(rmax, 0.0f);
  const float qmin = 0.0f;
  // NNI builds torch.Tensor([(1 << bits) - 1]): the integer rounded to float32 (2^32 at 32 bits).
  const auto qmax = static_cast<float>(quant_max(bits));
  QuantParams params;
  params.scale = std::max((rmax - rmin) / (qmax - qmin), kMinScale);
  const float initial_zero_point = qmin - rmin / params.scale;
  if (initial_zero_point < qmin) {
    params.zero_point = qmin;
  } else if (initial_zero_point > qmax) {
    params.zero_point = qmax;
  } else {
    params.zero_point = std::nearbyint(initial_zero_point);  // torch.round: half to even
  }
  return params;
}

}  // namespace lithe::plugins::qat
