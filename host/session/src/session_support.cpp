#include "session_support.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <ATen/ATen.h>

#include "lithe/host/runtime/invoke_plugin.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::host::detail {

void reject_unread_options(const sdk::Options& options, const std::string& owner,
                           const std::string& algorithm, const sdk::OptionSchema* declared,
                           sdk::OptionScope scope) {
  const std::vector<std::string> unread = sdk::unread_option_paths(options);
  if (unread.empty()) {
    return;
  }
  std::string list;
  for (const std::string& path : unread) {
    list += (list.empty() ? "" : ", ") + path;
  }
  std::string accepted;
  if (declared != nullptr) {
    for (const sdk::OptionSpec& spec : declared->specs()) {
      if (spec.scope == scope) {
        accepted += (accepted.empty() ? "" : ", ") + spec.key;
      }
    }
    if (scope == sdk::OptionScope::kConfigEntry) {
      accepted += std::string(accepted.empty() ? "" : ", ") + "op_types, op_names, exclude";
    }
    accepted = "; it accepts " + (accepted.empty() ? std::string("no keys") : accepted) +
               (scope == sdk::OptionScope::kOptions ? " in \"options\"" : " in each entry") +
               " (`lithe plugins --describe " + algorithm + "`)";
  }
  LITHE_CHECK(false, sdk::Errc::kInvalidConfig, list, ": unknown key",
              unread.size() > 1 ? "s" : "", " for ", owner, " (misspelled?)", accepted);
}


ActivationCollectors::~ActivationCollectors() {
  if (!collectors_.empty()) {
    clear();
  }
}

void ActivationCollectors::set_layers(const std::vector<const sdk::LayerView*>& layers) {
  layers_.clear();
  for (const sdk::LayerView* layer : layers) {
    layers_[layer->name()] = layer;
  }
}

int64_t ActivationCollectors::add(sdk::ActivationCollector collector) {
  LITHE_CHECK(static_cast<bool>(collector), sdk::Errc::kInvalidConfig,
              "add_activation_collector: the collector is empty");
  const int64_t id = next_id_++;
  collectors_[id] = std::move(collector);
  try {
    refresh();
  } catch (...) {
    collectors_.erase(id);
    throw;
  }
  return id;
}

void ActivationCollectors::remove(int64_t id) {
  LITHE_CHECK(collectors_.erase(id) == 1, sdk::Errc::kInvalidConfig,
              "remove_activation_collector: no activation collector with id ", id);
  refresh();
}

void ActivationCollectors::clear() noexcept {
  collectors_.clear();
  try {
    model_.set_taps({}, {});
  } catch (...) {
    // Best effort; the taps die with the model's working copy anyway.
  }
}

void ActivationCollectors::refresh() {
  if (collectors_.empty()) {
    model_.set_taps({}, {});
    return;
  }
  std::vector<std::string> names;
  for (const auto& [name, layer] : layers_) {
    names.push_back(name);
  }
  model_.set_taps(names, [this](const std::string& name, const at::Tensor& output) {
    const auto it = layers_.find(name);
    if (it == layers_.end()) {
      return;
    }
    const auto collectors = collectors_;  // a collector may add or remove collectors
    for (const auto& [id, collector] : collectors) {
      if (collectors_.count(id) != 0) {  // not removed by an earlier collector of this forward
        collector(*it->second, output);
      }
    }
  });
}

std::vector<double> weight_fingerprints(
    const std::vector<std::unique_ptr<sdk::LayerView>>& views) {
  // Runs once or twice per training step: the sums are gathered into one tensor and copied to
  // the CPU once (one device sync, not one per layer).
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> sums;
  sums.reserve(views.size());
  at::Device device(at::kCPU);
  for (const auto& view : views) {
    if (view->weight().defined()) {
      device = view->weight().device();
      break;
    }
  }
  for (const auto& view : views) {
    const at::Tensor& weight = view->weight();
    sums.push_back(weight.defined() ? weight.sum(at::kDouble).to(device)
                                    : at::zeros({}, at::dtype(at::kDouble).device(device)));
  }
  std::vector<double> out(sums.size());
  if (!sums.empty()) {
    const at::Tensor all = at::stack(sums).cpu().contiguous();
    std::memcpy(out.data(), all.data_ptr<double>(), out.size() * sizeof(double));
  }
  return out;
}

