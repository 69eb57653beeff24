#pragma once
/// \file
/// Pruner: the policy of a pruning algorithm (when and how much), NNI's Pruner. The host calls,
/// in this order: validate_config for every config_list entry, attach once, then calc_mask per
/// layer at every mask update (compress(), and after every optimizer step during training),
/// update_epoch at each epoch start and step after each batch.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lithe/sdk/context.h"
#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/masker.h"
#include "lithe/sdk/options.h"

namespace lithe::sdk {

class LITHE_SDK_API Pruner {
 public:
  virtual ~Pruner();

  /// Checks one config_list entry (never an `exclude` entry): reads every key the algorithm
  /// accepts and throws sdk::Error(kInvalidConfig) naming entry.path() + key, the rule and the
  /// value. `op_types`, `op_names` and `exclude` are handled by the host but may be read too.
  /// Keys left unread are rejected by the host afterwards.
  virtual void validate_config(const Options& entry) const = 0;

  /// (optional) Called once before the first mask update. Defaults to doing nothing.
  virtual void attach(CompressionContext& context);

  /// New masks for `layer`, or nullopt for "no change now". The host validates them (shape,
  /// device, dtype, every entry 0 or 1: LayerView::set_masks) and fails naming this pruner and
  /// the layer when they break a rule.
  virtual std::optional<Masks> calc_mask(LayerView& layer) = 0;

  /// (optional) Start of epoch `epoch` (0-based). Defaults to doing nothing.
  virtual void update_epoch(int64_t epoch);
  /// (optional) End of each training batch. Defaults to doing nothing.
  virtual void step();
  /// (optional) After every optimizer step, once the masks have been updated and re-applied
  /// (NNI's later patch_optimizer tasks). Defaults to doing nothing.
  virtual void after_optimizer_step();
};

/// NNI's OneshotPruner: computes each layer's masks once with `masker` at the layer's
/// config "sparsity" (a number in [0, 1)); a layer whose masker returns nullopt is retried at
/// the next update. validate_config requires "sparsity" in [0, 1).
LITHE_SDK_API std::unique_ptr<Pruner> make_one_shot_pruner(std::unique_ptr<WeightMasker> masker);

/// The same, for algorithms that handle one op type only (NNI's schema for filter pruners):
/// validate_config also rejects an entry whose `op_types` names anything but `only_op_type`
/// ("default" included), naming `algorithm` in the message.
LITHE_SDK_API std::unique_ptr<Pruner> make_one_shot_pruner(std::unique_ptr<WeightMasker> masker,
                                                         const std::string& algorithm,
                                                         const std::string& only_op_type);

/// Throws sdk::Error(kUnsupportedLayer) naming the layer, its op type and `algorithm` unless the
/// layer's op type is `op_type` (op_names entries can select any module).
LITHE_SDK_API void require_layer_op_type(const LayerView& layer, const std::string& op_type,
                                         const std::string& algorithm);

/// SDK 1.5: the same for algorithms that handle several op types: validate_config rejects an
/// entry whose `op_types` names anything outside `op_types` ("default" included). `op_types`
/// must not be empty.
LITHE_SDK_API std::unique_ptr<Pruner> make_one_shot_pruner_for(
    std::unique_ptr<WeightMasker> masker, const std::string& algorithm,
    const std::vector<std::string>& op_types);

/// SDK 1.5: throws sdk::Error(kUnsupportedLayer) naming the layer, its op type, `algorithm` and
/// the accepted types unless the layer's op type is one of `op_types`.
LITHE_SDK_API void require_layer_op_type_in(const LayerView& layer,
                                            const std::vector<std::string>& op_types,
                                            const std::string& algorithm);

/// Number of units to prune for `count` units at `sparsity`: int(double(count) * sparsity),
/// truncated toward zero exactly as NNI (Python int()) does.
LITHE_SDK_API int64_t prune_count(int64_t count, double sparsity);

}  // namespace lithe::sdk
