#pragma once
/// \file
/// SessionCore: what a pruning and a quantization session share. It holds the model, the
/// registry and the parsed config; resolves config_list into layer views (once, before the
/// model is touched); and gives plugins the sdk::CompressionContext services that do not depend
/// on what the algorithm computes: activation collectors, optimizer-step callbacks, saved model
/// states, dependency sets and cross-process reductions. PruningSession and QuantizationSession
/// add what is theirs (masks; fake quantization and its state).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/config_list.h"
#include "lithe/host/session/training_hooks.h"
#include "lithe/sdk/context.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/options.h"

namespace lithe::host {

namespace detail {
class ActivationCollectors;
class PluginCallbacks;
class SavedModelStates;
}  // namespace detail

class SessionCore : public sdk::CompressionContext, public TrainingHooks {
 public:
  ~SessionCore() override;
  SessionCore(const SessionCore&) = delete;
  SessionCore& operator=(const SessionCore&) = delete;

  /// The algorithm's registered name.
  const std::string& algorithm() const { return algorithm_; }

  // sdk::CompressionContext
  /// The selected layers, in the model's module order.
  std::vector<sdk::LayerView*> layers() override;
  int64_t add_activation_collector(sdk::ActivationCollector collector) override;
  void remove_activation_collector(int64_t id) override;
  const sdk::Registry& registry() const override;
  int64_t add_optimizer_step_callback(std::function<void()> callback) override;
  void remove_optimizer_step_callback(int64_t id) override;
  int64_t save_model_state() override;
  /// Copies the saved state back, lets the session re-establish its invariants (a pruning
  /// session re-applies its masks), and makes the next optimizer step start from a fresh
  /// optimizer state, as NNI's LotteryTicket restores the state saved before any step.
  void restore_model_state(int64_t handle) override;
  /// SDK 1.8: weights, buffers and masks (capture_masks) in memory; restore puts back all
  /// three (restore_masks, then after_model_state_restored) and resets the optimizer's state
  /// before its next step, as restore_model_state does.
  int64_t save_snapshot() override;
  void restore_snapshot(int64_t handle) override;
  void release_snapshot(int64_t handle) override;
  /// The model's channel dependency sets (analysed on first use, then kept).
  std::vector<std::vector<std::string>> channel_dependency_sets() override;
  std::map<std::string, int64_t> group_dependencies() override;
  /// SDK 1.9: the model's modules with a weight (Model::modules()), marked compressed when a
  /// view of this session is theirs.
  std::vector<sdk::ModuleSummary> weighted_modules() override;
  /// Over the process group set with set_process_group; nothing in a single process.
  void reduce_over_processes(std::vector<at::Tensor>& tensors, sdk::Reduction op) override {
    reduce_with_group(tensors, op);
  }
  int64_t add_end_of_data_callback(std::function<void()> callback) override;
  void remove_end_of_data_callback(int64_t id) override;
  /// Makes optimizer_step() fail while update_epoch() was never called (see the SDK).
  void require_epoch_updates() override { epoch_updates_required_ = true; }

  /// No more data will come (the calibration and training passes are over): runs the
  /// end-of-data callbacks plugins registered, so that a data-driven algorithm that saw too
  /// few batches fails here, naming itself, the layer and the rule, instead of leaving layers
  /// unpruned. `lithe compress` calls it after its last pass; an embedder's own loop calls it
  /// once after its last batch. Throws the plugin's sdk::Error.
  void end_of_data() override;
  // SDK 1.7: training-time algorithms
  int64_t add_loss_term(std::function<at::Tensor()> term) override;
  void remove_loss_term(int64_t id) override;
  int64_t add_before_optimizer_step_callback(std::function<void()> callback) override;
  void remove_before_optimizer_step_callback(int64_t id) override;
  bool can_evaluate() const override { return static_cast<bool>(evaluator_); }
  /// The evaluator's metric; kUnsupported naming set_evaluator / --data when there is none.
  double evaluate() override;
  bool can_fine_tune() const override { return static_cast<bool>(fine_tuner_); }
  /// Runs the fine-tuner (see the SDK); refuses a fine_tune() inside another one.
  void fine_tune(int64_t epochs) override;
  /// The metric plugins get from evaluate() (higher is better), e.g. test accuracy. `lithe
  /// compress` sets Lithe's evaluation on the test data; an embedder sets its own. An empty
  /// function removes it.
  void set_evaluator(std::function<double()> evaluator) { evaluator_ = std::move(evaluator); }
  /// What fine_tune(epochs) runs: train the model for `epochs` epochs with this session as its
  /// hooks (optimizer_step, step, update_epoch, loss_terms), as `lithe compress` does with its
  /// training options on --data. An empty function removes it.
  void set_fine_tuner(std::function<void(int64_t epochs)> fine_tuner) {
    fine_tuner_ = std::move(fine_tuner);
  }
  /// SDK 1.10: whether a cost meter is set.
  bool can_measure_cost() const override { return static_cast<bool>(cost_meter_); }
  /// The cost meter's answer; kUnsupported naming set_cost_meter / --data when there is none.
  sdk::ModelCost measure_cost() override;
  /// What measure_cost() runs: the model's cost once sped up under this session's current
  /// masks (pipeline's pruned_cost_meter for TorchScript models; `lithe compress` sets it when
  /// it has data). An empty function removes it.
  void set_cost_meter(std::function<sdk::ModelCost()> meter) { cost_meter_ = std::move(meter); }
  /// TrainingHooks: the sum of the plugin's loss terms, each checked (a defined floating scalar;
  /// errors name the plugin); undefined when none is registered or while calibrating.
  at::Tensor loss_terms() override;

