#pragma once
/// \file
/// The process allocator. A forward pass allocates and frees large, short-lived buffers (a
/// convolution's im2col matrix is tens of MB at batch 1000). With glibc's defaults each such
/// free returns the pages to the kernel and the next batch faults them in again: on the
/// Fashion-MNIST LeNet that is more system time than compute. Lithe keeps a pad of freed heap
/// for reuse instead.

#include <cstddef>

namespace lithe::host {

/// The heap pad keep_freed_memory_for_reuse sets: 256 MiB.
inline constexpr std::size_t kAllocatorTopPad = std::size_t{256} << 20;

/// With glibc, lets the heap keep up to kAllocatorTopPad of freed memory instead of returning
/// it to the kernel at once (mallopt M_TOP_PAD). Memory not touched is never resident; the
/// resident size is bounded by the largest working set, as before. Does nothing when the user
/// set MALLOC_TOP_PAD_ (their value stands), without glibc, or where another allocator answers
/// malloc (AddressSanitizer's ignores mallopt). Returns whether it changed the setting. Call it
/// once, early (the `lithe` CLI does at start); embedders may too.
bool keep_freed_memory_for_reuse();

}  // namespace lithe::host
