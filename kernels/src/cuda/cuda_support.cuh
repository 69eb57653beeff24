#pragma once
// What every CUDA kernel file needs around its launches: error checks that say which call failed,
// and the device scope that selects the tensor's device and orders the launch after all queued
// work. Private to kernels/src/cuda.

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

namespace lithe::kernels::cuda::detail {

/// Selects `device` for the current scope (a negative index keeps the current device) and waits
/// for all work already queued on it. The wait orders the launch after whatever stream wrote the
/// inputs (e.g. a non-blocking one of a CUDAStreamGuard): Debian's CPU-only libtorch offers no
/// c10_cuda to ask for the current stream, so launches go to the default stream and every entry
/// point also synchronises before returning.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    LITHE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device >= 0 && device != previous_) {
      LITHE_CUDA_CHECK(cudaSetDevice(device));
      restore_ = true;
    }
    LITHE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~DeviceScope() {
    if (restore_) {
      cudaSetDevice(previous_);
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace lithe::kernels::cuda::detail
