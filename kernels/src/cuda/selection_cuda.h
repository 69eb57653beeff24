#pragma once
/// \file
/// CUDA twins of the raw CPU kernels in lithe/kernels/selection.h (internal to lithe_kernels).
/// Only compiled when LITHE_HAS_CUDA. All pointers are device pointers on the current device; the
/// work is queued on `stream` (the glue passes ATen's current stream). apply_mask_cuda returns
/// without waiting; select_smallest_cuda waits on `stream` between its radix passes (it reads
/// each pass's histogram on the host) but not for its last kernel. CUDA runtime failures throw
/// sdk::Error(kInternal) naming the call and cudaGetErrorString.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace lithe::kernels::cuda {

/// Bytes of device scratch select_smallest_cuda needs for `n` scores (a few bytes per 256).
std::size_t select_smallest_cuda_scratch_bytes(int64_t n);

/// Same contract as select_smallest_cpu: exactly k zeros at the k smallest (score, flat index).
/// `scratch` holds at least select_smallest_cuda_scratch_bytes(n) device bytes, 8-byte aligned,
/// free for the stream-ordered lifetime of the call (an ATen allocation on `stream` is).
void select_smallest_cuda(const float* x, int64_t n, int64_t k, bool by_magnitude, float* keep,
                          void* scratch, cudaStream_t stream);

/// x[i] = 0 where mask[i] == 0, for i < n.
void apply_mask_cuda(float* x, const float* mask, int64_t n, cudaStream_t stream);

}  // namespace lithe::kernels::cuda
