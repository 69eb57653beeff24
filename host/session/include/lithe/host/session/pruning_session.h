#pragma once
/// \file
/// A pruning session over one model: resolves config_list, asks the pruner for masks, keeps
/// the masks beside the weights, applies them in place, masks gradients, and re-applies masks
/// after every optimizer step (also masking momentum/Adam state) so that pruned weights stay
/// exactly zero during fine-tuning. Forwards update_epoch/step to the pruner.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/config_list.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/training_hooks.h"
#include "lithe/sdk/context.h"
#include "lithe/sdk/pruner.h"

namespace torch::optim {
class Optimizer;
}

namespace lithe::host {

namespace detail {
class ActivationCollectors;
class OptimizerStepCallbacks;
class SavedModelStates;
}  // namespace detail

/// Per-layer outcome, for tables and JSON reports.
struct LayerReport {
  std::string name;
  std::string op_type;
  int64_t weight_numel = 0;
  int64_t weight_zeros = 0;  ///< zeros of the masked weight (mask zeros)
  int64_t bias_numel = 0;
  int64_t bias_zeros = 0;
  double sparsity_target = 0.0;  ///< the config's "sparsity", or -1 if it has none
};

class PruningSession final : public sdk::CompressionContext, public TrainingHooks {
 public:
  /// Validates everything (algorithm name, options, config_list, per-entry keys) before
  /// touching the model; throws sdk::Error on the first problem.
  PruningSession(Model& model, const PluginRegistry& registry, const CompressionConfig& config);
  ~PruningSession() override;
  PruningSession(const PruningSession&) = delete;
  PruningSession& operator=(const PruningSession&) = delete;

  /// NNI's compress(): one mask update, masks applied to the weights.
  void compress();
  /// Asks the pruner for new masks for every layer and applies them.
  void update_masks();
  /// weight *= weight_mask (and bias) in place for every layer.
  void apply_masks();
  /// Start of epoch `epoch` (forwarded to the pruner).
  void update_epoch(int64_t epoch) override;
  /// End of a training batch (forwarded to the pruner).
  void step() override;
  /// optimizer.step(), then mask update + re-application + optimizer state masking, then the
  /// pruner's after_optimizer_step (NNI's patched optimizer.step).
  void optimizer_step(torch::optim::Optimizer& optimizer) override;
  /// Multiplies momentum / Adam moments of masked weights by their masks.
  void mask_optimizer_state(torch::optim::Optimizer& optimizer);

  /// NNI's mask.pth content: layer -> (weight mask, bias mask or undefined).
  std::vector<std::pair<std::string, sdk::Masks>> masks() const;
  std::vector<LayerReport> report() const;

  // sdk::CompressionContext
  std::vector<sdk::LayerView*> layers() override;
  int64_t add_activation_collector(sdk::ActivationCollector collector) override;
  void remove_activation_collector(int64_t id) override;
  const sdk::Registry& registry() const override;
  int64_t add_optimizer_step_callback(std::function<void()> callback) override;
  void remove_optimizer_step_callback(int64_t id) override;
  void update_masks_now() override;
  int64_t save_model_state() override;
  void restore_model_state(int64_t handle) override;
  std::vector<std::vector<std::string>> channel_dependency_sets() override;
  std::map<std::string, int64_t> group_dependencies() override;
  /// Over the process group set with set_process_group; nothing in a single process.
  void reduce_over_processes(std::vector<at::Tensor>& tensors, sdk::Reduction op) override {
    reduce_with_group(tensors, op);
  }
  /// TrainingHooks: the masks (weight and bias) of every layer.
  std::vector<at::Tensor> replicated_state() const override;

 private:
  void register_gradient_hooks();
  const LayerDependencies& dependencies();

  Model& model_;
  const PluginRegistry& registry_;
  std::string algorithm_;
  std::unique_ptr<sdk::Pruner> pruner_;
  ResolvedConfig resolved_;
  std::vector<std::unique_ptr<sdk::LayerView>> layers_;
  std::unique_ptr<detail::ActivationCollectors> collectors_;
  std::unique_ptr<detail::OptimizerStepCallbacks> step_callbacks_;
  std::unique_ptr<detail::SavedModelStates> saved_states_;
  bool reset_optimizer_state_ = false;  // set by restore_model_state, done at the next step
  std::optional<LayerDependencies> dependencies_;  // analysed on first use
  std::vector<std::pair<at::Tensor, unsigned>> gradient_hooks_;  // (tensor, hook index)
  bool attached_ = false;
  std::string attach_failure_;  // why the pruner's attach threw; the session is then unusable
  bool in_update_ = false;      // inside attach/calc_mask: update_masks_now would recurse
};

}  // namespace lithe::host
