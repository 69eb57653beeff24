#include "lithe/host/runtime/torch_runtime.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <torch/version.h>

#include <string>

namespace lithe::host {

std::string torch_runtime_description() {
  std::string text = "libtorch " TORCH_VERSION;
  // The shared object that defines one of libtorch_cpu's functions is the libtorch in use, which
  // may not be the one the build found (LD_LIBRARY_PATH, another wheel).
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&at::globalContext), &info) != 0 &&
      info.dli_fname != nullptr) {
    text += std::string(" (") + info.dli_fname + ")";
  }
  try {
    const auto& cuda = at::detail::getCUDAHooks();
    if (cuda.hasCUDART()) {
      const long version = cuda.versionCUDART();
      text += ", CUDA " + std::to_string(version / 1000) + "." +
              std::to_string(version % 1000 / 10) + " build, " +
              std::to_string(cuda.getNumGPUs()) + " CUDA devices";
    } else {
      text += ", CPU only";
    }
  } catch (const std::exception&) {
    text += ", CUDA state unknown";
  }
  return text;
}

}  // namespace lithe::host
