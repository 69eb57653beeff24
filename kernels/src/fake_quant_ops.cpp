// ATen glue over the raw fake-quantization kernels: argument checks whose messages state the rule
// and the observed value, layout normalisation, and dispatch on the tensor's device.

#include "lithe/kernels/fake_quant_ops.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "lithe/kernels/fake_quant.h"
#include "lithe/sdk/error.h"
#include "tensor_checks.h"

#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
#include "cuda/fake_quant_cuda.h"
#include "cuda_launch.h"
#endif

namespace lithe::kernels {
namespace {

using sdk::Errc;

using detail::check_runnable_device;
using detail::device_name;
using detail::sizes_string;

const char* formula_name(QuantFormula f) {
  return f == QuantFormula::kNni ? "QuantFormula::kNni" : "QuantFormula::kAten";
}

/// Checks shared by both entry points on the input tensor.
void check_input(const char* where, const at::Tensor& x) {
  LITHE_CHECK(x.defined(), Errc::kInvalidConfig, where,
              ": x must be a defined tensor, got an undefined one");
  LITHE_CHECK(x.layout() == at::kStrided, Errc::kUnsupported, where,
              ": x must be a dense (strided) tensor, got layout ", x.layout());
  LITHE_CHECK(x.scalar_type() == at::kFloat, Errc::kDeviceMismatch, where,
              ": x must have dtype float32 (Float), got ", x.scalar_type());
  check_runnable_device(where, "x", x);
}

void check_range(const char* where, int64_t qmin, int64_t qmax) {
  LITHE_CHECK(qmin < qmax, Errc::kInvalidConfig, where,
              ": the integer range must satisfy qmin < qmax, got qmin = ", qmin, ", qmax = ", qmax);
}

/// One scale / zero point pair; `channel` < 0 for per-tensor messages.
void check_params(const char* where, double scale, double zero_point, int64_t qmin, int64_t qmax,
                  QuantFormula formula, int64_t channel) {
  std::string what_scale = "scale";
  std::string what_zp = "zero_point";
  if (channel >= 0) {
    what_scale += "[" + std::to_string(channel) + "]";
    what_zp += "[" + std::to_string(channel) + "]";
  }
  // The kernels work in float32: a positive double that underflows to 0 in float32 is as
  // invalid as 0 itself, and one beyond float32's range is not representable (converting it
  // would be undefined), so both are checked in double before any conversion.
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  LITHE_CHECK(std::isfinite(scale) && scale > 0.0 && scale <= kFloatMax &&
                  static_cast<float>(scale) > 0.0f,
              Errc::kInvalidConfig, where, ": ", what_scale,
              " must be finite and > 0 (also as float32), got ", scale);
  LITHE_CHECK(std::isfinite(zero_point) && std::fabs(zero_point) <= kFloatMax,
              Errc::kInvalidConfig, where, ": ", what_zp,
              " must be finite (also as float32), got ", zero_point);
  if (formula == QuantFormula::kAten) {
    LITHE_CHECK(zero_point == std::nearbyint(zero_point), Errc::kInvalidConfig, where, ": ",
                what_zp, " must be an integer with ", formula_name(formula), ", got ", zero_point);
    LITHE_CHECK(zero_point >= static_cast<double>(qmin) &&
                    zero_point <= static_cast<double>(qmax),
                Errc::kInvalidConfig, where, ": ", what_zp, " must be in [qmin, qmax] = [", qmin,
                ", ", qmax, "] with ", formula_name(formula), ", got ", zero_point);
  }
}

/// 1-D per-channel parameter tensor with `channels` elements on x's device, as contiguous
/// float32.
at::Tensor channel_param(const char* where, const char* what, const at::Tensor& p,
                         const at::Tensor& x, int64_t axis, int64_t channels) {
  LITHE_CHECK(p.defined(), Errc::kInvalidConfig, where, ": ", what,
              " must be a defined tensor, got an undefined one");
  LITHE_CHECK(p.layout() == at::kStrided, Errc::kUnsupported, where, ": ", what,
              " must be a dense (strided) tensor, got layout ", p.layout());
  LITHE_CHECK(p.is_floating_point(), Errc::kDeviceMismatch, where, ": ", what,
              " must have a floating dtype, got ", p.scalar_type());
  LITHE_CHECK(p.device() == x.device(), Errc::kDeviceMismatch, where, ": ", what,
              " must be on x's device ", device_name(x), ", got ", device_name(p));
  LITHE_CHECK(p.dim() == 1 && p.size(0) == channels, Errc::kShapeMismatch, where, ": ", what,
              " must be 1-D with x.size(", axis, ") = ", channels, " elements for x of shape ",
              sizes_string(x), ", got shape ", sizes_string(p));
  return p.to(at::kFloat).contiguous();
}

}  // namespace

FakeQuantResult fake_quantize_per_tensor(const at::Tensor& x, double scale, double zero_point,
                                         int64_t qmin, int64_t qmax, QuantFormula formula) {
  constexpr const char* kWhere = "fake_quantize_per_tensor";
  check_input(kWhere, x);
  check_range(kWhere, qmin, qmax);
  check_params(kWhere, scale, zero_point, qmin, qmax, formula, -1);

  const at::Tensor in = x.contiguous();
  FakeQuantResult out{at::empty(x.sizes(), in.options()),
                      at::empty(x.sizes(), in.options().dtype(at::kBool))};
  const int64_t n = in.numel();
  if (n == 0) {
    return out;
  }
  // bool tensors store one byte per element holding 0 or 1, exactly what the kernels write.
  auto* mask = reinterpret_cast<uint8_t*>(out.mask.data_ptr<bool>());
  if (in.is_cpu()) {
    fake_quant_per_tensor_cpu(in.data_ptr<float>(), n, static_cast<float>(scale),
                              static_cast<float>(zero_point), qmin, qmax,
                              out.output.data_ptr<float>(), mask, formula, at::get_num_threads());
  } else {
#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
    const detail::CudaLaunch launch(in);
    cuda::fake_quant_per_tensor_cuda(in.data_ptr<float>(), n, static_cast<float>(scale),
                                     static_cast<float>(zero_point), qmin, qmax,
                                     out.output.data_ptr<float>(), mask, formula, launch.stream());
#else
    LITHE_INTERNAL_ASSERT(false);  // check_input rejected non-CPU tensors
#endif
  }
  return out;
}

FakeQuantResult fake_quantize_per_channel(const at::Tensor& x, const at::Tensor& scale,
                                          const at::Tensor& zero_point, int64_t axis,
                                          int64_t qmin, int64_t qmax, QuantFormula formula) {
  constexpr const char* kWhere = "fake_quantize_per_channel";
  check_input(kWhere, x);
  const int64_t dim = x.dim();
  LITHE_CHECK(dim >= 1, Errc::kInvalidConfig, kWhere,
              ": x must have at least one dimension for a per-channel axis, got a 0-d tensor");
  LITHE_CHECK(axis >= -dim && axis < dim, Errc::kInvalidConfig, kWhere, ": axis must be in [",
              -dim, ", ", dim, ") for x of shape ", sizes_string(x), ", got ", axis);
  const int64_t ax = axis < 0 ? axis + dim : axis;
  const int64_t channels = x.size(ax);
  check_range(kWhere, qmin, qmax);
  const at::Tensor s = channel_param(kWhere, "scale", scale, x, ax, channels);
  const at::Tensor z = channel_param(kWhere, "zero_point", zero_point, x, ax, channels);
  {
    // Per-channel values are validated on the host (a small copy when they live on a GPU).
    const at::Tensor s_host = s.cpu();
    const at::Tensor z_host = z.cpu();
    const float* sp = s_host.data_ptr<float>();
    const float* zp = z_host.data_ptr<float>();
    for (int64_t c = 0; c < channels; ++c) {
      check_params(kWhere, sp[c], zp[c], qmin, qmax, formula, c);
    }
  }

  const at::Tensor in = x.contiguous();
  FakeQuantResult out{at::empty(x.sizes(), in.options()),
                      at::empty(x.sizes(), in.options().dtype(at::kBool))};
  if (in.numel() == 0) {
    return out;
  }
  int64_t outer = 1;
  for (int64_t d = 0; d < ax; ++d) {
    outer *= in.size(d);
  }
  int64_t inner = 1;
  for (int64_t d = ax + 1; d < dim; ++d) {
    inner *= in.size(d);
  }
  auto* mask = reinterpret_cast<uint8_t*>(out.mask.data_ptr<bool>());
  if (in.is_cpu()) {
    fake_quant_per_channel_cpu(in.data_ptr<float>(), outer, channels, inner, s.data_ptr<float>(),
                               z.data_ptr<float>(), qmin, qmax, out.output.data_ptr<float>(),
                               mask, formula, at::get_num_threads());
  } else {
#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
    const detail::CudaLaunch launch(in);
    cuda::fake_quant_per_channel_cuda(in.data_ptr<float>(), outer, channels, inner,
                                      s.data_ptr<float>(), z.data_ptr<float>(), qmin, qmax,
                                      out.output.data_ptr<float>(), mask, formula,
                                      launch.stream());
#else
    LITHE_INTERNAL_ASSERT(false);  // check_input rejected non-CPU tensors
#endif
  }
  return out;
}

}  // namespace lithe::kernels
