#pragma once
// Argument checks shared by the ATen glue files (masking.cpp, fake_quant_ops.cpp): how a tensor
// is named in messages, and whether this build can run a kernel on the tensor's device.

#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>

#include "lithe/sdk/error.h"

namespace lithe::kernels::detail {

/// Whether the CUDA kernels are compiled into this build.
constexpr bool kHasCuda =
#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
    true;
#else
    false;
#endif

inline std::string device_name(const at::Tensor& t) {
  std::ostringstream out;
  out << t.device();
  return out.str();
}

inline std::string sizes_string(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

/// Throws sdk::Error(kDeviceMismatch) naming `where` and `what` unless `t` lives where a kernel
/// of this build can run: the CPU, or a GPU when the CUDA kernels are compiled in.
inline void check_runnable_device(const char* where, const char* what, const at::Tensor& t) {
  LITHE_CHECK(t.is_cpu() || t.is_cuda(), sdk::Errc::kDeviceMismatch, where, ": ", what,
              " must be on the CPU or a CUDA device, got ", device_name(t));
  LITHE_CHECK(t.is_cpu() || kHasCuda, sdk::Errc::kDeviceMismatch, where, ": ", what, " is on ",
              device_name(t),
              " but this build of lithe has no CUDA kernels (reconfigure with "
              "-DLITHE_WITH_CUDA=ON and a CUDA compiler), move it to the CPU first");
}

}  // namespace lithe::kernels::detail
