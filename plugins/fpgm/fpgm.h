#pragma once
// FPGM filter pruning (NNI's FPGMPruner). Declared for unit tests, which link this
// plugin's object library and register it into their own registry.

#include <ATen/core/Tensor.h>
#include <lithe/sdk/registry.h>

namespace lithe::plugins::fpgm {

/// d[i] = Σ_j ||W[i] − W[j]||₂ over the flattened float32 filters of `weight` [F, ...], computed
/// per filter exactly as NNI does (sqrt((x * x).sum(-1)).sum() with x = W − W[i]), so values are
/// bit-identical to NNI's. Returns a float32 tensor [F].
at::Tensor distance_sums(const at::Tensor& weight);

/// Registers masker "fpgm" and pruner "fpgm" (SDK filter framework over distance_sums; the
/// pruner reads option "dependency_aware").
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::fpgm
