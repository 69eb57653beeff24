#pragma once
/// \file
/// Thread settings. libtorch defaults to one intra-op thread on some machines, and OpenBLAS's
/// own pool fights libtorch's on small core counts, so Lithe sets both explicitly.

namespace lithe::host {

/// The largest thread count configure_threads accepts: 4 x the cores of this machine.
int max_threads();

/// Sets libtorch's intra-op threads to `threads` (0: every available core, divided among the
/// LOCAL_WORLD_SIZE ranks of a data-parallel run on this machine) and, unless the
/// user set OPENBLAS_NUM_THREADS, keeps OpenBLAS at one thread when libtorch uses more than one.
/// Returns the thread count in effect. A negative count or one above max_threads() is
/// sdk::Error(kInvalidConfig) naming --threads and the value.
int configure_threads(int threads);

}  // namespace lithe::host
