#pragma once
/// \file
/// WeightMasker: the criterion of a pruning algorithm, i.e. *which* weights of one layer go for
/// a given sparsity (NNI's WeightMasker.calc_mask). Schedules (when, how much) live in Pruner.

#include <optional>

#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"

namespace lithe::sdk {

class CompressionContext;

class LITHE_SDK_API WeightMasker {
 public:
  virtual ~WeightMasker();

  /// (optional) Called once when the compression session starts, before any calc_mask; data
  /// driven maskers register activation collectors here. Defaults to doing nothing.
  virtual void attach(CompressionContext& context);

  /// Masks for `layer` such that `sparsity` (in [0, 1)) of its prunable units are zero. Returns
  /// nullopt when the masker cannot decide yet (e.g. not enough activations seen); the host
  /// retries at the next mask update. Must be deterministic for identical inputs. May throw
  /// sdk::Error (kUnsupportedLayer for layers it cannot handle).
  virtual std::optional<Masks> calc_mask(LayerView& layer, double sparsity) = 0;
};

}  // namespace lithe::sdk
