#pragma once
/// \file
/// CUDA twins of the raw CPU kernels in lithe/kernels/selection.h (internal to lithe_kernels).
/// Only compiled when LITHE_HAS_CUDA. All pointers are device pointers on `device`; the work runs
/// on the legacy default stream and the functions return after it finished (the ATen glue cannot
/// see ATen's current CUDA stream: Debian's libtorch has no CUDA headers). CUDA runtime failures
/// throw sdk::Error(kInternal) naming the call and cudaGetErrorString.

#include <cstdint>

namespace lithe::kernels::cuda {

/// Same contract as select_smallest_cpu: exactly k zeros at the k smallest (score, flat index).
void select_smallest_cuda(const float* x, int64_t n, int64_t k, bool by_magnitude, float* keep,
                          int device);

/// x[i] *= mask[i] for i < n.
void apply_mask_cuda(float* x, const float* mask, int64_t n, int device);

}  // namespace lithe::kernels::cuda
