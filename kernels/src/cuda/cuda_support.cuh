#pragma once
// What every CUDA kernel file needs around its launches: error checks that say which call failed.
// Private to kernels/src/cuda. The kernels run on the stream they are given (the ATen glue passes
// ATen's current stream of the tensor's device, with that device made current), so their work is
// ordered after whatever wrote the inputs and before whatever reads the outputs, like any ATen op.

#include <cuda_runtime.h>

#include "lithe/sdk/error.h"

namespace lithe::kernels::cuda::detail {

inline void check_cuda(cudaError_t status, const char* call) {
  LITHE_CHECK(status == cudaSuccess, sdk::Errc::kInternal, "CUDA call ", call,
              " failed: ", cudaGetErrorString(status));
}

}  // namespace lithe::kernels::cuda::detail

/// Throws sdk::Error(kInternal) naming `call` and CUDA's message unless it returned cudaSuccess.
#define LITHE_CUDA_CHECK(call) ::lithe::kernels::cuda::detail::check_cuda((call), #call)
