#pragma once
// L1/L2 filter pruning (NNI's L1FilterPruner / L2FilterPruner). Declared for unit
// tests, which link this plugin's object library and register it into their own registry.

#include <ATen/core/Tensor.h>
#include <lithe/sdk/registry.h>

namespace lithe::plugins::filter_norm {

/// Which per-filter norm ranks the filters.
enum class Norm { kL1, kL2 };

/// Per-filter importance of a Conv2d weight [F, ...], computed as NNI does in float32 on
/// weight.view(F, -1): L1 = Σ|w|, L2 = sqrt(Σ w²). Returns a float32 tensor [F].
at::Tensor filter_importance(const at::Tensor& weight, Norm norm);

/// Registers masker and pruner "l1_filter" and "l2_filter" (SDK filter framework over
/// filter_importance; the pruners read option "dependency_aware").
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::filter_norm
