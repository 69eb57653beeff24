#include "lithe/sdk/layer.h"

#include <ATen/ATen.h>

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
  masks.weight = masks.weight.to(at::kFloat);
  if (masks.bias.has_value()) {
    masks.bias = masks.bias->to(at::kFloat);
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
