#pragma once
/// \file
/// Tensor-level fused fake quantization: argument checks and device dispatch (CPU always; CUDA
/// when compiled in and the tensor lives on a GPU) over the raw kernels of
/// lithe/kernels/fake_quant.h, whose header documents the arithmetic and the two QuantFormula
/// operation orders. On a GPU the kernel is queued on ATen's current stream of x's device and the
/// call returns without waiting for it (the per-channel form first copies scale and zero_point to
/// the host to validate them).
///
/// Every entry point returns {y, mask}: y is a new contiguous float32 tensor shaped like x, mask a
/// bool tensor shaped like x, true where the straight-through gradient passes. x is never
/// modified. Argument errors throw sdk::Error naming the rule and the offending value:
/// kInvalidConfig for bad values (scale, zero point, range, axis), kShapeMismatch for parameter
/// sizes, kDeviceMismatch for dtype/device problems, kUnsupported for non-strided layouts.

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "lithe/kernels/fake_quant.h"
#include "lithe/kernels/export.h"

namespace lithe::kernels {

/// Result of a fused fake quantization.
struct FakeQuantResult {
  at::Tensor output;  ///< float32, contiguous, shaped like the input
  at::Tensor mask;    ///< bool, contiguous, shaped like the input; true = gradient passes
};

/// Per-tensor fake quantization of a float32 tensor (any strides; non-contiguous inputs are read
/// in logical order). Requires: scale finite and > 0 (also after conversion to float32),
/// zero_point finite, qmin < qmax. With QuantFormula::kAten additionally zero_point integral and
/// in [qmin, qmax], as at::fake_quantize_per_tensor_affine requires.
LITHE_KERNELS_API
FakeQuantResult fake_quantize_per_tensor(const at::Tensor& x, double scale, double zero_point,
                                         int64_t qmin, int64_t qmax,
                                         QuantFormula formula = QuantFormula::kNni);

/// Per-channel fake quantization along `axis` (negative counts from the end; x.dim() >= 1).
/// `scale` and `zero_point` are 1-D floating tensors with x.size(axis) elements on x's device
/// (converted to float32); every scale must be finite and > 0, every zero point finite (kAten:
/// integral and in [qmin, qmax]); qmin < qmax.
LITHE_KERNELS_API
FakeQuantResult fake_quantize_per_channel(const at::Tensor& x, const at::Tensor& scale,
                                          const at::Tensor& zero_point, int64_t axis,
                                          int64_t qmin, int64_t qmax,
                                          QuantFormula formula = QuantFormula::kNni);

}  // namespace lithe::kernels
