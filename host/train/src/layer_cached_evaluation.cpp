#include "lithe/host/train/layer_cached_evaluation.h"

#include <torch/torch.h>

#include <algorithm>

#include "evaluation_tally.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

// Bytes held by the tensors of one prefix result (shared storage counted each time: an upper
// bound).
std::size_t tensor_bytes(const c10::IValue& value) {
  std::size_t bytes = 0;
  if (value.isTensor()) {
    bytes += value.toTensor().nbytes();
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      bytes += tensor_bytes(element);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      bytes += tensor_bytes(element);
    }
  }
  return bytes;
}

// Puts `reference` into a layer's live weight and bias for its lifetime, then the values they
// had back (the prefix of a cut after the layer computes the reference's output).
class ReferenceWeights {
 public:
  ReferenceWeights(const ModuleRecord& layer, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias)
      : layer_(layer), weight_(layer.weight->detach().clone()) {
    layer.weight->detach().copy_(weight);
    if (bias && layer.bias) {
      bias_ = layer.bias->detach().clone();
      layer.bias->detach().copy_(*bias);
    }
  }
  ~ReferenceWeights() {
    layer_.weight->detach().copy_(weight_);
    if (bias_.defined()) {
      layer_.bias->detach().copy_(bias_);
    }
  }
  ReferenceWeights(const ReferenceWeights&) = delete;
  ReferenceWeights& operator=(const ReferenceWeights&) = delete;

 private:
  const ModuleRecord& layer_;
  at::Tensor weight_;
  at::Tensor bias_;
};

}  // namespace

LayerCachedEvaluation::LayerCachedEvaluation(Model& model, const Dataset& data,
                                             int64_t batch_size, std::size_t cache_bytes)
    : model_(model), data_(data), batch_size_(batch_size), cache_bytes_(cache_bytes) {
  LITHE_CHECK(batch_size > 0, sdk::Errc::kInvalidConfig, "batch size must be > 0, got ",
              batch_size);
  for (const ModuleRecord& m : model.modules()) {
    if (m.weight.has_value()) {
      reference_[m.name] = {m.weight->detach().clone(),
                            m.bias ? std::optional<at::Tensor>(m.bias->detach().clone())
                                   : std::nullopt};
    }
  }
}

std::optional<LayerCachedEvaluation::ChannelEdit> LayerCachedEvaluation::channel_edit(
    const ModuleRecord& layer) const {
  const auto found = reference_.find(layer.name);
  if (found == reference_.end()) {
    return std::nullopt;
  }
  const Reference& reference = found->second;
  const at::Tensor weight = layer.weight->detach();
  if (weight.dim() < 2 || !weight.sizes().equals(reference.weight.sizes()) ||
      layer.bias.has_value() != reference.bias.has_value()) {
    return std::nullopt;
  }
  const int64_t channels = weight.size(0);
  const at::Tensor rows = weight.reshape({channels, -1});
  at::Tensor keep = rows.eq(reference.weight.reshape({channels, -1})).all(1);
  const at::Tensor zeroed = rows.eq(0).all(1);
  at::Tensor fill = at::zeros({channels}, weight.options());
  if (layer.bias) {
    const at::Tensor bias = layer.bias->detach();
    keep = keep.logical_and(bias.eq(*reference.bias));
    fill = bias.clone();  // a zeroed row's output is its bias exactly (sum of zeros + bias)
  }
  if (!keep.logical_or(zeroed).all().item<bool>()) {
    return std::nullopt;  // some row changed otherwise: run the layer
  }
  return ChannelEdit{keep, fill};
}

