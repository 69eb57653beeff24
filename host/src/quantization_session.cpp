#include "lithe/host/quantization_session.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "invoke_plugin.h"
#include "session_support.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::host {
namespace {

using detail::invoke_plugin;

bool has_type(const std::vector<sdk::QuantType>& types, sdk::QuantType type) {
  return std::find(types.begin(), types.end(), type) != types.end();
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

bool is_quant_state_name(const std::string& key) {
  return key == "steps" || starts_with(key, "input_") || starts_with(key, "weight_") ||
         starts_with(key, "output_");
}

QuantizationSession::QuantizationSession(Model& model, const PluginRegistry& registry,
                                         const CompressionConfig& config)
    : model_(model),
      registry_(registry),
      algorithm_(config.algorithm),
      owner_("quantizer '" + config.algorithm + "'"),
      collectors_(std::make_unique<detail::ActivationCollectors>(model)),
      step_callbacks_(std::make_unique<detail::OptimizerStepCallbacks>()),
      saved_states_(std::make_unique<detail::SavedModelStates>()) {
  sdk::Options options =
      sdk::options_from_json(nlohmann::ordered_json::parse(config.options_json), "/options");
  quantizer_ = registry_.make_quantizer(algorithm_, options);
  detail::reject_unread_options(options, owner_);

  // The weight is needed only where it is quantized: output-only entries may select ReLU.
  const auto needs_weight = [](const ConfigEntry& entry) {
    if (entry.exclude || !entry.options.has("quant_types")) {
      return false;  // an exclude entry quantizes nothing; a missing key is reported below
    }
    sdk::check_quant_config(entry.options);
    return has_type(sdk::quant_types(entry.options), sdk::QuantType::kWeight);
  };
  resolved_ = resolve_config_list(config.config_list_json, "/config_list", model_, needs_weight,
                                  "quantize (\"weight\" is in its quant_types)");
  for (const ConfigEntry& entry : resolved_.entries) {
    if (!entry.exclude) {
      sdk::check_quant_config(entry.options);
      invoke_plugin(owner_, [&] {
        quantizer_->validate_config(entry.options);
        return 0;
      });
    }
    detail::reject_unread_options(entry.options, owner_);
  }
  LITHE_CHECK(!resolved_.layers.empty(), sdk::Errc::kInvalidConfig,
              "/config_list selects no layer of the model (", model_.modules().size(),
              " modules; see `lithe inspect`)");

  const auto& modules = model_.modules();
  for (const SelectedLayer& selected : resolved_.layers) {
    const ModuleRecord& record = modules[selected.module_index];
    const sdk::Options& entry = resolved_.entries[selected.entry_index].options;
    Layer layer;
    layer.types = sdk::quant_types(entry);
    layer.view = std::make_unique<sdk::LayerView>(
        static_cast<int64_t>(layers_.size()), record.name, record.op_type,
        record.weight.value_or(at::Tensor()), record.bias, entry);
    layers_.push_back(std::move(layer));
  }
  std::vector<const sdk::LayerView*> views;
  for (Layer& layer : layers_) {
    by_name_[layer.view->name()] = &layer;
    views.push_back(layer.view.get());
  }
  collectors_->set_layers(views);
}

QuantizationSession::~QuantizationSession() {
  try {
    if (installed_) {
      model_.set_quantization({}, {});
    }
  } catch (...) {
    // Destructors must not throw; the rewrite dies with the model's working copy anyway.
  }
}

void QuantizationSession::compress() {
  if (attached_) {
    return;
  }
  attached_ = true;
  // A model saved by an earlier session carries the state: hand it back before attach.
  for (Layer& layer : layers_) {
    for (const auto& [name, tensor] : model_.module_buffers(layer.view->name())) {
      if (is_quant_state_name(name) && tensor.numel() > 0) {
        layer.view->set_attribute(name, tensor);
      }
    }
  }
  invoke_plugin(owner_, [&] {
    quantizer_->attach(*this);
    return 0;
  });
  store_state_in_model();

  std::vector<QuantSite> sites;
  for (const Layer& layer : layers_) {
    QuantSite site;
    site.module = layer.view->name();
    site.input = has_type(layer.types, sdk::QuantType::kInput);
    site.weight = has_type(layer.types, sdk::QuantType::kWeight);
    site.output = has_type(layer.types, sdk::QuantType::kOutput);
    sites.push_back(site);
  }
  model_.set_quantization(sites, [this](const std::string& module, sdk::QuantType type,
                                        const at::Tensor& x) { return quantize(module, type, x); });
  installed_ = true;
}

void QuantizationSession::detach() {
  if (installed_) {
    model_.set_quantization({}, {});
    installed_ = false;
  }
}

at::Tensor QuantizationSession::quantize(const std::string& module, sdk::QuantType type,
                                         const at::Tensor& x) {
  const auto it = by_name_.find(module);
  LITHE_CHECK(it != by_name_.end(), sdk::Errc::kInternal, "no quantized layer named '", module,
              "'");
  sdk::LayerView& view = *it->second->view;
  const bool training = model_.is_training() || calibrating_;
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
    invoke_plugin(owner_ + " on layer '" + module + "' (" + sdk::quant_type_name(type) + ")",
                  [&]() -> int { std::rethrow_exception(error); });
  }
  if (recording_) {
    records_[{module, type}] = {x.detach().clone(), out.detach().clone()};
  }
  return out;
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

void QuantizationSession::store_state_in_model() {
  for (const Layer& layer : layers_) {
    for (const std::string& key : layer.view->attribute_keys()) {
      const auto* tensor = std::get_if<at::Tensor>(layer.view->attribute(key));
      if (tensor == nullptr || !tensor->defined()) {
        continue;
      }
      LITHE_CHECK(is_quant_state_name(key), sdk::Errc::kInternal, owner_, " on layer '",
                  layer.view->name(), "': tensor attribute '", key, "' does not follow the ",
                  "state naming rule (\"steps\" or a name starting with input_, weight_ or ",
                  "output_), so it could not be restored from a saved model");
      model_.set_module_buffer(layer.view->name(), key, *tensor);
    }
  }
}

void QuantizationSession::update_epoch(int64_t epoch) {
  invoke_plugin(owner_, [&] {
    quantizer_->update_epoch(epoch);
    return 0;
  });
}

void QuantizationSession::optimizer_step(torch::optim::Optimizer& optimizer) {
  if (reset_optimizer_state_) {
    optimizer.state().clear();
    reset_optimizer_state_ = false;
  }
  optimizer.step();
  invoke_plugin(owner_, [&] {
    quantizer_->step();
    return 0;
  });
  step_callbacks_->run(owner_);
}

void QuantizationSession::step() {}

std::vector<at::Tensor> QuantizationSession::extra_parameters() {
  return invoke_plugin(owner_, [&] { return quantizer_->parameters(); });
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
  out["algorithm"] = algorithm_;
  out["layers"] = std::move(layers);
  return out.dump(2) + "\n";
}

std::vector<sdk::LayerView*> QuantizationSession::layers() {
  std::vector<sdk::LayerView*> out;
  for (const Layer& layer : layers_) {
    out.push_back(layer.view.get());
  }
  return out;
}

const sdk::Registry& QuantizationSession::registry() const { return registry_; }

int64_t QuantizationSession::add_activation_collector(sdk::ActivationCollector collector) {
  return collectors_->add(std::move(collector));
}

void QuantizationSession::remove_activation_collector(int64_t id) { collectors_->remove(id); }

int64_t QuantizationSession::add_optimizer_step_callback(std::function<void()> callback) {
  return step_callbacks_->add(std::move(callback));
}

void QuantizationSession::remove_optimizer_step_callback(int64_t id) {
  step_callbacks_->remove(id);
}

int64_t QuantizationSession::save_model_state() { return saved_states_->save(model_); }

void QuantizationSession::restore_model_state(int64_t handle) {
  saved_states_->restore(model_, handle);
  reset_optimizer_state_ = true;
}

void QuantizationSession::update_masks_now() {
  LITHE_CHECK(false, sdk::Errc::kUnsupported, owner_,
              ": update_masks_now() is for pruners; a quantization session has no masks");
}

std::vector<std::vector<std::string>> QuantizationSession::channel_dependency_sets() {
  return model_.dependencies().channel_sets;
}

std::map<std::string, int64_t> QuantizationSession::group_dependencies() {
  return model_.dependencies().groups;
}

}  // namespace lithe::host
