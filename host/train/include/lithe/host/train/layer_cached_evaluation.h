#pragma once
/// \file
/// Evaluation for many runs in a row that each change one layer's weights only (sensitivity
/// analysis: per layer, one evaluation per sparsity). What the forward computes before that
/// layer is computed once per layer and kept; each evaluation runs only the rest of the network
/// (Model::cut_forward). Where a run's change only zeroes whole output channels of a
/// convolution or linear layer (filter pruning), the layer's own output is kept instead, those
/// channels are overwritten with what the zeroed weights give (the bias, or zero), and the
/// layer is not run at all. Results equal evaluate()'s exactly; models that cannot be cut, and
/// layers whose kept values would pass the memory bound, are evaluated in full.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "lithe/host/model/model.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"

namespace lithe::host {

class LayerCachedEvaluation {
 public:
  /// Keeps references to `model` and `data`: both must outlive this. The model's weights as
  /// they are now are the reference (a copy of every layer's weight and bias is taken).
  /// `cache_bytes` bounds the memory of the kept values (one layer's at a time).
  LayerCachedEvaluation(Model& model, const Dataset& data, int64_t batch_size = 1000,
                        std::size_t cache_bytes = std::size_t{2} << 30);

  /// evaluate(model, data, batch_size) of the model as it is now, where only `layer`'s weight
  /// and bias may differ from the reference. An empty `layer`: a plain evaluation, nothing
  /// kept (then any weights may differ).
  EvalResult evaluate(const std::string& layer);

  /// How the last evaluation ran: "cached before the layer", "cached after the layer", or why
  /// it ran the whole forward (for logs).
  const std::string& last_mode() const { return mode_; }

 private:
  struct Reference {
    at::Tensor weight;
    std::optional<at::Tensor> bias;
  };
  /// Per output channel: whether the layer's output there is the reference's (`keep`), and
  /// otherwise its value (`fill`: the bias, or zero).
  struct ChannelEdit {
    at::Tensor keep;
    at::Tensor fill;
  };
  std::optional<ChannelEdit> channel_edit(const ModuleRecord& layer) const;
  bool prepare(const ModuleRecord& layer, CutAt at);
  EvalResult run_suffix(const std::optional<ChannelEdit>& edit);

  Model& model_;
  const Dataset& data_;
  int64_t batch_size_;
  std::size_t cache_bytes_;
  std::map<std::string, Reference> reference_;
  std::string layer_;                 // whose prefix results `cached_` holds
  CutAt at_ = CutAt::kLayerInput;     // and where they were cut
  std::map<std::pair<std::string, CutAt>, std::string> refused_;  // cuts that failed: why
  std::unique_ptr<ForwardCut> cut_;
  std::vector<c10::IValue> cached_;   // one per batch
  std::string mode_;
};

}  // namespace lithe::host
