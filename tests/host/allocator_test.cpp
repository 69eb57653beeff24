// keep_freed_memory_for_reuse: a large block freed and allocated again reuses its pages instead
// of faulting fresh ones (what made the sensitivity analysis spend more time in the kernel than
// in its convolutions). A process of its own: the allocator setting is process-wide.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#include "lithe/host/io/allocator.h"

namespace lithe::host {
namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Minor page faults taken by writing every byte of a fresh `bytes` block, freed afterwards.
long faults_to_fill(std::size_t bytes) {
  void* block = std::malloc(bytes);
  EXPECT_NE(block, nullptr);
  const long before = minor_faults();
  std::memset(block, 1, bytes);
  // Keeps the compiler from eliding the malloc/memset/free of a block nobody reads.
  asm volatile("" : : "r"(block) : "memory");
  const long taken = minor_faults() - before;
  std::free(block);
  return taken;
}

#if defined(__GLIBC__)
TEST(Allocator, FreedBlocksAreReusedWithoutFaultingThePagesAgain) {
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_FALSE(keep_freed_memory_for_reuse()) << "AddressSanitizer's malloc ignores mallopt";
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc: the setting does not apply";
#endif
  if (std::getenv("MALLOC_TOP_PAD_") != nullptr) {
    EXPECT_FALSE(keep_freed_memory_for_reuse()) << "the user's MALLOC_TOP_PAD_ must stand";
    GTEST_SKIP() << "MALLOC_TOP_PAD_ is set in the environment: the user's setting stands";
  }
  constexpr std::size_t kBlock = std::size_t{64} << 20;  // above glibc's largest mmap threshold
  constexpr long kPages = static_cast<long>(kBlock / 4096);
  // glibc's default: the block is mapped for each malloc and unmapped by free, so every fill
  // faults in (nearly) every page again (with 4 KiB pages; transparent huge pages fault less).
  faults_to_fill(kBlock);
  const long default_faults = faults_to_fill(kBlock);

  ASSERT_TRUE(keep_freed_memory_for_reuse());
  faults_to_fill(kBlock);  // the heap grows once...
  const long reused = faults_to_fill(kBlock);
  EXPECT_LT(reused, kPages / 20) << "...and the next block reuses its pages";
  if (default_faults > kPages / 2) {  // 4 KiB pages, as on the machines measured
    EXPECT_LT(reused * 10, default_faults) << "the setting removed the faults the default takes";
  }
}
#endif

}  // namespace
}  // namespace lithe::host