  /// While on, the batches are a calibration pass, not training: quantizers are told
  /// `training` on every forward even in evaluation mode (range calibration without changing
  /// BatchNorm statistics), and a schedule does not yet require update_epoch().
  void set_calibrating(bool on);
  bool calibrating() const { return calibrating_; }

 protected:
  /// `kind` names the algorithm's role in messages ("pruner" gives "pruner 'level'").
  /// `config` may be a parsed one or a 1.3-style one built from JSON text (parsed here).
  SessionCore(Model& model, const PluginRegistry& registry, const CompressionConfig& config,
              const std::string& kind);

  /// Runs after set_calibrating changed the flag (calibrating() is already the new value): a
  /// session that observes tensors only while calibrating installs or removes that here, so
  /// the forwards outside calibration pay nothing for it. An exception when calibration starts
  /// propagates and leaves the flag off; one when it ends is swallowed (set_calibrating(false)
  /// runs from destructors), so a hook should leave a harmless state behind when it fails.
  virtual void on_calibrating_changed() {}

  /// The algorithm's options (a fresh copy of the config's: its own record of read keys).
  const sdk::Options& options() const { return options_; }
  /// "pruner 'level'", for messages.
  const std::string& owner() const { return owner_; }

  /// Resolves config_list against the model, runs `validate` on every entry that is not an
  /// exclusion (the algorithm's validate_config, wrapped so its errors name the plugin),
  /// rejects keys nobody read in the options and in every entry, refuses a selection without
  /// layers, and makes one layer view per selected module. Call once, from the constructor,
  /// after the algorithm was made from options(). `needs_weight` and `what_needs_weight` as
  /// for resolve_config_list.
  void select_layers(const std::function<void(const ConfigEntry&)>& validate,
                     const std::function<bool(const ConfigEntry&)>& needs_weight = {},
                     const std::string& what_needs_weight = "compress");
  /// The config as resolved by select_layers.
  const ResolvedConfig& resolved() const { return resolved_; }
  /// The layer views, in the model's module order (owned here).
  const std::vector<std::unique_ptr<sdk::LayerView>>& views() const { return views_; }

  /// Called by restore_model_state and restore_snapshot once the saved state is back in the
  /// model.
  virtual void after_model_state_restored() {}
  /// A copy of every layer's masks for save_snapshot, in views() order (none by default: a
  /// quantization session has no masks).
  virtual std::vector<sdk::Masks> capture_masks() const { return {}; }
  /// Sets the masks capture_masks returned (restore_snapshot; they are applied afterwards by
  /// after_model_state_restored).
  virtual void restore_masks(const std::vector<sdk::Masks>& /*masks*/) {}
  /// True once after each restore_model_state: the caller clears the optimizer's state
  /// before its next step.
  bool take_optimizer_state_reset();

  /// Runs every optimizer-step callback a plugin registered (errors name the plugin).
  void run_optimizer_step_callbacks();
  /// Runs every before-optimizer-step callback (not while calibrating: no training happens).
  void run_before_optimizer_step_callbacks();
  /// Records that update_epoch was called (each session's update_epoch calls it).
  void note_epoch_update() { epoch_updated_ = true; }
  /// Throws sdk::Error(kInvalidConfig) naming session.update_epoch(epoch) when the algorithm
  /// follows the epoch (require_epoch_updates), the batches are training (not calibrating)
  /// and update_epoch was never called. `call` names the caller, e.g. "optimizer_step".
  void check_epoch_updates(const char* call) const;
  /// Drops every collector and callback a plugin registered (after its attach failed, so
  /// nothing it left behind keeps running).
  void drop_plugin_registrations() noexcept;

  Model& model() const { return model_; }

 private:
  Model& model_;
  const PluginRegistry& registry_;
  std::string algorithm_;
  AlgorithmKind kind_;
  std::string owner_;
  CompressionConfig config_;
  sdk::Options options_;
  ResolvedConfig resolved_;
  std::vector<std::unique_ptr<sdk::LayerView>> views_;
  std::unique_ptr<detail::ActivationCollectors> collectors_;
  std::unique_ptr<detail::PluginCallbacks> step_callbacks_;
  std::unique_ptr<detail::PluginCallbacks> end_of_data_callbacks_;
  std::unique_ptr<detail::PluginCallbacks> before_step_callbacks_;
  std::map<int64_t, std::function<at::Tensor()>> loss_terms_;
  int64_t next_loss_term_id_ = 1;
  std::function<double()> evaluator_;
  std::function<void(int64_t)> fine_tuner_;
  std::function<sdk::ModelCost()> cost_meter_;
  bool fine_tuning_ = false;  // fine_tune() is running: a nested call is refused
  std::unique_ptr<detail::SavedModelStates> saved_states_;
  std::unique_ptr<detail::SavedModelStates> snapshots_;  // weights and buffers of snapshots
  std::map<int64_t, std::vector<sdk::Masks>> snapshot_masks_;  // their masks, by handle
  std::optional<LayerDependencies> dependencies_;  // analysed on first use
  bool reset_optimizer_state_ = false;
  bool epoch_updates_required_ = false;
  bool epoch_updated_ = false;
  bool calibrating_ = false;
};

}  // namespace lithe::host
