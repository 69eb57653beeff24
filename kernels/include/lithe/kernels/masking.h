#pragma once
/// \file
/// Tensor-level entry points over the raw kernels: argument checks and device dispatch
/// (CPU always; CUDA when compiled in and the tensor lives on a GPU). On a GPU the work is queued
/// on ATen's current stream of the tensor's device, like an ATen op: apply_mask_ returns without
/// waiting; exact_k_keep_mask waits on that stream between its radix passes (it reads their
/// histograms on the host), never on the whole device.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include "lithe/kernels/export.h"

namespace lithe::kernels {

/// A float32 tensor shaped like `scores` with exactly k zeros at the k smallest scores (|scores|
/// when `by_magnitude`), ties broken by lower flat index; ones elsewhere. `scores` must be a
/// floating tensor (any float dtype is converted to float32); 0 <= k <= numel, else throws
/// sdk::Error(kInvalidConfig) naming the value.
LITHE_KERNELS_API
at::Tensor exact_k_keep_mask(const at::Tensor& scores, int64_t k, bool by_magnitude);

/// Masks `weight` in place with a 0/1 `mask` of the same shape: entries where the mask is 0
/// become exactly 0 (also Inf and NaN, which a multiply would turn into NaN), the others keep
/// their value; for 0/1 masks and finite weights this is weight *= mask. Throws
/// sdk::Error(kShapeMismatch) when the shapes differ, kDeviceMismatch on a device/dtype mismatch.
LITHE_KERNELS_API
void apply_mask_(const at::Tensor& weight, const at::Tensor& mask);

}  // namespace lithe::kernels
