#pragma once
// Helpers shared by the plugins' unit tests.

#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/options.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::test {

/// A config_list entry as the host hands it to validate_config (path /config_list/<index>).
inline sdk::Options config_entry(const nlohmann::ordered_json& json, int index) {
  return sdk::options_from_json(json, "/config_list/" + std::to_string(index));
}

/// {"sparsity": s, "op_types": [op_type]} as config_list entry 0.
inline sdk::Options sparsity_entry(double sparsity, const std::string& op_type = "Conv2d") {
  return config_entry({{"sparsity", sparsity}, {"op_types", {op_type}}}, 0);
}

/// An algorithm's "options" object as the host hands it to a factory (path /options).
inline sdk::Options options_json(const nlohmann::ordered_json& json) {
  return sdk::options_from_json(json, "/options");
}

/// Conv2d LayerViews over the layers of a golden case's `results.masks` (in its order), with
/// weights and biases from the model's state dict and each layer's recorded config.
struct GoldenLayers {
  std::vector<std::unique_ptr<sdk::LayerView>> owned;
  std::vector<sdk::LayerView*> views;
};
inline GoldenLayers golden_conv_layers(const nlohmann::ordered_json& masks,
                                       const std::map<std::string, at::Tensor>& state) {
  GoldenLayers out;
  for (const auto& [layer, info] : masks.items()) {
    const auto bias = state.find(layer + ".bias");
    out.owned.push_back(std::make_unique<sdk::LayerView>(
        static_cast<int64_t>(out.owned.size()), layer, "Conv2d", state.at(layer + ".weight"),
        bias == state.end() ? std::nullopt : std::optional<at::Tensor>(bias->second),
        sdk::options_from_json(info.at("config"), "/config_list/0")));
    out.views.push_back(out.owned.back().get());
  }
  return out;
}

/// Filters whose weight mask [F, ...] is entirely zero, as a bool tensor [F].
inline at::Tensor pruned_filters(const at::Tensor& weight_mask) {
  return weight_mask.reshape({weight_mask.size(0), -1}).eq(0).all(1);
}

/// The indices of pruned_filters(weight_mask), ascending (NNI's `pruned_filters` lists).
inline std::vector<int64_t> pruned_filter_indices(const at::Tensor& weight_mask) {
  const at::Tensor idx = pruned_filters(weight_mask).nonzero().flatten().contiguous();
  return {idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel()};
}

/// The error code thrown by `f` (fails the test when nothing is thrown).
inline sdk::Errc error_code(const std::function<void()>& f) {
  try {
    f();
  } catch (const sdk::Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no sdk::Error thrown";
  return sdk::Errc::kInternal;
}

/// The tensors of a torch pickle dict (a golden tensors.pt or a model's _state.pt).
inline std::map<std::string, at::Tensor> load_tensor_dict(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::map<std::string, at::Tensor> out;
  for (const auto& item : torch::jit::pickle_load(bytes).toGenericDict()) {
    if (item.value().isTensor()) {
      out[item.key().toStringRef()] = item.value().toTensor();
    }
  }
  return out;
}

}  // namespace lithe::test
