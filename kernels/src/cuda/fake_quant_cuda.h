#pragma once
/// \file
/// CUDA twins of the raw CPU kernels in lithe/kernels/fake_quant.h (internal to lithe_kernels).
/// Only compiled when LITHE_HAS_CUDA. All pointers are device pointers on the current device
/// (scale and zero_point arrays too); the work is queued on `stream` (the glue passes ATen's
/// current stream) and the functions return without waiting for it. CUDA runtime failures throw
/// sdk::Error(kInternal) naming the call.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "lithe/kernels/fake_quant.h"

namespace lithe::kernels::cuda {

/// Same contract and bytes as fake_quant_per_tensor_cpu.
void fake_quant_per_tensor_cuda(const float* x, int64_t n, float scale, float zero_point,
                                int64_t qmin, int64_t qmax, float* y, uint8_t* mask,
                                QuantFormula formula, cudaStream_t stream);

/// Same contract and bytes as fake_quant_per_channel_cpu.
void fake_quant_per_channel_cuda(const float* x, int64_t outer, int64_t channels, int64_t inner,
                                 const float* scale, const float* zero_point, int64_t qmin,
                                 int64_t qmax, float* y, uint8_t* mask, QuantFormula formula,
                                 cudaStream_t stream);

}  // namespace lithe::kernels::cuda
