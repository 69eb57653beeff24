// CUDA twins of the CPU selection kernels (raw device pointers, no ATen). Favoured simplicity
// over speed: a most-significant-digit-first radix select with four 8-bit passes (block
// histograms in shared memory) finds the k-th smallest key T and how many elements equal to T are
// selected; a tiled pass then writes the mask, ranking ties by flat index with a per-tile count,
// a host prefix sum and warp ballots. Keys and ordering are exactly those of the CPU kernel
// (kernels/src/cpu/selection.cpp), so both produce the same bytes.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/selection_cuda.h"
#include "lithe/kernels/selection.h"
#include "cuda/cuda_support.cuh"
#include "lithe/sdk/error.h"

namespace lithe::kernels {

bool cuda_compiled() noexcept { return true; }

namespace cuda {
namespace {

constexpr uint32_t kNanKey = 0xffffffffu;
constexpr int kThreads = 256;  // threads per block; also the tile size of the mask pass
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHistogramBlocks = 1024;
constexpr int kRadixBits = 8;
constexpr int kRadixBins = 1 << kRadixBits;

/// Same keys as the CPU kernel: |x| or x as an order-preserving uint32; -0 == +0; NaN largest.
template <bool kByMagnitude>
__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t bits = __float_as_uint(v);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) {
    return kNanKey;
  }
  if (kByMagnitude) {
    return a;
  }
  if (a == 0u) {
    return 0x80000000u;
  }
  return (bits >> 31) != 0u ? ~bits : (bits | 0x80000000u);
}

__global__ void fill_kernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

/// hist[d] += number of keys with (key & prefix_mask) == prefix whose digit at `shift` is d.
template <bool kByMagnitude>
__global__ void digit_histogram_kernel(const float* x, int64_t n, uint32_t prefix_mask,
                                       uint32_t prefix, int shift, unsigned long long* hist) {
  __shared__ unsigned int local[kRadixBins];
  for (int b = threadIdx.x; b < kRadixBins; b += blockDim.x) {
    local[b] = 0u;
  }
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t key = key_of<kByMagnitude>(x[i]);
    if ((key & prefix_mask) == prefix) {
      atomicAdd(&local[(key >> shift) & (kRadixBins - 1)], 1u);
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kRadixBins; b += blockDim.x) {
    if (local[b] != 0u) {
      atomicAdd(&hist[b], static_cast<unsigned long long>(local[b]));
    }
  }
}

/// Per tile of kThreads elements: rank of this thread's tie among the tile's ties (exclusive) and
/// the tile's tie total, via warp ballots.
__device__ __forceinline__ void tile_tie_rank(bool tie, unsigned int* warp_counts,
                                              unsigned int* rank, unsigned int* total) {
  const unsigned int lane = threadIdx.x & 31u;
  const unsigned int warp = threadIdx.x >> 5;
  const unsigned int ballot = __ballot_sync(0xffffffffu, tie);
  if (lane == 0u) {
    warp_counts[warp] = static_cast<unsigned int>(__popc(ballot));
  }
  __syncthreads();
  unsigned int before = 0u;
  unsigned int sum = 0u;
  for (unsigned int w = 0; w < static_cast<unsigned int>(kWarps); ++w) {
    before += w < warp ? warp_counts[w] : 0u;
    sum += warp_counts[w];
  }
  *rank = before + static_cast<unsigned int>(__popc(ballot & ((1u << lane) - 1u)));
  *total = sum;
}

template <bool kByMagnitude>
__global__ void count_ties_kernel(const float* x, int64_t n, uint32_t threshold,
                                  unsigned int* tile_ties) {
  __shared__ unsigned int warp_counts[kWarps];
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  const bool tie = i < n && key_of<kByMagnitude>(x[i]) == threshold;
  unsigned int rank = 0u;
  unsigned int total = 0u;
  tile_tie_rank(tie, warp_counts, &rank, &total);
  if (threadIdx.x == 0) {
    tile_ties[blockIdx.x] = total;
  }
}

/// keep = 0 below the threshold, 1 above; a tie is selected (0) when its rank in the tile is
/// below the tile's quota (ties selected in index order across tiles).
template <bool kByMagnitude>
__global__ void write_mask_kernel(const float* x, int64_t n, uint32_t threshold,
                                  const unsigned int* tile_quota, float* keep) {
  __shared__ unsigned int warp_counts[kWarps];
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  const uint32_t key = i < n ? key_of<kByMagnitude>(x[i]) : 0u;
  const bool tie = i < n && key == threshold;
  unsigned int rank = 0u;
  unsigned int total = 0u;
  tile_tie_rank(tie, warp_counts, &rank, &total);
  if (i < n) {
    float value = key < threshold ? 0.0f : 1.0f;
    if (tie && rank < tile_quota[blockIdx.x]) {
      value = 0.0f;
    }
    keep[i] = value;
  }
}

__global__ void apply_mask_kernel(float* x, const float* mask, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = mask[i] == 0.0f ? 0.0f : x[i];  // a pruned Inf/NaN becomes exactly 0
  }
}

__device__ __forceinline__ float keep_or_zero(float m, float v) { return m == 0.0f ? 0.0f : v; }

// The same on 16-byte vectors (both pointers 16-byte aligned): both loads are issued before the
// select, so a thread does not wait for the mask before it asks for the weight, and each memory
// transaction carries four elements. The results are the scalar kernel's, bit for bit.
__global__ void apply_mask_vec4_kernel(float4* x, const float4* mask, int64_t n4) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 v = x[i];
    const float4 m = mask[i];
    v.x = keep_or_zero(m.x, v.x);
    v.y = keep_or_zero(m.y, v.y);
    v.z = keep_or_zero(m.z, v.z);
    v.w = keep_or_zero(m.w, v.w);
    x[i] = v;
  }
}

