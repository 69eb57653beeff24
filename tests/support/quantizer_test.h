#pragma once
// Helpers shared by the quantizer plugins' unit tests.

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/quantizer.h"
#include "lithe/sdk/registry.h"
#include "support/fake_context.h"
#include "support/paths.h"
#include "support/plugin_test.h"

namespace lithe::test {

/// {"quant_types": types, "quant_bits": bits}: a quantizer config entry's JSON (`bits` an int,
/// or an object giving the bits of each type).
inline nlohmann::ordered_json quant_entry(const std::vector<std::string>& types,
                                          const nlohmann::ordered_json& bits) {
  return {{"quant_types", types}, {"quant_bits", bits}};
}

/// A layer with `weight` selected by `entry` (as config_list entry 0): a "Linear" layer, or a
/// weightless "ReLU" when `weight` is undefined.
inline std::unique_ptr<sdk::LayerView> quant_layer(const at::Tensor& weight,
                                                   const nlohmann::ordered_json& entry,
                                                   const std::string& name = "fc") {
  return std::make_unique<sdk::LayerView>(0, name, weight.defined() ? "Linear" : "ReLU", weight,
                                          std::nullopt, config_entry(entry, 0));
}

/// quant_layer for each of `names`, in order, over the weight "<name>.weight" of the conformance
/// model `model`'s state dict (tests/data/nni/models/<model>_state.pt), all selected by
/// `entry`.
inline GoldenLayers golden_quant_layers(const std::string& model,
                                        const std::vector<std::string>& names,
                                        const nlohmann::ordered_json& entry) {
  const auto state =
      load_tensor_dict(nni_data_dir() / "models" / (model + "_state.pt"));
  GoldenLayers out;
  for (const std::string& name : names) {
    out.owned.push_back(quant_layer(state.at(name + ".weight"), entry, name));
    out.views.push_back(out.owned.back().get());
  }
  return out;
}

/// The quantizer `name` (options {}), built by a registry holding the algorithms of
/// `register_algorithms` and attached to `layers`, as the host does.
struct AttachedQuantizer {
  AttachedQuantizer(void (*register_algorithms)(sdk::Registry&), const std::string& name,
                    std::vector<sdk::LayerView*> layers) {
    register_algorithms(registry);
    quantizer = registry.make_quantizer(name, options_json(nlohmann::ordered_json::object()));
    context = std::make_unique<FakeContext>(std::move(layers), registry);
    quantizer->attach(*context);
  }
  host::PluginRegistry registry;
  /// Lives as long as the quantizer, as the host's context does (quantizers may keep it).
  std::unique_ptr<FakeContext> context;
  std::unique_ptr<sdk::Quantizer> quantizer;
};

/// The one-element tensor attribute `key` of `layer` (its live state), as a float.
inline float attribute_value(const sdk::LayerView& layer, const std::string& key) {
  return sdk::tensor_attribute(layer, key).item<float>();
}

}  // namespace lithe::test
