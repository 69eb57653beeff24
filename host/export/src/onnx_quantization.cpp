#include "onnx_quantization.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "lithe/host/session/quantization_session.h"
#include "lithe/sdk/error.h"

namespace lithe::host::onnx_quantization {
namespace {

namespace jit = torch::jit;

std::string buffer_name(const std::string& key) { return kStateBufferPrefix + key; }

// The buffer `lithe_q_<key>` of `module`, or an undefined tensor when absent or empty (an empty
// tensor marks "no state" in instances of a shared class type).
at::Tensor state_buffer(const jit::Module& module, const std::string& key) {
  const std::string name = buffer_name(key);
  if (!module.hasattr(name)) {
    return {};
  }
  const c10::IValue value = module.attr(name);
  if (!value.isTensor() || value.toTensor().numel() == 0) {
    return {};
  }
  return value.toTensor().detach().to(at::kCPU).to(at::kFloat).contiguous();
}

[[noreturn]] void refuse(const std::string& failure, const std::string& layer,
                         sdk::QuantType type, const std::string& algorithm,
                         const std::string& why) {
  throw sdk::Error(sdk::Errc::kUnsupported,
                   failure + ": layer '" + layer + "' quantizes its " +
                       sdk::quant_type_name(type) + " with '" + algorithm + "', " + why +
                       "; nothing was written");
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

bool integral(double v) { return std::isfinite(v) && v == std::nearbyint(v); }

std::optional<LinearGrid> read_grid(const std::string& failure, const jit::Module& module,
                                    const std::string& layer, sdk::QuantType type,
                                    const std::string& algorithm, int64_t bits) {
  const auto key = [&](const char* field) { return sdk::quant_state_key(type, field); };
  // Known from the configuration, so refused even while the grid is still empty (before any
  // range was observed): a pre-flight export then fails before the training, not after it.
  if (bits > 8) {
    refuse(failure, layer, type, algorithm,
           "with " + std::to_string(bits) +
               " bits, which do not fit 8-bit codes (ONNX's QuantizeLinear, int8 kernels); "
               "quantize with at most 8 bits");
  }
  const at::Tensor scale = state_buffer(module, key("scale"));
  const at::Tensor quant_min = state_buffer(module, key("quant_min"));
  const at::Tensor quant_max = state_buffer(module, key("quant_max"));
  if (!scale.defined() || !quant_min.defined() || !quant_max.defined()) {
    refuse(failure, layer, type, algorithm,
           "which declares no linear grid (buffers " + buffer_name(key("scale")) + ", " +
               buffer_name(key("quant_min")) + " and " + buffer_name(key("quant_max")) +
               "; see lithe/sdk/quantizer.h), so it has no QuantizeLinear/DequantizeLinear form" +
               (scale.defined() ? " (a model saved before quantizers declared grids: quantize "
                                  "it again to export it)"
                                : ""));
  }
  if (quant_min.numel() != 1 || quant_max.numel() != 1) {
    refuse(failure, layer, type, algorithm,
           "its grid bounds have " + std::to_string(quant_min.numel()) + " and " +
               std::to_string(quant_max.numel()) + " elements; they must have one each");
  }
  const double lo = quant_min.item<float>();
  const double hi = quant_max.item<float>();
  if (!integral(lo) || !integral(hi)) {
    refuse(failure, layer, type, algorithm,
           "its grid [" + number(lo) + ", " + number(hi) + "] does not have integer bounds");
  }
  if (hi <= lo) {
    return std::nullopt;  // the type passes through unquantized for now
  }
  const bool fits = (lo >= 0 && hi <= 255) || (lo >= -128 && hi <= 127);
  if (!fits) {
    refuse(failure, layer, type, algorithm,
           "its grid [" + number(lo) + ", " + number(hi) +
               "] does not fit 8-bit codes (int8 [-128, 127] or uint8 [0, 255]); quantize with "
               "at most 8 bits");
  }
  LinearGrid grid;
  grid.scale = scale.reshape({-1});
  grid.quant_min = static_cast<int64_t>(lo);
  grid.quant_max = static_cast<int64_t>(hi);
  const at::Tensor zero_point = state_buffer(module, key("zero_point"));
  grid.zero_point = zero_point.defined() ? zero_point.reshape({-1}) : at::zeros_like(grid.scale);

  const int64_t n = grid.scale.numel();
  if (n != 1) {
    const c10::IValue weight = module.hasattr("weight") ? module.attr("weight") : c10::IValue();
    const int64_t channels =
        weight.isTensor() && weight.toTensor().dim() > 0 ? weight.toTensor().size(0) : -1;
    if (type != sdk::QuantType::kWeight || n != channels) {
      refuse(failure, layer, type, algorithm,
             "its scale has " + std::to_string(n) + " elements; a grid has one (per tensor)" +
                 (type == sdk::QuantType::kWeight
                      ? " or one per output channel (" + std::to_string(channels) + ")"
                      : std::string(", activations are quantized per tensor")));
    }
  }
  if (grid.zero_point.numel() != n) {
    refuse(failure, layer, type, algorithm,
           "its zero point has " + std::to_string(grid.zero_point.numel()) +
               " elements and its scale " + std::to_string(n));
  }
  const float* s = grid.scale.data_ptr<float>();
  const float* z = grid.zero_point.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::isfinite(s[i]) && s[i] > 0)) {
      refuse(failure, layer, type, algorithm,
             "its scale " + std::string(n == 1 ? "" : "[" + std::to_string(i) + "] ") + "is " +
                 number(s[i]) + "; QuantizeLinear needs a finite scale > 0");
    }
    if (!integral(z[i]) || z[i] < lo || z[i] > hi) {
      refuse(failure, layer, type, algorithm,
             "its zero point " + std::string(n == 1 ? "" : "[" + std::to_string(i) + "] ") +
                 "is " + number(z[i]) + "; it must be an integer in its grid [" + number(lo) +
                 ", " + number(hi) + "]");
    }
  }
  return grid;
}