bool LayerCachedEvaluation::prepare(const ModuleRecord& layer, CutAt at) {
  if (layer.name == layer_ && at == at_ && cut_ != nullptr) {
    return true;
  }
  const auto refused = refused_.find({layer.name, at});
  if (refused != refused_.end()) {
    mode_ = refused->second;
    return false;
  }
  layer_.clear();
  cached_.clear();
  cut_ = model_.cut_forward(layer.name, at, &mode_);
  const auto refuse = [&] {
    refused_[{layer.name, at}] = mode_;
    cached_.clear();
    cut_.reset();
    return false;
  };
  if (cut_ == nullptr) {
    return refuse();
  }
  std::optional<ReferenceWeights> reference;
  if (at == CutAt::kLayerOutput) {
    const Reference& r = reference_.at(layer.name);
    reference.emplace(layer, r.weight, r.bias);
  }
  const UnobservedForwards unobserved;
  at::NoGradGuard no_grad;
  std::size_t bytes = 0;
  for (int64_t start = 0; start < data_.size(); start += batch_size_) {
    const int64_t n = std::min(batch_size_, data_.size() - start);
    cached_.push_back(cut_->prefix(data_.images.narrow(0, start, n)));
    bytes += tensor_bytes(cached_.back());
    if (bytes > cache_bytes_) {
      mode_ = "what the forward computes " +
              std::string(at == CutAt::kLayerOutput ? "up to" : "before") + " '" + layer.name +
              "' passes the " + std::to_string(cache_bytes_) + " bytes kept at most";
      return refuse();
    }
  }
  layer_ = layer.name;
  at_ = at;
  return true;
}

EvalResult LayerCachedEvaluation::run_suffix(const std::optional<ChannelEdit>& edit) {
  const UnobservedForwards unobserved;
  at::NoGradGuard no_grad;
  detail::EvalTally tally;
  const std::optional<LayerOutputSlot> slot = cut_->layer_output();
  for (size_t b = 0; b < cached_.size(); ++b) {
    const int64_t start = static_cast<int64_t>(b) * batch_size_;
    const int64_t n = std::min(batch_size_, data_.size() - start);
    c10::IValue boundary = cached_[b];
    if (edit && slot) {
      std::vector<c10::IValue> elements = cached_[b].toTupleRef().elements().vec();
      const at::Tensor output = elements.at(slot->index).toTensor();
      std::vector<int64_t> shape(static_cast<size_t>(output.dim()), 1);
      const int64_t dim = slot->channel_dim < 0 ? output.dim() + slot->channel_dim
                                                : slot->channel_dim;
      shape.at(static_cast<size_t>(dim)) = edit->keep.size(0);
      elements[slot->index] = at::where(edit->keep.view(shape), output,
                                        edit->fill.to(output.scalar_type()).view(shape));
      boundary = c10::ivalue::Tuple::create(std::move(elements));
    }
    tally.add(cut_->suffix(boundary), data_.labels.narrow(0, start, n));
  }
  return tally.result(data_.size());
}

EvalResult LayerCachedEvaluation::evaluate(const std::string& layer) {
  if (layer.empty()) {
    layer_.clear();
    cut_.reset();
    cached_.clear();
    mode_ = "no layer named";
    return host::evaluate(model_, data_, batch_size_);
  }
  const std::vector<ModuleRecord>& modules = model_.modules();
  const auto record = std::find_if(modules.begin(), modules.end(),
                                   [&](const ModuleRecord& m) { return m.name == layer; });
  LITHE_CHECK(record != modules.end() && record->weight.has_value(),
              sdk::Errc::kInvalidConfig, "the model has no weighted module '", layer, "'");
  // Whole output channels zeroed (or nothing changed): from the layer's kept output.
  const std::optional<ChannelEdit> edit = channel_edit(*record);
  if (edit && prepare(*record, CutAt::kLayerOutput)) {
    mode_ = "cached after the layer";
    return run_suffix(edit);
  }
  if (prepare(*record, CutAt::kLayerInput)) {
    mode_ = "cached before the layer";
    return run_suffix(std::nullopt);
  }
  return host::evaluate(model_, data_, batch_size_);
}

}  // namespace lithe::host
