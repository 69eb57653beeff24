#pragma once
/// \file
/// Exact-k selection of the smallest scores, the core of every magnitude pruner.
/// Raw-pointer CPU API (no ATen), usable from any translation unit cheaply.
///
/// Rule (Lithe departure 1 from NNI): exactly k elements are selected; elements are ordered by
/// (score, flat index), so ties at the threshold go to the lower index. The result is unique,
/// hence byte-identical for every thread count. NaN scores order after +inf (never selected
/// before a number). With `by_magnitude`, the score of x is |x| (-0 == +0).

#include <cstdint>
#include "lithe/kernels/export.h"

namespace lithe::kernels {

/// Writes keep[i] = 0.0f for the k selected elements and 1.0f for all others.
/// Preconditions (checked by callers): 0 <= k <= n, x and keep hold n floats, no overlap.
/// `num_threads` <= 0 means "use the current libtorch/OpenMP thread count".
LITHE_KERNELS_API
void select_smallest_cpu(const float* x, int64_t n, int64_t k, bool by_magnitude, float* keep,
                         int num_threads = 0);

/// x[i] = mask[i] == 0 ? 0 : x[i] for i < n, in place (x * mask for 0/1 masks and finite x; a
/// pruned Inf or NaN becomes 0). Same threading rule.
LITHE_KERNELS_API
void apply_mask_cpu(float* x, const float* mask, int64_t n, int num_threads = 0);

/// Whether the CUDA kernels were compiled into this build.
LITHE_KERNELS_API
bool cuda_compiled() noexcept;

}  // namespace lithe::kernels
