// The quantization framework's SDK side: the one autograd adapter (apply_quant_grad), the
// Quantizer defaults, and the config rules every quantizer shares (quant_types, quant_bits).
#include "lithe/sdk/quantizer.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <set>

#include "lithe/sdk/error.h"
#include "lithe/sdk/option_spec.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::sdk {
namespace {

std::optional<QuantType> parse_quant_type(const std::string& name) {
  if (name == "input") return QuantType::kInput;
  if (name == "weight") return QuantType::kWeight;
  if (name == "output") return QuantType::kOutput;
  return std::nullopt;
}

// Forward: the quantizer's math without autograd (Function::apply disables it); backward: the
// quantizer's QuantGrad. The quantizer and layer outlive the graph: the host's session owns
// both and a backward never runs after the session that built the forward.
struct QuantFunction : public torch::autograd::Function<QuantFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t quantizer, int64_t type, int64_t layer, bool training) {
    auto* q = reinterpret_cast<Quantizer*>(quantizer);
    auto* view = reinterpret_cast<LayerView*>(layer);
    const auto qtype = static_cast<QuantType>(type);
    ctx->save_for_backward({x});
    ctx->saved_data["quantizer"] = quantizer;
    ctx->saved_data["type"] = type;
    ctx->saved_data["layer"] = layer;
    at::Tensor out;
    switch (qtype) {
      case QuantType::kInput: out = q->quantize_input(x, *view, training); break;
      case QuantType::kWeight: out = q->quantize_weight(x, *view, training); break;
      case QuantType::kOutput: out = q->quantize_output(x, *view, training); break;
    }
    LITHE_CHECK(out.defined() && out.sizes() == x.sizes(), Errc::kShapeMismatch, "layer '",
                view->name(), "': quantize_", quant_type_name(qtype), " must return a tensor of ",
                "shape ", x.sizes(), ", got ",
                out.defined() ? c10::str(out.sizes()) : std::string("an undefined tensor"));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    auto* q = reinterpret_cast<Quantizer*>(ctx->saved_data["quantizer"].toInt());
    auto* view = reinterpret_cast<LayerView*>(ctx->saved_data["layer"].toInt());
    const auto qtype = static_cast<QuantType>(ctx->saved_data["type"].toInt());
    at::Tensor grad = q->quant_grad().backward(x, grads[0], qtype, *view);
    LITHE_CHECK(grad.defined() && grad.sizes() == x.sizes(), Errc::kShapeMismatch, "layer '",
                view->name(), "': QuantGrad::backward for ", quant_type_name(qtype),
                " must return a gradient of shape ", x.sizes());
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

const QuantGrad& straight_through() {
  static const QuantGrad* instance = new QuantGrad();
  return *instance;
}

}  // namespace

const char* quant_type_name(QuantType type) {
  switch (type) {
    case QuantType::kInput: return "input";
    case QuantType::kWeight: return "weight";
    case QuantType::kOutput: return "output";
  }
  return "unknown";
}

QuantGrad::~QuantGrad() = default;
at::Tensor QuantGrad::backward(const at::Tensor&, const at::Tensor& grad_output, QuantType,
                               const LayerView&) const {
  return grad_output;
}

Quantizer::~Quantizer() = default;
void Quantizer::attach(CompressionContext&) {}
at::Tensor Quantizer::quantize_weight(const at::Tensor&, LayerView& layer, bool) {
  throw Error(Errc::kUnsupported, "layer '" + layer.name() + "': this quantizer does not quantize weights");
}
at::Tensor Quantizer::quantize_input(const at::Tensor&, LayerView& layer, bool) {
  throw Error(Errc::kUnsupported, "layer '" + layer.name() + "': this quantizer does not quantize inputs");
}
at::Tensor Quantizer::quantize_output(const at::Tensor&, LayerView& layer, bool) {
  throw Error(Errc::kUnsupported, "layer '" + layer.name() + "': this quantizer does not quantize outputs");
}
const QuantGrad& Quantizer::quant_grad() const { return straight_through(); }
bool Quantizer::records_autograd() const { return false; }
std::vector<at::Tensor> Quantizer::parameters() { return {}; }
void Quantizer::update_epoch(int64_t) {}
void Quantizer::step() {}

at::Tensor apply_quant_grad(Quantizer& quantizer, const at::Tensor& x, QuantType type,
                            LayerView& layer, bool training) {
  return QuantFunction::apply(x, reinterpret_cast<int64_t>(&quantizer),
                              static_cast<int64_t>(type), reinterpret_cast<int64_t>(&layer),
                              training);
}

std::vector<QuantType> quant_types(const Options& entry) {
  std::vector<QuantType> out;
  for (const std::string& name : entry.require<std::vector<std::string>>("quant_types")) {
    const std::optional<QuantType> type = parse_quant_type(name);
    LITHE_CHECK(type.has_value(), Errc::kInvalidConfig, json_pointer_append(entry.path(), "quant_types"),
                ": unknown quant type '", name, "' (expected \"input\", \"weight\" or \"output\")");
    out.push_back(*type);
  }
  return out;
}

