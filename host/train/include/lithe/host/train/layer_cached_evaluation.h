#pragma once
/// \file
/// Evaluation for many runs in a row that each change one layer's weights only (sensitivity
/// analysis: per layer, one evaluation per sparsity). What the forward computes before that
/// layer is computed once per layer and kept; each evaluation runs only the rest of the network
/// (Model::cut_forward). Results equal evaluate()'s exactly; models that cannot be cut, and
/// layers whose kept values would pass the memory bound, are evaluated in full.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "lithe/host/model/model.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"

namespace lithe::host {

class LayerCachedEvaluation {
 public:
  /// Keeps references to `model` and `data`: both must outlive this. `cache_bytes` bounds the
  /// memory of the kept values (one layer's at a time).
  LayerCachedEvaluation(Model& model, const Dataset& data, int64_t batch_size = 1000,
                        std::size_t cache_bytes = std::size_t{2} << 30);

  /// evaluate(model, data, batch_size) of the model as it is now, where only `layer`'s
  /// parameters differ from the last call naming the same layer (its kept values are then
  /// reused); any other change of weights needs a call naming another layer or none first.
  /// An empty `layer`: a plain evaluation, nothing kept.
  EvalResult evaluate(const std::string& layer);

  /// How the last evaluation ran: "cached" or why it ran the whole forward (for logs).
  const std::string& last_mode() const { return mode_; }

 private:
  bool prepare(const std::string& layer);

  Model& model_;
  const Dataset& data_;
  int64_t batch_size_;
  std::size_t cache_bytes_;
  std::string layer_;                 // whose prefix results `cached_` holds
  std::unique_ptr<ForwardCut> cut_;
  std::vector<c10::IValue> cached_;   // one per batch
  std::string mode_;
};

}  // namespace lithe::host
