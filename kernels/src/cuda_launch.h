#pragma once
// Where the ATen glue launches a CUDA kernel: on the tensor's device, made current for the scope,
// and on ATen's current stream of that device, so a kernel is ordered like any ATen op (after the
// work that wrote its inputs, before the work that reads its outputs, under a caller's
// CUDAStreamGuard too) and nothing waits for the device. Only for builds with LITHE_HAS_CUDA.

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace lithe::kernels::detail {

class CudaLaunch {
 public:
  explicit CudaLaunch(const at::Tensor& t)
      : guard_(t.device()), stream_(c10::cuda::getCurrentCUDAStream(t.device().index())) {}

  /// ATen's current stream of the tensor's device.
  cudaStream_t stream() const { return stream_.stream(); }

 private:
  c10::cuda::CUDAGuard guard_;
  c10::cuda::CUDAStream stream_;
};

}  // namespace lithe::kernels::detail
