#pragma once
/// \file
/// SDK 1.6: global sparsity (NNI v2.x's `total_sparsity` and `max_sparsity_per_layer`, its
/// global sparsity allocator; Torch-Pruning's global pruning). Instead of each layer losing its
/// own fraction, one ranking runs across every layer a config_list entry selects: exactly
/// int(total_sparsity · N) of the entry's N prunable units (weights, or filters) go, the least
/// important first wherever they are, and no layer loses more than int(max_sparsity_per_layer ·
/// its units). make_one_shot_pruner_ranked and the filter framework (make_filter_pruner_for,
/// not in dependency_aware mode) accept such entries; a plugin declares the keys with
/// sparsity_or_total_keys().
///
/// Departure from NNI: a filter pruner counts filters (NNI counts the weights of the filters it
/// removes), so the pruned fraction of filters is exact; the selection is exact-k with ties to
/// the earlier layer, then the lower index (NNI thresholds and prunes every tie).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "lithe/sdk/context.h"
#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/masker.h"
#include "lithe/sdk/option_spec.h"
#include "lithe/sdk/options.h"
#include "lithe/sdk/pruner.h"

namespace lithe::sdk {

/// One entry's global setting.
struct GlobalSparsity {
  double total = 0;          ///< total_sparsity, in [0, 1)
  double max_per_layer = 1;  ///< max_sparsity_per_layer, in (0, 1]
};

/// The config_list keys of a pruner that takes either a per-layer "sparsity" or a global
/// "total_sparsity" (with optional "max_sparsity_per_layer", default 1): all three numbers,
/// none required (read_global_sparsity requires exactly one of the first two). Use instead of
/// sparsity_keys() in describe_options.
LITHE_SDK_API const OptionSchema& sparsity_or_total_keys();

/// Reads an entry of such a pruner: exactly one of "sparsity" and "total_sparsity";
/// "max_sparsity_per_layer" only with "total_sparsity". Returns nullopt for a per-layer
/// sparsity (read and checked: [0, 1)), else the global setting. Throws sdk::Error
/// (kInvalidConfig) naming the entry's path, the rule and the value.
LITHE_SDK_API std::optional<GlobalSparsity> read_global_sparsity(const Options& entry);

/// The layers whose config_list entry is `layer`'s (the same Options::path()), in the
/// context's order (named_modules order); `layer` among them.
LITHE_SDK_API std::vector<LayerView*> layers_of_entry(CompressionContext& context,
                                                      const LayerView& layer);

/// The global selection. `scores[l]` holds one score per prunable unit of layer l (any shape,
/// read flat; smaller is pruned first; NaN after every number), `caps[l]` the most units layer
/// l may lose. Exactly `count` units are pruned: the `count` smallest scores among each layer's
/// caps[l] smallest, ties to the lower layer, then the lower unit index. Returns per layer a
/// bool tensor shaped like its scores, true where pruned. Deterministic. Throws sdk::Error
/// (kInvalidConfig) when the caps add up to fewer than `count` units (the message gives both).
LITHE_SDK_API std::vector<at::Tensor> select_global(const std::vector<at::Tensor>& scores,
                                                    const std::vector<int64_t>& caps,
                                                    int64_t count);

/// How a pruner ranks the units of one layer for global sparsity: their scores (a tensor with
/// one element per unit; nullopt while the criterion cannot decide yet, retried at the next
/// mask update), and the masks that prune the units marked true in a bool tensor of the
/// scores' shape.
struct UnitRanking {
  std::function<std::optional<at::Tensor>(LayerView& layer)> scores;
  std::function<Masks(LayerView& layer, const at::Tensor& pruned)> masks;
};

/// make_one_shot_pruner_for(masker, algorithm, op_types) (op_types empty: any type) that also
/// takes global entries: an entry with "total_sparsity" ranks the units of all its layers
/// together through `ranking` (when the first of them is asked, every other member's masks
/// then kept for its own calc_mask); an entry with "sparsity" goes through `masker` as
/// before. The number of units of a layer is the element count of its scores.
LITHE_SDK_API std::unique_ptr<Pruner> make_one_shot_pruner_ranked(
    std::unique_ptr<WeightMasker> masker, UnitRanking ranking, const std::string& algorithm,
    const std::vector<std::string>& op_types);

}  // namespace lithe::sdk
