// ATen glue over the raw selection kernels: argument checks with messages that state the rule and
// the observed value, dtype/layout normalisation, and dispatch on the tensor's device.

#include "lithe/kernels/masking.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <sstream>
#include <string>

#include "lithe/kernels/selection.h"
#include "tensor_checks.h"
#include "lithe/sdk/error.h"

#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
#include "cuda/selection_cuda.h"
#include "cuda_launch.h"
#endif

namespace lithe::kernels {
namespace {

using sdk::Errc;

using detail::check_runnable_device;
using detail::device_name;
using detail::sizes_string;

}  // namespace

at::Tensor exact_k_keep_mask(const at::Tensor& scores, int64_t k, bool by_magnitude) {
  constexpr const char* kWhere = "exact_k_keep_mask";
  LITHE_CHECK(scores.defined(), Errc::kInvalidConfig, kWhere,
              ": scores must be a defined tensor, got an undefined one");
  LITHE_CHECK(scores.layout() == at::kStrided, Errc::kUnsupported, kWhere,
              ": scores must be a dense (strided) tensor, got layout ", scores.layout());
  LITHE_CHECK(scores.is_floating_point(), Errc::kDeviceMismatch, kWhere,
              ": scores must have a floating dtype, got ", scores.scalar_type());
  check_runnable_device(kWhere, "scores", scores);
  const int64_t n = scores.numel();
  LITHE_CHECK(k >= 0 && k <= n, Errc::kInvalidConfig, kWhere, ": k must be in [0, numel] = [0, ", n,
              "] for scores of shape ", sizes_string(scores), ", got ", k);

  // float64/float16/bfloat16 scores are ranked after conversion to float32 (values that collide
  // in float32 become ties, broken by index like any other tie).
  const at::Tensor x = scores.to(at::kFloat).contiguous();
  at::Tensor keep = at::empty(scores.sizes(), x.options());
  if (n == 0) {
    return keep;
  }
  if (x.is_cpu()) {
    select_smallest_cpu(x.data_ptr<float>(), n, k, by_magnitude, keep.data_ptr<float>(),
                        at::get_num_threads());
  } else {
#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
    const detail::CudaLaunch launch(x);
    // Scratch from ATen's caching allocator: no cudaMalloc/cudaFree (each would wait for the
    // device), and stream-ordered like the kernels that use it.
    const at::Tensor scratch = at::empty(
        {static_cast<int64_t>(cuda::select_smallest_cuda_scratch_bytes(n))},
        x.options().dtype(at::kByte));
    cuda::select_smallest_cuda(x.data_ptr<float>(), n, k, by_magnitude, keep.data_ptr<float>(),
                               scratch.data_ptr(), launch.stream());
#else
    LITHE_INTERNAL_ASSERT(false);  // check_runnable_device rejected non-CPU tensors
#endif
  }
  return keep;
}

void apply_mask_(const at::Tensor& weight, const at::Tensor& mask) {
  constexpr const char* kWhere = "apply_mask_";
  LITHE_CHECK(weight.defined() && mask.defined(), Errc::kInvalidConfig, kWhere,
              ": weight and mask must be defined tensors, got ",
              weight.defined() ? "a defined" : "an undefined", " weight and ",
              mask.defined() ? "a defined" : "an undefined", " mask");
  LITHE_CHECK(weight.layout() == at::kStrided && mask.layout() == at::kStrided, Errc::kUnsupported,
              kWhere, ": weight and mask must be dense (strided) tensors, got layouts ",
              weight.layout(), " and ", mask.layout());
  LITHE_CHECK(weight.sizes() == mask.sizes(), Errc::kShapeMismatch, kWhere, ": mask shape ",
              sizes_string(mask), " must equal weight shape ", sizes_string(weight));
  LITHE_CHECK(weight.device() == mask.device(), Errc::kDeviceMismatch, kWhere,
              ": mask must be on the weight's device ", device_name(weight), ", got ",
              device_name(mask));
  LITHE_CHECK(weight.scalar_type() == mask.scalar_type(), Errc::kDeviceMismatch, kWhere,
              ": mask dtype must equal the weight dtype ", weight.scalar_type(), ", got ",
              mask.scalar_type());
  LITHE_CHECK(weight.is_floating_point(), Errc::kDeviceMismatch, kWhere,
              ": weight must have a floating dtype, got ", weight.scalar_type());
  check_runnable_device(kWhere, "weight", weight);

  const int64_t n = weight.numel();
  if (n == 0) {
    return;
  }
  // Like NNI's `weight.data.mul_(mask)` (in place, without autograd tracking), except that an
  // entry the mask removes becomes exactly 0 whatever it held: NNI turns a pruned Inf into NaN.
  if (weight.scalar_type() != at::kFloat || !weight.is_contiguous()) {
    // Rare layouts and dtypes: ATen's strided fill.
    at::Tensor data = weight.detach();
    data.masked_fill_(mask.eq(0), 0);
    return;
  }
  const at::Tensor m = mask.contiguous();
  if (weight.is_cpu()) {
    apply_mask_cpu(weight.data_ptr<float>(), m.data_ptr<float>(), n, at::get_num_threads());
  } else {
#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
    const detail::CudaLaunch launch(weight);
    cuda::apply_mask_cuda(weight.data_ptr<float>(), m.data_ptr<float>(), n, launch.stream());
#else
    LITHE_INTERNAL_ASSERT(false);  // check_runnable_device rejected non-CPU tensors
#endif
  }
}

}  // namespace lithe::kernels