int grid_for(int64_t n, int max_blocks) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, max_blocks)));
}

/// Where select_radix keeps its device state inside the caller's scratch: the 256 histogram
/// counters, then one counter per tile.
struct Scratch {
  unsigned long long* hist;
  unsigned int* tiles;
};

int64_t tiles_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

Scratch carve(void* scratch) {
  auto* hist = static_cast<unsigned long long*>(scratch);
  return {hist, reinterpret_cast<unsigned int*>(hist + kRadixBins)};
}

/// Copies `bytes` from the device to the host in stream order and waits for them: the one kind
/// of wait the selection needs (the next pass depends on this one's histogram).
void read_back(void* host, const void* device, std::size_t bytes, cudaStream_t stream) {
  LITHE_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
  LITHE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

template <bool kByMagnitude>
void select_radix(const float* x, int64_t n, int64_t k, float* keep, Scratch scratch,
                  cudaStream_t stream) {
  // MSD radix select: after the four passes `prefix` is the k-th smallest key and `rank` the
  // number of elements equal to it that are selected.
  std::vector<unsigned long long> host_hist(kRadixBins);
  const std::size_t hist_bytes = kRadixBins * sizeof(unsigned long long);
  uint32_t prefix = 0u;
  uint32_t prefix_mask = 0u;
  uint64_t rank = static_cast<uint64_t>(k);
  for (int shift = 32 - kRadixBits; shift >= 0; shift -= kRadixBits) {
    LITHE_CUDA_CHECK(cudaMemsetAsync(scratch.hist, 0, hist_bytes, stream));
    digit_histogram_kernel<kByMagnitude>
        <<<grid_for(n, kMaxHistogramBlocks), kThreads, 0, stream>>>(x, n, prefix_mask, prefix,
                                                                    shift, scratch.hist);
    LITHE_CUDA_CHECK(cudaGetLastError());
    read_back(host_hist.data(), scratch.hist, hist_bytes, stream);
    uint64_t below = 0;
    int digit = 0;
    while (digit < kRadixBins - 1 && below + host_hist[digit] < rank) {
      below += host_hist[digit];
      ++digit;
    }
    rank -= below;
    prefix |= static_cast<uint32_t>(digit) << shift;
    prefix_mask |= static_cast<uint32_t>(kRadixBins - 1) << shift;
  }

  const int64_t tiles = tiles_for(n);
  LITHE_CHECK(tiles <= 0x7fffffff, sdk::Errc::kUnsupported,
              "select_smallest_cuda: at most 2^31-1 tiles of ", kThreads,
              " elements are supported, got ", n, " elements");
  const std::size_t tile_bytes = static_cast<std::size_t>(tiles) * sizeof(unsigned int);
  count_ties_kernel<kByMagnitude>
      <<<static_cast<unsigned int>(tiles), kThreads, 0, stream>>>(x, n, prefix, scratch.tiles);
  LITHE_CUDA_CHECK(cudaGetLastError());
  std::vector<unsigned int> quota(static_cast<std::size_t>(tiles));
  read_back(quota.data(), scratch.tiles, tile_bytes, stream);
  uint64_t remaining = rank;
  for (auto& q : quota) {
    const uint64_t take = std::min<uint64_t>(remaining, q);
    q = static_cast<unsigned int>(take);
    remaining -= take;
  }
  // From pageable memory the copy returns once CUDA holds its own copy of `quota`, so the vector
  // may go when this function returns, before the stream reaches the copy.
  LITHE_CUDA_CHECK(
      cudaMemcpyAsync(scratch.tiles, quota.data(), tile_bytes, cudaMemcpyHostToDevice, stream));
  write_mask_kernel<kByMagnitude><<<static_cast<unsigned int>(tiles), kThreads, 0, stream>>>(
      x, n, prefix, scratch.tiles, keep);
  LITHE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

std::size_t select_smallest_cuda_scratch_bytes(int64_t n) {
  return kRadixBins * sizeof(unsigned long long) +
         static_cast<std::size_t>(std::max<int64_t>(tiles_for(n), 1)) * sizeof(unsigned int);
}

void select_smallest_cuda(const float* x, int64_t n, int64_t k, bool by_magnitude, float* keep,
                          void* scratch, cudaStream_t stream) {
  if (n <= 0) {
    return;
  }
  if (k <= 0 || k >= n) {
    fill_kernel<<<grid_for(n, 4096), kThreads, 0, stream>>>(keep, n, k <= 0 ? 1.0f : 0.0f);
    LITHE_CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (by_magnitude) {
    select_radix<true>(x, n, k, keep, carve(scratch), stream);
  } else {
    select_radix<false>(x, n, k, keep, carve(scratch), stream);
  }
}

void apply_mask_cuda(float* x, const float* mask, int64_t n, cudaStream_t stream) {
  if (n <= 0) {
    return;
  }
  const bool aligned =
      ((reinterpret_cast<std::uintptr_t>(x) | reinterpret_cast<std::uintptr_t>(mask)) & 15u) == 0;
  if (aligned && n >= 4) {
    const int64_t n4 = n / 4;
    apply_mask_vec4_kernel<<<grid_for(n4, 8192), kThreads, 0, stream>>>(
        reinterpret_cast<float4*>(x), reinterpret_cast<const float4*>(mask), n4);
    LITHE_CUDA_CHECK(cudaGetLastError());
    if (n % 4 != 0) {
      apply_mask_kernel<<<1, kThreads, 0, stream>>>(x + 4 * n4, mask + 4 * n4, n % 4);
    }
  } else {
    apply_mask_kernel<<<grid_for(n, 4096), kThreads, 0, stream>>>(x, mask, n);
  }
  LITHE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace lithe::kernels