void check_quant_config(const Options& entry) {
  const std::string types_path = json_pointer_append(entry.path(), "quant_types");
  const std::string bits_path = json_pointer_append(entry.path(), "quant_bits");
  LITHE_CHECK(entry.has("quant_types"), Errc::kInvalidConfig, types_path,
              ": required key missing (a list of \"input\", \"weight\", \"output\")");
  const nlohmann::ordered_json& json = options_json(entry);
  LITHE_CHECK(json.at("quant_types").is_array(), Errc::kInvalidConfig, types_path,
              ": must be a list of \"input\", \"weight\", \"output\", got ",
              json.at("quant_types").dump());
  const std::vector<QuantType> types = quant_types(entry);
  LITHE_CHECK(!types.empty(), Errc::kInvalidConfig, types_path,
              ": must name at least one of \"input\", \"weight\", \"output\", got []");
  std::set<QuantType> seen;
  for (QuantType type : types) {
    LITHE_CHECK(seen.insert(type).second, Errc::kInvalidConfig, types_path, ": \"",
                quant_type_name(type), "\" is listed twice");
  }

  LITHE_CHECK(entry.has("quant_bits"), Errc::kInvalidConfig, bits_path,
              ": required key missing (an integer in 1..32, or an object per quant type)");
  const nlohmann::ordered_json& bits = json.at("quant_bits");
  auto check_bits = [](const nlohmann::ordered_json& value, const std::string& path) {
    LITHE_CHECK(value.is_number_integer(), Errc::kInvalidConfig, path,
                ": bits must be an integer in 1..32, got ", value.dump());
    const int64_t b = value.get<int64_t>();
    // The bounds are the declaration's (quantizer_keys), which `lithe plugins --describe` shows.
    const OptionSpec& declared = *quantizer_keys().find("quant_bits");
    LITHE_CHECK(b >= *declared.minimum && b <= *declared.maximum, Errc::kInvalidConfig, path,
                ": bits must be in 1..32, got ", b);
  };
  if (bits.is_object()) {
    for (const auto& item : bits.items()) {
      const std::optional<QuantType> type = parse_quant_type(item.key());
      const std::string path = json_pointer_append(bits_path, item.key());
      LITHE_CHECK(type.has_value(), Errc::kInvalidConfig, path, ": unknown quant type '",
                  item.key(), "' (expected \"input\", \"weight\" or \"output\")");
      LITHE_CHECK(seen.count(*type) != 0, Errc::kInvalidConfig, path, ": gives bits for \"",
                  item.key(), "\", which is not in quant_types ", json.at("quant_types").dump());
      check_bits(item.value(), path);
    }
    for (QuantType type : types) {
      LITHE_CHECK(bits.contains(quant_type_name(type)), Errc::kInvalidConfig, bits_path,
                  ": gives no bits for \"", quant_type_name(type), "\", which is in quant_types");
    }
  } else {
    check_bits(bits, bits_path);
  }
  entry.mark_read("quant_bits");  // every key of an object form was checked above
}

void require_quant_types(const Options& entry, std::initializer_list<QuantType> supported,
                         const std::string& algorithm) {
  for (QuantType type : quant_types(entry)) {
    if (std::find(supported.begin(), supported.end(), type) == supported.end()) {
      std::string list;
      for (QuantType s : supported) {
        list += (list.empty() ? "\"" : ", \"") + std::string(quant_type_name(s)) + "\"";
      }
      LITHE_CHECK(false, Errc::kInvalidConfig, json_pointer_append(entry.path(), "quant_types"),
                  ": ", algorithm, " does not quantize \"", quant_type_name(type),
                  "\" (supported: ", list, ")");
    }
  }
}

int64_t quant_bits(const Options& entry, QuantType type) {
  const nlohmann::ordered_json& json = options_json(entry);
  const std::string bits_path = json_pointer_append(entry.path(), "quant_bits");
  LITHE_CHECK(json.contains("quant_bits"), Errc::kInvalidConfig, bits_path, ": missing");
  const nlohmann::ordered_json& bits = json.at("quant_bits");
  if (bits.is_number_integer()) {
    return bits.get<int64_t>();
  }
  const char* name = quant_type_name(type);
  LITHE_CHECK(bits.is_object() && bits.contains(name) && bits.at(name).is_number_integer(),
              Errc::kInvalidConfig, bits_path, ": gives no integer bits for \"", name, "\", got ",
              bits.dump());
  return bits.at(name).get<int64_t>();
}

std::string quant_bits_path(const Options& entry, QuantType type) {
  const std::string bits_path = json_pointer_append(entry.path(), "quant_bits");
  const nlohmann::ordered_json& json = options_json(entry);
  if (json.contains("quant_bits") && json.at("quant_bits").is_object()) {
    return json_pointer_append(bits_path, quant_type_name(type));
  }
  return bits_path;
}

std::string quant_state_key(QuantType type, const std::string& field) {
  return std::string(quant_type_name(type)) + "_" + field;
}

at::Tensor ensure_tensor_attribute(LayerView& layer, const std::string& key,
                                   const at::Tensor& initial) {
  if (const AttributeValue* existing = layer.attribute(key)) {
    const auto* tensor = std::get_if<at::Tensor>(existing);
    LITHE_CHECK(tensor != nullptr && tensor->defined(), Errc::kInvalidModel, "layer '",
                layer.name(), "': attribute '", key, "' exists but is not a tensor");
    LITHE_CHECK(tensor->sizes() == initial.sizes() && tensor->scalar_type() == initial.scalar_type(),
                Errc::kInvalidModel, "layer '", layer.name(), "': saved quantization state '", key,
                "' has shape ", tensor->sizes(), " and dtype ", tensor->scalar_type(),
                ", expected shape ", initial.sizes(), " and dtype ", initial.scalar_type());
    return *tensor;
  }
  layer.set_attribute(key, initial);
  return initial;
}

at::Tensor tensor_attribute(const LayerView& layer, const std::string& key) {
  const AttributeValue* value = layer.attribute(key);
  const at::Tensor* tensor = value != nullptr ? std::get_if<at::Tensor>(value) : nullptr;
  LITHE_CHECK(tensor != nullptr && tensor->defined(), Errc::kInternal, "layer '", layer.name(),
              "': quantization state '", key, "' is missing (read before attach()?)");
  return *tensor;
}

}  // namespace lithe::sdk
