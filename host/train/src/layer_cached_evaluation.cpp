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

}  // namespace

LayerCachedEvaluation::LayerCachedEvaluation(Model& model, const Dataset& data,
                                             int64_t batch_size, std::size_t cache_bytes)
    : model_(model), data_(data), batch_size_(batch_size), cache_bytes_(cache_bytes) {
  LITHE_CHECK(batch_size > 0, sdk::Errc::kInvalidConfig, "batch size must be > 0, got ",
              batch_size);
}

bool LayerCachedEvaluation::prepare(const std::string& layer) {
  if (layer == layer_) {
    return cut_ != nullptr;
  }
  layer_ = layer;
  cached_.clear();
  cut_ = model_.cut_forward(layer, &mode_);
  if (cut_ == nullptr) {
    return false;
  }
  const UnobservedForwards unobserved;
  at::NoGradGuard no_grad;
  std::size_t bytes = 0;
  for (int64_t start = 0; start < data_.size(); start += batch_size_) {
    const int64_t n = std::min(batch_size_, data_.size() - start);
    cached_.push_back(cut_->prefix(data_.images.narrow(0, start, n)));
    bytes += tensor_bytes(cached_.back());
    if (bytes > cache_bytes_) {
      mode_ = "what the forward computes before '" + layer + "' passes the " +
              std::to_string(cache_bytes_) + " bytes kept at most";
      cached_.clear();
      cut_.reset();
      return false;
    }
  }
  return true;
}

EvalResult LayerCachedEvaluation::evaluate(const std::string& layer) {
  if (layer.empty()) {
    layer_.clear();
    cut_.reset();
    cached_.clear();
    mode_ = "no layer named";
    return host::evaluate(model_, data_, batch_size_);
  }
  if (!prepare(layer)) {
    return host::evaluate(model_, data_, batch_size_);
  }
  mode_ = "cached";
  const UnobservedForwards unobserved;
  at::NoGradGuard no_grad;
  detail::EvalTally tally;
  for (size_t b = 0; b < cached_.size(); ++b) {
    const int64_t start = static_cast<int64_t>(b) * batch_size_;
    const int64_t n = std::min(batch_size_, data_.size() - start);
    tally.add(cut_->suffix(cached_[b]), data_.labels.narrow(0, start, n));
  }
  return tally.result(data_.size());
}

}  // namespace lithe::host
