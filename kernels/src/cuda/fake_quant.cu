// CUDA twins of the CPU fake-quantization kernels (raw device pointers, no ATen). One thread per
// element in a grid-stride loop; the arithmetic is spelled with the explicitly rounded intrinsics
// (__fdiv_rn, __fadd_rn, __fmul_rn, __fsub_rn) so that nvcc can neither contract it into FMAs nor
// use an approximate division, whatever flags it gets; rintf rounds half to even. Each element
// therefore goes through exactly the operations of kernels/src/cpu/fake_quant.cpp and both
// produce the same bytes.

#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>

#include "cuda/fake_quant_cuda.h"
#include "cuda/cuda_support.cuh"
#include "lithe/sdk/error.h"

namespace lithe::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;
constexpr float kTwo63 = 9223372036854775808.0f;

unsigned int grid_for(int64_t n) {
  return static_cast<unsigned int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks)));
}

/// The grid an element lands on (the CPU file's Grid): NNI's, ATen's per-tensor kernel
/// (saturating) or its per-channel kernel (through int64).
enum class Grid : uint8_t { kNni, kAtenSaturating, kAtenInt64 };

/// One element, same semantics as the CPU scalar body (see lithe/kernels/fake_quant.h).
template <Grid G>
__device__ __forceinline__ void fake_quant_one(float v, float scale, float zp, float qmin,
                                               float qmax, float* y, uint8_t* mask) {
  float r;
  float q;
  bool inside;
  if (G == Grid::kNni) {
    // Clamp, then round, as NNI does; the mask uses the unclamped r. NaN stays NaN.
    const float t = __fadd_rn(__fdiv_rn(v, scale), zp);
    r = rintf(t);
    q = rintf(t < qmin ? qmin : (t > qmax ? qmax : t));
    inside = !(r < qmin || r > qmax);
  } else if (G == Grid::kAtenSaturating) {
    // ATen's per-tensor kernel: 1.0f / scale in float32, then fmin(fmax(r, qmin), qmax) (NaN
    // and -inf to qmin, +inf to qmax); NaN is outside.
    r = __fadd_rn(rintf(__fmul_rn(v, __fdiv_rn(1.0f, scale))), zp);
    q = fminf(fmaxf(r, qmin), qmax);
    inside = qmin <= r && r <= qmax;
  } else {
    // ATen's per-channel kernel: int64 conversion (NaN/inf/out of range -> INT64_MIN,
    // reproduced as -inf: q = qmin, mask 0).
    r = __fadd_rn(rintf(__fmul_rn(v, __fdiv_rn(1.0f, scale))), zp);
    r = (r >= -kTwo63 && r < kTwo63) ? r : -CUDART_INF_F;
    q = r < qmin ? qmin : (r > qmax ? qmax : r);
    inside = !(r < qmin || r > qmax);
  }
  *y = __fmul_rn(__fsub_rn(q, zp), scale);
  if (mask != nullptr) {
    *mask = inside ? 1 : 0;
  }
}

template <Grid G>
__global__ void per_tensor_kernel(const float* __restrict__ x, int64_t n, float scale, float zp,
                                  float qmin, float qmax, float* y, uint8_t* mask) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    fake_quant_one<G>(x[i], scale, zp, qmin, qmax, y + i, mask == nullptr ? nullptr : mask + i);
  }
}

template <Grid G>
__global__ void per_channel_kernel(const float* __restrict__ x, int64_t n, int64_t channels,
                                   int64_t inner, const float* __restrict__ scale,
                                   const float* __restrict__ zp, float qmin, float qmax, float* y,
                                   uint8_t* mask) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i / inner) % channels;
    fake_quant_one<G>(x[i], scale[c], zp[c], qmin, qmax, y + i,
                      mask == nullptr ? nullptr : mask + i);
  }
}

}  // namespace

void fake_quant_per_tensor_cuda(const float* x, int64_t n, float scale, float zero_point,
                                int64_t qmin, int64_t qmax, float* y, uint8_t* mask,
                                QuantFormula formula, cudaStream_t stream) {
  if (n <= 0) {
    return;
  }
  const auto lo = static_cast<float>(qmin);
  const auto hi = static_cast<float>(qmax);
  if (formula == QuantFormula::kNni) {
    per_tensor_kernel<Grid::kNni>
        <<<grid_for(n), kThreads, 0, stream>>>(x, n, scale, zero_point, lo, hi, y, mask);
  } else {
    per_tensor_kernel<Grid::kAtenSaturating>
        <<<grid_for(n), kThreads, 0, stream>>>(x, n, scale, zero_point, lo, hi, y, mask);
  }
  LITHE_CUDA_CHECK(cudaGetLastError());
}

void fake_quant_per_channel_cuda(const float* x, int64_t outer, int64_t channels, int64_t inner,
                                 const float* scale, const float* zero_point, int64_t qmin,
                                 int64_t qmax, float* y, uint8_t* mask, QuantFormula formula,
                                 cudaStream_t stream) {
  if (outer <= 0 || channels <= 0 || inner <= 0) {
    return;
  }
  const int64_t n = outer * channels * inner;
  const auto lo = static_cast<float>(qmin);
  const auto hi = static_cast<float>(qmax);
  if (formula == QuantFormula::kNni) {
    per_channel_kernel<Grid::kNni><<<grid_for(n), kThreads, 0, stream>>>(
        x, n, channels, inner, scale, zero_point, lo, hi, y, mask);
  } else {
    per_channel_kernel<Grid::kAtenInt64><<<grid_for(n), kThreads, 0, stream>>>(
        x, n, channels, inner, scale, zero_point, lo, hi, y, mask);
  }
  LITHE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lithe::kernels::cuda
