#include "lithe/sdk/layer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <functional>

#include "lithe/sdk/error.h"

namespace lithe::sdk {

Masks Masks::keep_all(const LayerView& layer) {
  const auto options = layer.weight().options().dtype(at::kFloat);
  Masks masks;
  masks.weight = at::ones(layer.weight().sizes(), options);
  if (layer.bias().has_value()) {
    masks.bias = at::ones(layer.bias()->sizes(), options);
  }
  return masks;
}

Masks Masks::clone() const {
  Masks out;
  out.weight = weight.clone();
  if (bias.has_value()) {
    out.bias = bias->clone();
  }
  return out;
}

LayerView::LayerView(int64_t index, std::string name, std::string op_type, at::Tensor weight,
                     std::optional<at::Tensor> bias, Options config)
    : index_(index),
      name_(std::move(name)),
      op_type_(std::move(op_type)),
      weight_(std::move(weight)),
      bias_(std::move(bias)),
      config_(std::move(config)) {
  if (weight_.defined()) {
    masks_ = Masks::keep_all(*this);
  }
}

LayerView::~LayerView() = default;

namespace {

// How many entries of `mask` (float32) are neither 0 nor 1: NaN and infinities count. One
// parallel pass on CPU, the host's common case; other devices use ATen.
int64_t count_non_binary(const at::Tensor& mask) {
  if (!mask.is_cpu()) {
    return mask.ne(0).logical_and(mask.ne(1)).sum().item<int64_t>();
  }
  const at::Tensor dense = mask.contiguous();
  const float* data = dense.data_ptr<float>();
  return at::parallel_reduce(
      0, dense.numel(), int64_t{1} << 16, int64_t{0},
      [data](int64_t begin, int64_t end, int64_t count) {
        for (int64_t i = begin; i < end; ++i) {
          count += static_cast<int64_t>(data[i] != 0.0f && data[i] != 1.0f);
        }
        return count;
      },
      std::plus<int64_t>());
}

// A returned mask multiplies the weight: anything but 0/1 would rescale it or write NaN into it,
// and the run would end with exit 0 and a damaged model. A plugin that does so has a bug.
at::Tensor binary_mask(const at::Tensor& mask, const std::string& layer, const char* which) {
  const at::ScalarType type = mask.scalar_type();
  LITHE_CHECK(mask.layout() == at::kStrided &&
                  (type == at::kBool || at::isIntegralType(type, /*includeBool=*/false) ||
                   at::isFloatingType(type)),
              Errc::kDeviceMismatch, "layer '", layer, "': the ", which,
              " mask must be a dense bool, integer or floating tensor, got ", type, " (",
              mask.layout(), ")");
  at::Tensor out = mask.to(at::kFloat);
  if (type == at::kBool || out.numel() == 0) {
    return out;
  }
  const int64_t bad = count_non_binary(out);
  if (bad > 0) {
    const at::Tensor flat = out.flatten();
    const int64_t first = flat.ne(0).logical_and(flat.ne(1)).nonzero()[0][0].item<int64_t>();
    LITHE_CHECK(false, Errc::kInternal, "layer '", layer, "': the ", which,
                " mask must hold only 0 and 1 (it multiplies the ", which, "), but ", bad, " of ",
                out.numel(), " entries are other values (e.g. ", flat[first].item<float>(),
                " at flat index ", first, "); this is a bug in the algorithm");
  }
  return out;
}

}  // namespace

void LayerView::set_masks(Masks masks) {
  LITHE_CHECK(masks.weight.defined() && masks.weight.sizes() == weight_.sizes(),
              Errc::kShapeMismatch, "layer '", name_, "': weight mask must have the weight's shape ",
              weight_.sizes(), ", got ",
              masks.weight.defined() ? c10::str(masks.weight.sizes()) : std::string("none"));
  if (bias_.has_value()) {
    if (!masks.bias.has_value()) {
      masks.bias = masks_.bias;  // keep the current bias mask (NNI leaves it untouched)
    }
    LITHE_CHECK(masks.bias->defined() && masks.bias->sizes() == bias_->sizes(),
                Errc::kShapeMismatch, "layer '", name_, "': bias mask must have the bias's shape ",
                bias_->sizes(), ", got ",
                masks.bias->defined() ? c10::str(masks.bias->sizes()) : std::string("none"));
  } else {
    LITHE_CHECK(!masks.bias.has_value(), Errc::kShapeMismatch, "layer '", name_,
                "' has no bias, but a bias mask of shape ", c10::str(masks.bias->sizes()),
                " was given");
  }
  LITHE_CHECK(masks.weight.device() == weight_.device(), Errc::kDeviceMismatch, "layer '", name_,
              "': mask on ", masks.weight.device(), " but weight on ", weight_.device());
  LITHE_CHECK(!masks.bias.has_value() || masks.bias->device() == weight_.device(),
              Errc::kDeviceMismatch, "layer '", name_, "': bias mask on ", masks.bias->device(),
              " but weight on ", weight_.device());
  masks.weight = binary_mask(masks.weight, name_, "weight");
  if (masks.bias.has_value()) {
    masks.bias = binary_mask(*masks.bias, name_, "bias");
  }
  masks_ = std::move(masks);
}

void LayerView::set_attribute(const std::string& key, AttributeValue value) {
  attributes_[key] = std::move(value);
}

const AttributeValue* LayerView::attribute(const std::string& key) const {
  const auto it = attributes_.find(key);
  return it == attributes_.end() ? nullptr : &it->second;
}

std::vector<std::string> LayerView::attribute_keys() const {
  std::vector<std::string> keys;
  for (const auto& item : attributes_) {
    keys.push_back(item.first);
  }
  return keys;
}

}  // namespace lithe::sdk
