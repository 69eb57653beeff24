#include "lithe/host/io/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <cstdlib>
#include <thread>

#include "lithe/sdk/error.h"

namespace lithe::host {

int max_threads() {
  return 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int configure_threads(int threads) {
  // A negative count used to mean "all cores" silently, and 100000 spawned threads for minutes.
  LITHE_CHECK(threads >= 0 && threads <= max_threads(), sdk::Errc::kInvalidConfig,
              "--threads must be 0 (all cores) or 1..", max_threads(), " (4 x the ",
              max_threads() / 4, " cores of this machine), got ", threads);
  if (threads == 0) {
    threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    // Ranks of a data-parallel run on this machine (torchrun and `lithe launch` set
    // LOCAL_WORLD_SIZE) share its cores instead of each taking all of them.
    if (const char* local = std::getenv("LOCAL_WORLD_SIZE")) {
      const int ranks = std::atoi(local);
      if (ranks > 1) {
        threads = std::max(1, threads / ranks);
      }
    }
  }
  at::set_num_threads(threads);
  // OpenBLAS is reached through libblas.so.3 (Debian alternatives), so look its setter up at
  // run time; with reference BLAS the symbol is absent and there is nothing to do.
  // Also for data-parallel ranks on one thread each: OpenBLAS would otherwise start a thread
  // per core in every rank.
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const bool shared_machine = local != nullptr && std::atoi(local) > 1;
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && (threads > 1 || shared_machine)) {
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
      set(1);
    }
  }
  return at::get_num_threads();
}

}  // namespace lithe::host