sdk::QuantType quant_type_named(const std::string& failure, const std::string& name,
                                const std::string& layer) {
  for (sdk::QuantType type :
       {sdk::QuantType::kInput, sdk::QuantType::kWeight, sdk::QuantType::kOutput}) {
    if (name == sdk::quant_type_name(type)) {
      return type;
    }
  }
  throw sdk::Error(sdk::Errc::kInvalidModel, failure + ": layer '" + layer +
                                                 "' records quantization of '" + name +
                                                 "', which is not a quant type; nothing was "
                                                 "written");
}

}  // namespace

std::map<std::string, QuantizedLayer> read_quantized_layers(const jit::Module& root,
                                                            const std::string& failure) {
  std::map<std::string, QuantizedLayer> layers;
  for (const jit::NameModule& item : root.named_modules()) {
    const std::string identity_name = buffer_name(kIdentityKey);
    if (!item.value.hasattr(identity_name)) {
      continue;
    }
    const c10::IValue identity = item.value.attr(identity_name);
    if (!identity.isTensor() || identity.toTensor().numel() == 0) {
      continue;
    }
    const at::Tensor bytes = identity.toTensor().to(at::kCPU).to(at::kByte).contiguous();
    const std::string text(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                           static_cast<size_t>(bytes.numel()));
    const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    LITHE_CHECK(parsed.is_object() && parsed.contains("algorithm") &&
                    parsed["algorithm"].is_string() && parsed.contains("quant_bits") &&
                    parsed["quant_bits"].is_object(),
                sdk::Errc::kInvalidModel, failure, ": layer '", item.name,
                "' has a malformed ", identity_name, " buffer ('", text.substr(0, 200),
                "'); nothing was written");
    QuantizedLayer layer;
    layer.algorithm = parsed["algorithm"].get<std::string>();
    for (const auto& [type_name, bits] : parsed["quant_bits"].items()) {
      const sdk::QuantType type = quant_type_named(failure, type_name, item.name);
      LITHE_CHECK(bits.is_number_integer(), sdk::Errc::kInvalidModel,
                  failure, ": layer '", item.name, "' records quant_bits '",
                  bits.dump(), "' for ", type_name, "; nothing was written");
      layer.types[type] =
          read_grid(failure, item.value, item.name, type, layer.algorithm, bits.get<int64_t>());
    }
    layers[item.name] = std::move(layer);
  }
  return layers;
}

at::Tensor weight_codes(const at::Tensor& weight, const LinearGrid& grid) {
  const at::Tensor w = weight.detach().to(at::kCPU).to(at::kFloat);
  std::vector<int64_t> shape(static_cast<size_t>(std::max<int64_t>(w.dim(), 1)), 1);
  shape[0] = grid.scale.numel();
  const at::Tensor s = grid.scale.numel() == 1 ? grid.scale.reshape({}) : grid.scale.view(shape);
  const at::Tensor z =
      grid.zero_point.numel() == 1 ? grid.zero_point.reshape({}) : grid.zero_point.view(shape);
  // The quantizers' own order: an IEEE division, + z, clamp, then round half to even.
  const at::Tensor q = at::round(
      at::clamp(w / s + z, static_cast<double>(grid.quant_min), static_cast<double>(grid.quant_max)));
  return q.to(grid.is_signed() ? at::kChar : at::kByte);
}

}  // namespace lithe::host::onnx_quantization
