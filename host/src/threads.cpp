#include "lithe/host/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <cstdlib>
#include <thread>

namespace lithe::host {

int configure_threads(int threads) {
  if (threads <= 0) {
    threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  at::set_num_threads(threads);
  // OpenBLAS is reached through libblas.so.3 (Debian alternatives), so look its setter up at
  // run time; with reference BLAS the symbol is absent and there is nothing to do.
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && threads > 1) {
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
      set(1);
    }
  }
  return at::get_num_threads();
}

}  // namespace lithe::host
