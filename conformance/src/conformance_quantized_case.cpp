// Shared helpers of the quantizer replays (conformance_quantizers.cpp, conformance_qat.cpp):
// starting a quantization session on a golden case, reading its state and recordings, and
// describing bitwise differences.
#include <torch/torch.h>

#include "conformance_case.h"
#include "lithe/sdk/error.h"

namespace lithe::host::conformance_detail {

QuantizedCase start_quantized_case(const CaseContext& c, const PluginRegistry& registry,
                                   const std::string& algorithm) {
  QuantizedCase q;
  q.module = load_case_model(c);
  q.model = make_torchscript_model(q.module);
  q.session = std::make_unique<QuantizationSession>(*q.model, registry,
                                                    case_compression_config(c, algorithm));
  q.session->compress();
  q.session->set_recording(true);

  const json& wrappers = c.summary.at("results").at("wrappers");
  const std::vector<QuantLayerReport> layers = q.session->report();
  for (const QuantLayerReport& layer : layers) {
    if (!wrappers.contains(layer.name)) {
      fail("Lithe quantizes layer '" + layer.name + "', which NNI did not wrap");
    }
    const json& config = wrappers.at(layer.name).at("config");
    const json& nni_types = config.at("quant_types");
    if (nni_types.size() != layer.types.size()) {
      fail("layer '" + layer.name + "': NNI quantizes " + nni_types.dump() + ", Lithe " +
           std::to_string(layer.types.size()) + " types");
    }
    for (size_t i = 0; i < layer.types.size(); ++i) {
      const std::string name = sdk::quant_type_name(layer.types[i].type);
      if (nni_types.at(i).get<std::string>() != name) {
        fail("layer '" + layer.name + "': NNI quantizes " + nni_types.dump() + ", Lithe has '" +
             name + "' in position " + std::to_string(i));
      }
      if (nni_quant_bits(config, layer.types[i].type) != layer.types[i].bits) {
        fail("layer '" + layer.name + "': " + name + " has " +
             std::to_string(layer.types[i].bits) + " bits, NNI " +
             std::to_string(nni_quant_bits(config, layer.types[i].type)));
      }
    }
  }
  for (const auto& item : wrappers.items()) {
    const bool ours = std::any_of(layers.begin(), layers.end(),
                                  [&](const QuantLayerReport& l) { return l.name == item.key(); });
    if (!ours) {
      fail("NNI wrapped layer '" + item.key() + "', which Lithe does not quantize");
    }
  }
  return q;
}

int64_t nni_quant_bits(const json& layer_config, sdk::QuantType type) {
  const json& bits = layer_config.at("quant_bits");
  if (bits.is_number_integer()) {
    return bits.get<int64_t>();
  }
  return bits.value(sdk::quant_type_name(type), int64_t{-1});
}

at::Tensor layer_state(QuantizationSession& session, const std::string& layer,
                       const std::string& key) {
  for (sdk::LayerView* view : session.layers()) {
    if (view->name() != layer) {
      continue;
    }
    const sdk::AttributeValue* value = view->attribute(key);
    const at::Tensor* state = value != nullptr ? std::get_if<at::Tensor>(value) : nullptr;
    if (state == nullptr || !state->defined()) {
      fail("layer '" + layer + "' has no state '" + key + "'");
    }
    return *state;
  }
  fail("no quantized layer '" + layer + "'");
}

const QuantRecord& record_of(const QuantizationSession& session, const std::string& layer,
                             sdk::QuantType type) {
  const QuantRecord* record = session.last_record(layer, type);
  if (record == nullptr) {
    fail("layer '" + layer + "': the forward did not quantize its " + sdk::quant_type_name(type));
  }
  return *record;
}

std::string bitwise_difference(const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.sizes() != expected.sizes()) {
    return "shape " + c10::str(actual.sizes()) + " vs " + c10::str(expected.sizes());
  }
  const at::Tensor a = actual.to(at::kDouble);
  const at::Tensor b = expected.to(at::kDouble);
  const at::Tensor differ = a.ne(b);
  return std::to_string(differ.sum().item<int64_t>()) + " of " + std::to_string(a.numel()) +
         " values differ, max |diff| " + c10::str((a - b).abs().max().item<double>());
}

}  // namespace lithe::host::conformance_detail
