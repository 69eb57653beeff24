#pragma once
/// \file
/// A pruning session over one model: resolves config_list, asks the pruner for masks, keeps
/// the masks beside the weights, applies them in place, masks gradients, and re-applies masks
/// after every optimizer step (also masking momentum/Adam state) so that pruned weights stay
/// exactly zero during fine-tuning. Forwards update_epoch/step to the pruner.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/session_core.h"
#include "lithe/sdk/pruner.h"

namespace torch::optim {
class Optimizer;
}

namespace lithe::host {

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

class PruningSession final : public SessionCore {
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
  /// Tells the session that the weights were changed on purpose outside it (loaded, perturbed,
  /// stepped by code that re-applies the masks itself), so step() and update_epoch() accept
  /// them as they are now.
  void accept_weight_changes() { record_weight_fingerprints(); }
  /// Start of epoch `epoch` (forwarded to the pruner). Checks the weights as step() does.
  void update_epoch(int64_t epoch) override;
  /// End of a training batch (forwarded to the pruner). Once compress() ran, fails with
  /// sdk::Error(kInvalidConfig) naming session.optimizer_step(optimizer) when a selected
  /// layer's weights changed since the session last touched them: an optimizer that stepped
  /// outside the session (optimizer.step()) leaves schedules such as AGP at their first
  /// sparsity and would end the run with the wrong masks and no word.
  void step() override;
  /// optimizer.step(), then mask update + re-application + optimizer state masking, then the
  /// pruner's after_optimizer_step (NNI's patched optimizer.step).
  void optimizer_step(torch::optim::Optimizer& optimizer) override;
  /// Multiplies momentum / Adam moments of masked weights by their masks.
  void mask_optimizer_state(torch::optim::Optimizer& optimizer);

  /// NNI's mask.pth content: layer -> (weight mask, bias mask or undefined).
  std::vector<std::pair<std::string, sdk::Masks>> masks() const;
  std::vector<LayerReport> report() const;

  // sdk::CompressionContext, besides what SessionCore provides
  /// Recomputes and applies the masks now (e.g. after a plugin changed its criterion). From
  /// attach() it runs the mask pass alone (a schedule that prunes in rounds while it attaches);
  /// from calc_mask it is refused.
  void update_masks_now() override;
  /// Refused from calc_mask (the pass in flight would mix masks of two states).
  void restore_snapshot(int64_t handle) override;
  /// TrainingHooks: the masks (weight and bias) of every layer.
  std::vector<at::Tensor> replicated_state() const override;

 private:
  void register_gradient_hooks();
  void after_model_state_restored() override { apply_masks(); }
  std::vector<sdk::Masks> capture_masks() const override;
  void restore_masks(const std::vector<sdk::Masks>& masks) override;
  /// Pruner::calc_mask for every layer, then the masks applied (the body of update_masks).
  void run_mask_pass();
  /// Remembers a fingerprint of every selected weight, as the session leaves it.
  void record_weight_fingerprints();
  /// Throws when a weight's fingerprint moved since record_weight_fingerprints (see step()).
  void check_weights_unchanged_outside(const char* call) const;

  std::unique_ptr<sdk::Pruner> pruner_;
  std::vector<std::pair<at::Tensor, unsigned>> gradient_hooks_;  // (tensor, hook index)
  bool attached_ = false;
  std::string attach_failure_;  // why the pruner's attach threw; the session is then unusable
  bool in_update_ = false;      // inside attach/calc_mask (a fine_tune there holds masks)
  bool in_calc_mask_ = false;   // inside the calc_mask pass: update_masks_now would recurse
  std::vector<double> weight_fingerprints_;  // per layer, as the session last left the weight
  // False until the pruner returned masks for the first time: until then every mask is all
  // ones (a pruner that trains before deciding, e.g. ADMM, trains then without re-masking).
  bool masks_may_prune_ = false;
};

}  // namespace lithe::host
