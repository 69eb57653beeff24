#include "lithe/host/io/allocator.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace lithe::host {

bool keep_freed_memory_for_reuse() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_TOP_PAD_") != nullptr) {
    return false;
  }
  if (mallopt(M_TOP_PAD, static_cast<int>(kAllocatorTopPad)) != 1) {
    return false;
  }
  // malloc serves a block of any size from the top of the heap when the top has room, and maps
  // it (to unmap it at free) only when not. So the heap is grown once now, by a block taken
  // with mapping switched off: freed, it leaves a top of kAllocatorTopPad that the pad keeps.
  // Its pages are never touched here, so none becomes resident.
  mallopt(M_MMAP_MAX, 0);
  void* grow = std::malloc(kAllocatorTopPad);
  asm volatile("" : : "r"(grow) : "memory");  // a malloc/free pair nobody reads may be elided
  std::free(grow);
  const char* user_max = std::getenv("MALLOC_MMAP_MAX_");
  mallopt(M_MMAP_MAX, user_max != nullptr ? std::atoi(user_max) : 65536);  // glibc's default
  return true;
#else
  return false;
#endif
}

}  // namespace lithe::host
