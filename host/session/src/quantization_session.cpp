#include "lithe/host/session/quantization_session.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "lithe/host/runtime/crash_report.h"
#include "lithe/host/runtime/invoke_plugin.h"
#include "lithe/sdk/error.h"
#include "session_support.h"

namespace lithe::host {
namespace {

using detail::invoke_plugin;

bool has_type(const std::vector<sdk::QuantType>& types, sdk::QuantType type) {
  return std::find(types.begin(), types.end(), type) != types.end();
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

std::string state_buffer_name(const std::string& key) { return kStateBufferPrefix + key; }

}  // namespace


std::string QuantizationSession::identity(const Layer& layer) const {
  nlohmann::ordered_json bits = nlohmann::ordered_json::object();
  for (sdk::QuantType type : layer.types) {
    bits[sdk::quant_type_name(type)] = sdk::quant_bits(layer.view->config(), type);
  }
  return nlohmann::ordered_json{{"algorithm", algorithm()}, {"quant_bits", bits}}.dump();
}

QuantizationSession::QuantizationSession(Model& model, const PluginRegistry& registry,
                                         const CompressionConfig& config)
    : SessionCore(model, registry, config, "quantizer") {
  quantizer_ = registry.make_quantizer(algorithm(), options());
  // The weight is needed only where it is quantized: output-only entries may select ReLU.
  const auto needs_weight = [](const ConfigEntry& entry) {
    if (entry.exclude || !entry.options.has("quant_types")) {
      return false;  // an exclude entry quantizes nothing; a missing key is reported below
    }
    sdk::check_quant_config(entry.options);
    return has_type(sdk::quant_types(entry.options), sdk::QuantType::kWeight);
  };
  select_layers(
      [&](const ConfigEntry& entry) {
        sdk::check_quant_config(entry.options);
        invoke_plugin(owner(), [&] {
          quantizer_->validate_config(entry.options);
          return 0;
        }, "validate_config");
      },
      needs_weight, "quantize (\"weight\" is in its quant_types)");
  for (const auto& view : views()) {
    Layer layer;
    layer.view = view.get();
    layer.types = sdk::quant_types(view->config());
    // Only TorchScript models convert to int8; C++-frontend modules stay as the user built them.
    layer.observes_input = model.kind() == "torchscript" &&
                           (view->op_type() == "Conv2d" || view->op_type() == "Linear") &&
                           has_type(layer.types, sdk::QuantType::kWeight) &&
                           !has_type(layer.types, sdk::QuantType::kInput);
    layers_.push_back(std::move(layer));
  }
  for (Layer& layer : layers_) {
    by_name_[layer.view->name()] = &layer;
  }
  // Install the rewrite once and take it out again, so a layer that cannot be quantized (its
  // forward never reads self.weight, its parent never calls it, ...) fails here, before any
  // work; the model's forward is unchanged afterwards.
  const auto copy = [](const std::string&, sdk::QuantType, const at::Tensor& x) {
    return x.clone();
  };
  try {
    model.set_quantization(sites(/*observing=*/true), copy);
  } catch (const sdk::Error&) {
    // Input observation is an extra for int8 conversion: a layer whose input cannot be reached
    // still quantizes what it was configured to (or fails below, naming it, without the extra).
    for (Layer& layer : layers_) {
      layer.observes_input = false;
    }
    model.set_quantization(sites(/*observing=*/false), copy);
  }
  model.set_quantization({}, {});
}

std::vector<QuantSite> QuantizationSession::sites(bool observing) const {
  std::vector<QuantSite> out;
  for (const Layer& layer : layers_) {
    QuantSite site;
    site.module = layer.view->name();
    site.input = has_type(layer.types, sdk::QuantType::kInput) ||
                 (observing && layer.observes_input);
    site.weight = has_type(layer.types, sdk::QuantType::kWeight);
    site.output = has_type(layer.types, sdk::QuantType::kOutput);
    out.push_back(site);
  }
  return out;
}

QuantizationSession::~QuantizationSession() {
  try {
    if (installed_) {
      model().set_quantization({}, {});
    }
  } catch (...) {
    // Destructors must not throw; the rewrite dies with the model's working copy anyway.
  }
}

void QuantizationSession::restore_saved_state() {
  for (Layer& layer : layers_) {
    std::optional<std::string> saved_identity;
    std::vector<std::pair<std::string, at::Tensor>> saved;
    for (const auto& [name, tensor] : model().module_buffers(layer.view->name())) {
      if (layer.observes_input && name == kObservedInputRangeBuffer && tensor.numel() == 2) {
        layer.input_range = tensor.detach().to(at::kFloat).cpu().clone();
        continue;
      }
      if (!starts_with(name, kStateBufferPrefix) || tensor.numel() == 0) {
        continue;  // not Lithe's, or the empty slot of an unquantized instance of a shared type
      }
      if (name == state_buffer_name(kIdentityKey)) {
        const at::Tensor bytes = tensor.to(at::kByte).contiguous().cpu();
        saved_identity = std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                                     static_cast<size_t>(bytes.numel()));
      } else {
        saved.emplace_back(name.substr(std::string(kStateBufferPrefix).size()), tensor);
      }
    }
    if (saved.empty()) {
      continue;
    }
    const std::string wanted = identity(layer);
    LITHE_CHECK(saved_identity == wanted, sdk::Errc::kInvalidModel, "layer '",
                layer.view->name(), "' carries the quantization state of an earlier session (",
                saved_identity.value_or("unrecorded algorithm and bits"), "), but this session is ",
                wanted, "; start from the float model, or use the same algorithm and bits");
    for (auto& [key, tensor] : saved) {
      layer.view->set_attribute(key, tensor);
    }
  }
}

void QuantizationSession::compress() {
  LITHE_CHECK(attach_failure_.empty(), sdk::Errc::kInvalidConfig,
              "this quantization session cannot continue: ", attach_failure_);
  if (installed_) {
    return;
  }
  // Everything that can fail comes before the model changes: restoring and attaching only
  // touch the layer views, installing the rewrite is all-or-nothing, and only then are the
  // state buffers added to the model.
  try {
    restore_saved_state();
    invoke_plugin(owner(), [&] {
      quantizer_->attach(*this);
      return 0;
    }, "attach");
    check_state_names();
    installed_ = true;  // install() requires it
    install(calibrating());
  } catch (const std::exception& e) {
    installed_ = false;
    attach_failure_ = e.what();  // a half-attached quantizer is never run nor attached twice
    drop_plugin_registrations();
    throw;
  }
  store_state_in_model();
  accept_weight_changes();  // step() compares the weights against these
}

void QuantizationSession::install(bool observing) {
  if (!installed_) {
    return;
  }
  model().set_quantization(sites(observing),
                           [this](const std::string& module, sdk::QuantType type,
                                  const at::Tensor& x) { return quantize(module, type, x); });
}

void QuantizationSession::on_calibrating_changed() {
  const bool any = std::any_of(layers_.begin(), layers_.end(),
                               [](const Layer& layer) { return layer.observes_input; });
  if (any) {
    // Should removing the sites fail, the installed rewrite stays (SessionCore swallows the
    // error): outside calibration its observing sites pass inputs through unchanged.
    install(/*observing=*/calibrating());
  }
}

void QuantizationSession::require_compressed(const char* what) const {
  LITHE_CHECK(installed_, sdk::Errc::kInvalidConfig, owner(), ": ", what,
              " before compress(): the model is not quantized yet");
}

void QuantizationSession::detach() {
  if (installed_) {
    model().set_quantization({}, {});
    installed_ = false;
  }
}

at::Tensor QuantizationSession::quantize(const std::string& module, sdk::QuantType type,
                                         const at::Tensor& x) {
  const auto it = by_name_.find(module);
  LITHE_CHECK(it != by_name_.end(), sdk::Errc::kInternal, "no quantized layer named '", module,
              "'");
  sdk::LayerView& view = *it->second->view;
  if (type == sdk::QuantType::kInput && it->second->observes_input) {
    observe_input(*it->second, x);  // not the quantizer's: the input passes unchanged
    return x.clone();
  }
  const bool training = model().is_training() || calibrating();
  LITHE_CHECK(x.is_floating_point(), sdk::Errc::kUnsupportedLayer, owner(), " on layer '",
              module, "': its ", sdk::quant_type_name(type), " is a ", x.scalar_type(),
              " tensor; only floating-point tensors can be fake-quantized");
  // What a crash inside the quantizer reports; no allocation (this runs for every quantized
  // tensor of every forward).
  static constexpr const char* kCalls[] = {"quantize_input", "quantize_weight",
                                           "quantize_output"};
  const detail::PluginCallRecord record(owner(), kCalls[static_cast<int>(type)]);
  at::Tensor out;
  try {
    if (!quantizer_->records_autograd()) {
      out = sdk::apply_quant_grad(*quantizer_, x, type, view, training);
    } else if (type == sdk::QuantType::kInput) {
      out = quantizer_->quantize_input(x, view, training);
    } else if (type == sdk::QuantType::kWeight) {
      out = quantizer_->quantize_weight(x, view, training);
    } else {
      out = quantizer_->quantize_output(x, view, training);
    }
  } catch (...) {
    // The message context is built only on failure: this runs for every quantized tensor of
    // every forward.
    const std::exception_ptr error = std::current_exception();
    invoke_plugin(owner() + " on layer '" + module + "' (" + sdk::quant_type_name(type) + ")",
                  [&]() -> int { std::rethrow_exception(error); });
  }
  LITHE_CHECK(out.defined() && out.sizes() == x.sizes() && out.scalar_type() == x.scalar_type() &&
                  out.device() == x.device(),
              sdk::Errc::kInternal, owner(), " on layer '", module, "': quantize_",
              sdk::quant_type_name(type), " returned ",
              out.defined() ? c10::str(out.scalar_type(), out.sizes(), " on ", out.device())
                            : std::string("an undefined tensor"),
              " for a ", x.scalar_type(), x.sizes(), " on ", x.device(),
              "; it must return the same shape, dtype and device");
  if (recording_) {
    records_[{module, type}] = {x.detach().clone(), out.detach().clone()};
  }
  return out;
}

void QuantizationSession::observe_input(Layer& layer, const at::Tensor& x) {
  // Calibration only: every rank calibrates on the same batches, so the ranges agree; training
  // batches differ per rank, and evaluation data must not shape the model.
  if (!calibrating() || x.numel() == 0 || !x.is_floating_point()) {
    return;
  }
  at::NoGradGuard no_grad;
  const at::Tensor finite = x.detach().isfinite().all();
  if (!finite.item<bool>()) {
    return;  // a batch with NaN or infinity says nothing about the range
  }
  const at::Tensor range =
      at::stack({x.detach().min(), x.detach().max()}).to(at::kFloat).cpu();
  layer.input_range = layer.input_range.defined()
                          ? at::stack({at::minimum(layer.input_range[0], range[0]),
                                       at::maximum(layer.input_range[1], range[1])})
                          : range;
}

void QuantizationSession::set_recording(bool on) {
  recording_ = on;
  if (!on) {
    records_.clear();
  }
}

const QuantRecord* QuantizationSession::last_record(const std::string& layer,
                                                    sdk::QuantType type) const {
  const auto it = records_.find({layer, type});
  return it == records_.end() ? nullptr : &it->second;
}

void QuantizationSession::check_state_names() const {
  for (const Layer& layer : layers_) {
    for (const std::string& key : layer.view->attribute_keys()) {
      LITHE_CHECK(!key.empty() && key != kIdentityKey &&
                      key.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") ==
                          std::string::npos,
                  sdk::Errc::kInvalidConfig, owner(), " on layer '", layer.view->name(),
                  "': state attribute '", key, "' must be a non-empty identifier (letters, ",
                  "digits, _) other than '", kIdentityKey, "' to be saved as a buffer");
    }
  }
}

void QuantizationSession::store_state_in_model() {
  for (const Layer& layer : layers_) {
    for (const std::string& key : layer.view->attribute_keys()) {
      const auto* tensor = std::get_if<at::Tensor>(layer.view->attribute(key));
      if (tensor == nullptr || !tensor->defined()) {
        continue;
      }
      model().set_module_buffer(layer.view->name(), state_buffer_name(key), *tensor);
    }
    if (layer.input_range.defined()) {
      // On the model's device, beside its other buffers (a C++-frontend model re-points an
      // existing buffer with set_, which refuses another device).
      model().set_module_buffer(layer.view->name(), kObservedInputRangeBuffer,
                                layer.input_range.to(model().device(), /*non_blocking=*/false,
                                                     /*copy=*/true));
    }
    // Which algorithm and bits quantized the layer (bytes of a JSON text: buffers are
    // tensors), also for quantizers without state: a later session refuses to continue another
    // configuration's state, and the ONNX export refuses layers it cannot express instead of
    // writing them as float.
    const std::string id = identity(layer);
    const at::Tensor bytes = at::empty({static_cast<int64_t>(id.size())}, at::kByte);
    std::memcpy(bytes.data_ptr<uint8_t>(), id.data(), id.size());
    model().set_module_buffer(layer.view->name(), state_buffer_name(kIdentityKey),
                              bytes.to(model().device()));
  }
}

void QuantizationSession::update_epoch(int64_t epoch) {
  require_compressed("update_epoch()");
  note_epoch_update();
  invoke_plugin(owner(), [&] {
    quantizer_->update_epoch(epoch);
    return 0;
  });
}

void QuantizationSession::optimizer_step(torch::optim::Optimizer& optimizer) {
  require_compressed("optimizer_step()");
  check_epoch_updates("optimizer_step");
  if (take_optimizer_state_reset()) {
    optimizer.state().clear();  // a restored model starts over, as in PruningSession
  }
  run_before_optimizer_step_callbacks();
  optimizer.step();
  invoke_plugin(owner(), [&] {
    quantizer_->step();
    return 0;
  }, "step");
  run_optimizer_step_callbacks();
  stepped_ = true;
}

void QuantizationSession::step() {
  if (!installed_) {
    return;
  }
  if (!stepped_) {
    detail::check_weights_unchanged(weight_fingerprints_, views(), owner(), "step()",
                                     "it runs optimizer.step(), then the quantizer's step");
    return;  // unchanged: nothing to record again
  }
  accept_weight_changes();
}

void QuantizationSession::accept_weight_changes() {
  weight_fingerprints_ = detail::weight_fingerprints(views());
  stepped_ = false;
}

std::vector<at::Tensor> QuantizationSession::extra_parameters() {
  require_compressed("extra_parameters()");
  return invoke_plugin(owner(), [&] { return quantizer_->parameters(); });
}

std::vector<at::Tensor> QuantizationSession::replicated_state() const {
  std::vector<at::Tensor> out;
  for (const Layer& layer : layers_) {
    for (const std::string& key : layer.view->attribute_keys()) {
      const auto* tensor = std::get_if<at::Tensor>(layer.view->attribute(key));
      if (tensor != nullptr && tensor->defined()) {
        out.push_back(*tensor);
      }
    }
  }
  return out;
}

std::vector<QuantLayerReport> QuantizationSession::report() const {
  std::vector<QuantLayerReport> out;
  for (const Layer& layer : layers_) {
    QuantLayerReport r;
    r.name = layer.view->name();
    r.op_type = layer.view->op_type();
    for (sdk::QuantType type : layer.types) {
      QuantTypeReport t;
      t.type = type;
      t.bits = sdk::quant_bits(layer.view->config(), type);
      const std::string prefix = std::string(sdk::quant_type_name(type)) + "_";
      for (const std::string& key : layer.view->attribute_keys()) {
        const auto* tensor = std::get_if<at::Tensor>(layer.view->attribute(key));
        if (tensor == nullptr || !tensor->defined() || !starts_with(key, prefix)) {
          continue;
        }
        const at::Tensor values = tensor->detach().to(at::kDouble).contiguous().cpu().flatten();
        std::vector<double> list(values.data_ptr<double>(),
                                 values.data_ptr<double>() + values.numel());
        t.state.emplace_back(key.substr(prefix.size()), std::move(list));
      }
      r.types.push_back(std::move(t));
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string QuantizationSession::calibration_json() const {
  nlohmann::ordered_json layers = nlohmann::ordered_json::object();
  for (const QuantLayerReport& r : report()) {
    nlohmann::ordered_json layer;
    layer["type"] = r.op_type;
    for (const QuantTypeReport& t : r.types) {
      nlohmann::ordered_json entry;
      entry["bits"] = t.bits;
      for (const auto& [key, values] : t.state) {
        entry[key] = values.size() == 1 ? nlohmann::ordered_json(values[0])
                                        : nlohmann::ordered_json(values);
      }
      layer[sdk::quant_type_name(t.type)] = std::move(entry);
    }
    layers[r.name] = std::move(layer);
  }
  nlohmann::ordered_json out;
  out["algorithm"] = algorithm();
  out["layers"] = std::move(layers);
  return out.dump(2) + "\n";
}

void QuantizationSession::update_masks_now() {
  LITHE_CHECK(false, sdk::Errc::kUnsupported, owner(),
              ": update_masks_now() is for pruners; a quantization session has no masks");
}

}  // namespace lithe::host