void check_weights_unchanged(const std::vector<double>& recorded,
                             const std::vector<std::unique_ptr<sdk::LayerView>>& views,
                             const std::string& owner, const char* call,
                             const char* what_step_does) {
  if (recorded.empty() || recorded.size() != views.size()) {
    return;  // nothing recorded yet: the session has not touched the weights
  }
  const std::vector<double> now = weight_fingerprints(views);
  for (size_t i = 0; i < now.size(); ++i) {
    LITHE_CHECK(now[i] == recorded[i] || (std::isnan(now[i]) && std::isnan(recorded[i])),
                sdk::Errc::kInvalidConfig, owner, ": session.", call,
                " found the weights of layer '", views[i]->name(),
                "' changed since the session last saw them, with no session.optimizer_step in "
                "between: an optimizer stepped outside the session. Call "
                "session.optimizer_step(optimizer) instead of optimizer.step() (",
                what_step_does, "); after changing weights on purpose, call "
                "session.accept_weight_changes()");
  }
}

PluginCallbacks::PluginCallbacks(std::string event) : event_(std::move(event)), label_(event_) {
  std::replace(label_.begin(), label_.end(), '_', '-');
}

int64_t PluginCallbacks::add(std::function<void()> callback) {
  LITHE_CHECK(static_cast<bool>(callback), sdk::Errc::kInvalidConfig, "add_", event_,
              "_callback: the callback is empty");
  const int64_t id = next_id_++;
  callbacks_[id] = std::move(callback);
  return id;
}

void PluginCallbacks::remove(int64_t id) {
  LITHE_CHECK(callbacks_.erase(id) == 1, sdk::Errc::kInvalidConfig, "remove_", event_,
              "_callback: no ", label_, " callback with id ", id);
}

void PluginCallbacks::run(const std::string& owner) {
  if (callbacks_.empty()) {
    return;
  }
  // Runs on every optimizer step: one message prefix per run, and the ids (not the callbacks)
  // copied, since a callback may add or remove callbacks.
  const std::string context = owner + " (" + label_ + " callback)";
  std::vector<int64_t> ids;
  ids.reserve(callbacks_.size());
  for (const auto& [id, callback] : callbacks_) {
    ids.push_back(id);
  }
  for (const int64_t id : ids) {
    const auto it = callbacks_.find(id);
    if (it == callbacks_.end()) {
      continue;  // removed by an earlier callback of this run
    }
    const std::function<void()> callback = it->second;  // survives its own removal
    invoke_plugin(context, [&] {
      callback();
      return 0;
    });
  }
}

int64_t SavedModelStates::save(const Model& model) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> copies;
  for (const at::Tensor& t : model.state_tensors()) {
    copies.push_back(t.detach().clone());
  }
  const int64_t handle = next_handle_++;
  states_[handle] = std::move(copies);
  return handle;
}

void SavedModelStates::restore(Model& model, int64_t handle) const {
  const auto it = states_.find(handle);
  LITHE_CHECK(it != states_.end(), sdk::Errc::kInvalidConfig, call_, ": no saved model state "
              "with handle ", handle, handle > 0 && handle < next_handle_ ? " (released)" : "");
  const std::vector<at::Tensor> live = model.state_tensors();
  LITHE_CHECK(live.size() == it->second.size(), sdk::Errc::kInternal, call_, ": the model has ",
              live.size(), " state tensors, the saved state ", it->second.size());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < live.size(); ++i) {
    live[i].copy_(it->second[i]);
  }
}

void SavedModelStates::release(int64_t handle) {
  const auto it = states_.find(handle);
  LITHE_CHECK(it != states_.end(), sdk::Errc::kInvalidConfig, "release_snapshot: no snapshot "
              "with handle ", handle, handle > 0 && handle < next_handle_ ? " (released)" : "");
  states_.erase(it);
}

}  // namespace lithe::host::detail
