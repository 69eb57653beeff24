#pragma once
// Private to liblithe_sdk (not installed, not exported): the exact-k filter selection shared by
// make_filter_masker (filter_masker.cpp) and make_filter_pruner's dependency-aware mode
// (filter_pruner.cpp), so both apply one rule.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lithe/sdk/layer.h"

namespace lithe::sdk::detail {

/// `scores` (a scorer's result for `layer`) checked and copied to float64 on the CPU: a
/// floating tensor with exactly `filters` elements. float32 -> float64 is exact, so the order
/// is the scorer's own. Throws sdk::Error naming the layer and `algorithm`: kShapeMismatch for
/// a wrong element count, kDeviceMismatch for a non-floating dtype.
std::vector<double> checked_scores(const at::Tensor& scores, const LayerView& layer,
                                   int64_t filters, const std::string& algorithm);

/// Per filter of `layer`: whether its current weight mask is all zero (pruned before).
std::vector<bool> fully_pruned_filters(const LayerView& layer);

/// The `count` filters to prune: ordered by `priority` (smaller first), then by `scores`
/// (smaller first; NaN after every number, like torch.sort), then by the lower index, and the
/// first `count` taken. 0 <= count <= scores.size(). Deterministic.
std::vector<bool> select_filters(const std::vector<int>& priority,
                                 const std::vector<double>& scores, int64_t count);

/// A copy of `layer`'s current masks with the `pruned` filters zeroed: weight [F, ...] whole
/// filters, bias [F] entries (a layer with a bias always gets a bias mask; a layer without one
/// gets none).
Masks zero_filters(const LayerView& layer, const std::vector<bool>& pruned);

/// Throws sdk::Error(kUnsupported) naming `algorithm` unless `op_types` is a non-empty subset
/// of filter_op_types() (a plugin asked for a type the filter framework cannot prune).
void check_filter_op_types(const std::vector<std::string>& op_types,
                           const std::string& algorithm);

}  // namespace lithe::sdk::detail
