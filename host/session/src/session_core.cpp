// The part of a compression session that does not depend on the algorithm's kind.
#include "lithe/host/session/session_core.h"

#include <ATen/ATen.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "lithe/host/runtime/invoke_plugin.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"
#include "session_support.h"

namespace lithe::host {

SessionCore::SessionCore(Model& model, const PluginRegistry& registry,
                         const CompressionConfig& config, const std::string& kind)
    : model_(model),
      registry_(registry),
      algorithm_(config.algorithm),
      kind_(kind == "quantizer" ? AlgorithmKind::kQuantizer : AlgorithmKind::kPruner),
      owner_(kind + " '" + config.algorithm + "'"),
      config_(parsed_compression_config(config)),
      // A fresh record of read keys: one parsed config may serve several sessions.
      options_(sdk::options_from_json(sdk::options_json(config_.options), "/options")),
      collectors_(std::make_unique<detail::ActivationCollectors>(model)),
      step_callbacks_(std::make_unique<detail::PluginCallbacks>("optimizer_step")),
      end_of_data_callbacks_(std::make_unique<detail::PluginCallbacks>("end_of_data")),
      before_step_callbacks_(
          std::make_unique<detail::PluginCallbacks>("before_optimizer_step")),
      saved_states_(std::make_unique<detail::SavedModelStates>("restore_model_state")),
      snapshots_(std::make_unique<detail::SavedModelStates>("restore_snapshot")) {}

SessionCore::~SessionCore() = default;

void SessionCore::select_layers(const std::function<void(const ConfigEntry&)>& validate,
                                const std::function<bool(const ConfigEntry&)>& needs_weight,
                                const std::string& what_needs_weight) {
  // Keys the algorithm declared (SDK 1.4) are checked by the declaration before its own
  // validate_config sees the entry, and listed when a key is unknown.
  const sdk::OptionSchema* declared = registry_.declared_options(kind_, algorithm_);
  detail::reject_unread_options(options_, owner_, algorithm_, declared,
                                sdk::OptionScope::kOptions);
  resolved_ = resolve_config_list(config_.config_list, "/config_list", model_, needs_weight,
                                  what_needs_weight);
  for (const ConfigEntry& entry : resolved_.entries) {
    if (!entry.exclude) {
      if (declared != nullptr) {
        try {
          declared->check(entry.options, sdk::OptionScope::kConfigEntry);
        } catch (const sdk::Error& e) {
          throw sdk::Error(e.code(), owner_ + ": " + e.what());  // as the plugin's own errors
        }
      }
      validate(entry);
    }
    detail::reject_unread_options(entry.options, owner_, algorithm_, declared,
                                  sdk::OptionScope::kConfigEntry);
  }
  LITHE_CHECK(!resolved_.layers.empty(), sdk::Errc::kInvalidConfig,
              "/config_list selects no layer of the model (", model_.modules().size(),
              " modules; see `lithe inspect`)");
  const auto& modules = model_.modules();
  std::vector<const sdk::LayerView*> observed;
  for (const SelectedLayer& selected : resolved_.layers) {
    const ModuleRecord& record = modules[selected.module_index];
    views_.push_back(std::make_unique<sdk::LayerView>(
        static_cast<int64_t>(views_.size()), record.name, record.op_type,
        record.weight.value_or(at::Tensor()), record.bias,
        resolved_.entries[selected.entry_index].options));
    observed.push_back(views_.back().get());
  }
  collectors_->set_layers(observed);
}

std::vector<sdk::LayerView*> SessionCore::layers() {
  std::vector<sdk::LayerView*> out;
  for (const auto& view : views_) {
    out.push_back(view.get());
  }
  return out;
}

int64_t SessionCore::add_activation_collector(sdk::ActivationCollector collector) {
  return collectors_->add(std::move(collector));
}

void SessionCore::remove_activation_collector(int64_t id) { collectors_->remove(id); }

const sdk::Registry& SessionCore::registry() const { return registry_; }

int64_t SessionCore::add_optimizer_step_callback(std::function<void()> callback) {
  return step_callbacks_->add(std::move(callback));
}

void SessionCore::remove_optimizer_step_callback(int64_t id) { step_callbacks_->remove(id); }

void SessionCore::run_optimizer_step_callbacks() { step_callbacks_->run(owner_); }

int64_t SessionCore::add_end_of_data_callback(std::function<void()> callback) {
  return end_of_data_callbacks_->add(std::move(callback));
}

void SessionCore::remove_end_of_data_callback(int64_t id) { end_of_data_callbacks_->remove(id); }

void SessionCore::end_of_data() { end_of_data_callbacks_->run(owner_); }

void SessionCore::check_epoch_updates(const char* call) const {
  LITHE_CHECK(!epoch_updates_required_ || epoch_updated_ || calibrating_, sdk::Errc::kInvalidConfig,
              owner_, " follows the epoch, but ", call,
              "() came before any update_epoch(): call session.update_epoch(epoch) at the start "
              "of every epoch (0-based), before its first optimizer step; without it the "
              "schedule stays at its first sparsity");
}

void SessionCore::drop_plugin_registrations() noexcept {
  collectors_->clear();
  step_callbacks_->clear();
  end_of_data_callbacks_->clear();
  before_step_callbacks_->clear();
  loss_terms_.clear();
}

int64_t SessionCore::add_loss_term(std::function<at::Tensor()> term) {
  LITHE_CHECK(static_cast<bool>(term), sdk::Errc::kInvalidConfig,
              "add_loss_term: the term is empty");
  const int64_t id = next_loss_term_id_++;
  loss_terms_[id] = std::move(term);
  return id;
}

void SessionCore::remove_loss_term(int64_t id) {
  LITHE_CHECK(loss_terms_.erase(id) == 1, sdk::Errc::kInvalidConfig,
              "remove_loss_term: no loss term with id ", id);
}

void SessionCore::set_calibrating(bool on) {
  if (on == calibrating_) {
    return;
  }
  calibrating_ = on;
  if (!on) {
    try {
      on_calibrating_changed();
    } catch (...) {
      // Ending calibration runs from destructors (calibrate()'s guard): it must not throw,
      // and the flag stays off whatever the hook could not undo.
    }
    return;
  }
  try {
    on_calibrating_changed();
  } catch (...) {
    calibrating_ = false;
    throw;
  }
}

at::Tensor SessionCore::loss_terms() {
  if (loss_terms_.empty() || calibrating_) {
    return {};
  }
  at::Tensor total;
  const std::string context = owner_ + " (loss term)";
  // Runs every training step: the ids are copied (a term may add or remove terms), not the
  // functions.
  std::vector<int64_t> ids;
  ids.reserve(loss_terms_.size());
  for (const auto& entry : loss_terms_) {
    ids.push_back(entry.first);
  }
  for (const int64_t id : ids) {
    const auto it = loss_terms_.find(id);
    if (it == loss_terms_.end()) {
      continue;  // removed by an earlier term of this step
    }
    const std::function<at::Tensor()> term = it->second;  // survives its own removal
    const at::Tensor value = detail::invoke_plugin(context, [&] { return term(); });
    LITHE_CHECK(value.defined() && value.is_floating_point() && value.numel() == 1,
                sdk::Errc::kInvalidConfig, context, " ", id,
                ": a loss term must return a defined floating scalar tensor, got ",
                !value.defined() ? std::string("an undefined tensor")
                                 : c10::str(value.scalar_type(), " of shape ", value.sizes()));
    total = total.defined() ? total + value.reshape({}) : value.reshape({});
  }
  return total;
}

int64_t SessionCore::add_before_optimizer_step_callback(std::function<void()> callback) {
  return before_step_callbacks_->add(std::move(callback));
}

void SessionCore::remove_before_optimizer_step_callback(int64_t id) {
  before_step_callbacks_->remove(id);
}

void SessionCore::run_before_optimizer_step_callbacks() {
  if (!calibrating_) {
    before_step_callbacks_->run(owner_);
  }
}

double SessionCore::evaluate() {
  LITHE_CHECK(static_cast<bool>(evaluator_), sdk::Errc::kUnsupported, owner_,
              " asked to evaluate the model, but this session has no evaluator: `lithe "
              "compress` needs test data (--data DIR with a test split, or --test-data); an "
              "embedding program calls session.set_evaluator(...)");
  return evaluator_();
}

void SessionCore::fine_tune(int64_t epochs) {
  LITHE_CHECK(static_cast<bool>(fine_tuner_), sdk::Errc::kUnsupported, owner_,
              " asked to fine-tune the model for ", epochs,
              " epoch(s), but this session has no fine-tuner: `lithe compress` needs training "
              "data (--data DIR); an embedding program calls session.set_fine_tuner(...)");
  LITHE_CHECK(epochs > 0, sdk::Errc::kInvalidConfig, owner_,
              ": fine_tune(epochs) needs epochs > 0, got ", epochs);
  LITHE_CHECK(!fine_tuning_, sdk::Errc::kInvalidConfig, owner_,
              ": fine_tune() was called while a fine_tune() is running");
  const detail::FlagScope tuning(fine_tuning_);
  fine_tuner_(epochs);
}

sdk::ModelCost SessionCore::measure_cost() {
  LITHE_CHECK(static_cast<bool>(cost_meter_), sdk::Errc::kUnsupported, owner_,
              " asked what the masks leave of the model once sped up, but this session has no "
              "cost meter: `lithe compress` needs a TorchScript model and data (--data) to "
              "count on; an embedding program calls session.set_cost_meter(...)");
  return cost_meter_();
}

int64_t SessionCore::save_model_state() { return saved_states_->save(model_); }

void SessionCore::restore_model_state(int64_t handle) {
  saved_states_->restore(model_, handle);
  after_model_state_restored();
  reset_optimizer_state_ = true;
}

int64_t SessionCore::save_snapshot() {
  const int64_t handle = snapshots_->save(model_);
  snapshot_masks_[handle] = capture_masks();
  return handle;
}

void SessionCore::restore_snapshot(int64_t handle) {
  snapshots_->restore(model_, handle);  // throws for an unknown handle before anything changes
  restore_masks(snapshot_masks_.at(handle));
  after_model_state_restored();
  reset_optimizer_state_ = true;
}

void SessionCore::release_snapshot(int64_t handle) {
  snapshots_->release(handle);
  snapshot_masks_.erase(handle);
}

bool SessionCore::take_optimizer_state_reset() {
  const bool reset = reset_optimizer_state_;
  reset_optimizer_state_ = false;
  return reset;
}

std::vector<sdk::ModuleSummary> SessionCore::weighted_modules() {
  std::set<std::string> compressed;
  for (const std::unique_ptr<sdk::LayerView>& view : views_) {
    compressed.insert(view->name());
  }
  std::vector<sdk::ModuleSummary> out;
  for (const ModuleRecord& record : model_.modules()) {
    if (record.weight.has_value()) {
      out.push_back({record.name, record.op_type, record.weight->sizes().vec(),
                     compressed.count(record.name) != 0});
    }
  }
  return out;
}

std::vector<std::vector<std::string>> SessionCore::channel_dependency_sets() {
  if (!dependencies_.has_value()) {
    dependencies_ = model_.dependencies();
  }
  return dependencies_->channel_sets;
}

std::map<std::string, int64_t> SessionCore::group_dependencies() {
  if (!dependencies_.has_value()) {
    dependencies_ = model_.dependencies();
  }
  return dependencies_->groups;
}

}  // namespace lithe::host
