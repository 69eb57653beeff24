#pragma once
/// \file
/// CompressionContext: what the host offers an algorithm during a compression session.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"

namespace lithe::sdk {

class Registry;

/// Called with a compressed layer and that layer's forward output, after every forward of it,
/// in training and in evaluation (NNI's forward hook `(module, input, output)`, output only).
/// The tensor is the real output: do not modify it in place.
using ActivationCollector = std::function<void(const LayerView& layer, const at::Tensor& output)>;

/// A module of the model that has a weight (weighted_modules, SDK 1.9).
struct ModuleSummary {
  std::string name;                   ///< dotted, as LayerView::name() for compressed ones
  std::string type;                   ///< NNI's op type: "Conv2d", "Linear", "BatchNorm2d", …
  std::vector<int64_t> weight_shape;  ///< the weight's sizes as the model has them now
  bool compressed = false;            ///< whether it is one of layers()
};

/// What the model costs once sped up (measure_cost, SDK 1.10): the channels the current masks
/// zero removed, as `lithe speedup` removes them, and counted as `lithe flops` counts.
struct ModelCost {
  int64_t flops = 0;         ///< NNI's count (convolutions and Linear layers) at batch 1
  int64_t params = 0;        ///< every parameter of the sped-up model
  int64_t dense_flops = 0;   ///< the same counts of the model as the session found it
  int64_t dense_params = 0;
};

/// How reduce_over_processes combines the processes' values, element-wise.
enum class Reduction : int { kSum = 0, kMin = 1, kMax = 2 };

/// Owned by the host; valid for the whole session.
class LITHE_SDK_API CompressionContext {
 public:
  virtual ~CompressionContext();
  /// The compressed layers, in named_modules order (index() == position).
  virtual std::vector<LayerView*> layers() = 0;
  /// Registers `collector` on every compressed layer; returns its id (ids start at 1).
  /// Throws sdk::Error(kUnsupported) for models whose layers cannot be observed.
  virtual int64_t add_activation_collector(ActivationCollector collector) = 0;
  /// Removes a collector; throws sdk::Error(kInvalidConfig) for an unknown id.
  virtual void remove_activation_collector(int64_t id) = 0;
  /// All registered algorithms, e.g. to build a masker by name.
  virtual const Registry& registry() const = 0;

  // --- appended in SDK 1.1: host-implemented, so plugins built against 1.0 keep working ---

  /// Registers `callback` to run after every optimizer step, once the masks were updated and
  /// re-applied and the pruner's after_optimizer_step ran (NNI's later patch_optimizer tasks,
  /// e.g. TaylorFO's contribution accumulation). Callbacks run in registration order. Returns
  /// an id (ids start at 1).
  virtual int64_t add_optimizer_step_callback(std::function<void()> callback) = 0;
  /// Removes an optimizer-step callback; throws sdk::Error(kInvalidConfig) for an unknown id.
  virtual void remove_optimizer_step_callback(int64_t id) = 0;

  /// Runs one mask update now, exactly as after an optimizer step: Pruner::calc_mask for every
  /// layer, then the masks are applied to the weights. Must not be called from calc_mask.
  virtual void update_masks_now() = 0;

  /// Copies every parameter and buffer of the model (not only the compressed layers); returns
  /// a handle for restore_model_state (handles start at 1).
  virtual int64_t save_model_state() = 0;
  /// Copies a saved state back into the model, re-applies the current masks, and resets the
  /// optimizer's per-parameter state (momentum, Adam moments) before its next step, as NNI's
  /// LotteryTicket reset does. Throws sdk::Error(kInvalidConfig) for an unknown handle.
  virtual void restore_model_state(int64_t handle) = 0;

  /// Sets of layers whose output channels must be pruned alike because their outputs meet in
  /// an element-wise add (or a concatenation along another dimension than channels), built
  /// from the model's graph like NNI's ChannelDependency. Every Conv2d module of the model
  /// appears in exactly one set (a singleton when it has no partner); since SDK 1.5 so does
  /// every Conv1d, Conv3d and Linear module (filter pruning's other layer types; a set may mix
  /// types). Sets and their members are in graph order; names are dotted module names,
  /// compressed or not.
  /// Throws sdk::Error(kUnsupported) when the model's graph cannot be analysed (C++-frontend
  /// models).
  virtual std::vector<std::vector<std::string>> channel_dependency_sets() = 0;
  /// NNI's GroupDependency: for every Conv2d module (since SDK 1.5 every Conv1d/2d/3d), the
  /// largest `groups` among itself and the grouped convolutions its output feeds directly;
  /// Linear modules have no entry (one group). Same errors as channel_dependency_sets.
  virtual std::map<std::string, int64_t> group_dependencies() = 0;

  /// Data-parallel runs (one process per rank, each seeing its shard of every batch): combines
  /// `tensors` element-wise over all processes, in place, with the same bytes on every
  /// process; in a single process (the default) it leaves them as they are. Algorithms that
  /// learn from the data a forward sees call it before using what they accumulated, so every
  /// process computes what a single process would from the whole batch: activation counts and
  /// sums (kSum), a batch's range (kMin, kMax). Every process must call it at the same point
  /// with tensors of the same shapes and dtypes (CPU, contiguous). Gradients need no call: the
  /// host averages them before the optimizer step. Throws sdk::Error(kIo) when another process
  /// died or stopped answering. Since SDK 1.3.
  virtual void reduce_over_processes(std::vector<at::Tensor>& tensors, Reduction op);

  // --- appended in SDK 1.4 (not pure: contexts written for 1.3, e.g. plugin authors' test
  // fakes, keep compiling; Lithe's host implements them) ---

  /// Registers `callback` to run each time the data of a pass has run out: after a
  /// calibration pass (`lithe compress --calibration-batches N`, the host's calibrate()), after
  /// training (`--epochs N`, the host's train()), and when an embedder's own loop calls
  /// session.end_of_data(). A data-driven algorithm uses it to fail loudly instead of leaving
  /// layers unpruned: when a layer saw fewer batches than the algorithm needs, throw
  /// sdk::Error(kInvalidConfig) naming the layer, the option and both counts (the host adds
  /// the algorithm's name). Runs in registration order. Returns an id (ids start at 1); the
  /// default implementation never runs the callback and returns 0.
  virtual int64_t add_end_of_data_callback(std::function<void()> callback);
  /// Removes an end-of-data callback; throws sdk::Error(kInvalidConfig) for an unknown id
  /// (the default implementation accepts any id).
  virtual void remove_end_of_data_callback(int64_t id);
  /// Declares that the algorithm's masks follow the epoch (a schedule such as AGP): the host
  /// then fails the first optimizer step after compress() that comes before any
  /// update_epoch(), naming session.update_epoch(epoch); without it the schedule would stay at
  /// its first sparsity and the run would end with no word. Call it from attach(). The default
  /// implementation does nothing.
  virtual void require_epoch_updates();

  // --- appended in SDK 1.7: algorithms that shape training itself (NNI's Slim with sparse
  // training, ADMM) or ask how good a mask is. Not pure; the defaults say the host offers
  // none of it (kUnsupported), so contexts written for 1.6 keep compiling. ---

  /// Adds `term()` to every training batch's loss, after the task loss (cross-entropy, or the
  /// distillation loss) was computed and before backward: its gradient reaches the weights
  /// through autograd, so a term built from LayerView::weight() (e.g. scale · Σ|γ|, Slim's
  /// penalty) trains them. `term` must return a defined floating scalar tensor on the loss's
  /// device; anything else fails the step naming the plugin. Terms run in registration order,
  /// in Lithe's trainer (fine_tune(), `lithe compress --epochs`, `lithe train`) and in an
  /// embedder's loop that adds session.loss_terms() to its loss. Not during calibration
  /// passes (they do not train). Returns an id (ids start at 1).
  virtual int64_t add_loss_term(std::function<at::Tensor()> term);
  /// Removes a loss term; throws sdk::Error(kInvalidConfig) for an unknown id.
  virtual void remove_loss_term(int64_t id);

  /// Registers `callback` to run on every training step between backward (gradients averaged
  /// over processes) and the optimizer's step, in registration order: NNI's trainer
  /// `callback()` (ADMM's proximal update `W -= row · (W − Z + U)`, written into the weight's
  /// data without autograd; the masks are re-applied after the step). Not run during
  /// calibration passes. Returns an id (ids start at 1).
  virtual int64_t add_before_optimizer_step_callback(std::function<void()> callback);
  /// Removes it; throws sdk::Error(kInvalidConfig) for an unknown id.
  virtual void remove_before_optimizer_step_callback(int64_t id);

  /// Whether evaluate() can run: the CLI has test data (`--data DIR` with a test split, or
  /// `--test-data`), an embedder called session.set_evaluator.
  virtual bool can_evaluate() const;
  /// The host's metric of the model as it is now (masks applied), higher is better: Lithe's
  /// top-1 accuracy on the test data in the CLI, the embedder's callback in C++. Evaluation
  /// forwards are not seen by activation collectors. Throws sdk::Error(kUnsupported) when
  /// can_evaluate() is false, naming what would provide one.
  virtual double evaluate();

  /// Whether fine_tune() can run: the CLI has training data (`--data DIR`), an embedder called
  /// session.set_fine_tuner.
  virtual bool can_fine_tune() const;
  /// Trains the model for `epochs` (> 0) epochs now, with the session's training options (the
  /// CLI's `--optimizer`, `--lr`, … on `--data`; the embedder's callback in C++), loss terms
  /// and before-step callbacks included; each call shuffles with its own seed, derived from
  /// `--seed` and the call's ordinal. Called from attach() or calc_mask() (an algorithm that
  /// trains before it decides, like ADMM), the current masks are held fixed and re-applied
  /// after every step, and the algorithm's own update_epoch/step/after_optimizer_step are not
  /// called for these epochs. Throws sdk::Error(kUnsupported) when can_fine_tune() is false,
  /// kInvalidConfig for epochs <= 0.
  virtual void fine_tune(int64_t epochs);

  // --- appended in SDK 1.8: snapshots for algorithms that try a mask and go back (search,
  // schedules that keep the best of several rounds). Not pure; the defaults refuse
  // (kUnsupported), so contexts written for 1.7 keep compiling. ---

  /// Copies every parameter and buffer of the model and every compressed layer's masks (a
  /// quantization session has none); returns a handle (handles start at 1 and are never
  /// reused). The copies stay on the model's device; release_snapshot frees them.
  virtual int64_t save_snapshot();
  /// Puts a snapshot back: weights and buffers, and the masks exactly as they were saved
  /// (applied to the weights), whatever the pruner computed since; the pruner's own state is
  /// its own to restore. The next optimizer step starts from a fresh optimizer state (as
  /// restore_model_state). Unlike restore_model_state, which keeps the current masks (NNI's
  /// LotteryTicket rewinds weights under new masks), the model is as it was at save_snapshot.
  /// Throws sdk::Error(kInvalidConfig) for an unknown or released handle. Not from calc_mask.
  virtual void restore_snapshot(int64_t handle);
  /// Frees a snapshot; throws sdk::Error(kInvalidConfig) for an unknown or released handle.
  virtual void release_snapshot(int64_t handle);

  // --- appended in SDK 1.9: the model beyond the compressed layers, for algorithms whose
  // arithmetic counts the whole model (NNI's NetAdapt divides its step by every Conv2d and
  // Linear weight, and by the layers before and after one, compressed or not). Not pure; the
  // default refuses (kUnsupported), so contexts written for 1.8 keep compiling. ---

  /// Every module of the model that has a weight, compressed or not, in named_modules order.
  /// Throws sdk::Error(kUnsupported) when the host offers none (a test double, an older
  /// host): an algorithm then falls back to layers() and says so.
  virtual std::vector<ModuleSummary> weighted_modules();

  // --- appended in SDK 1.10: what the masks buy, for algorithms that search to a budget of
  // FLOPs or parameters instead of a sparsity. Not pure; the defaults refuse (kUnsupported),
  // so contexts written for 1.9 keep compiling. ---

  /// Whether measure_cost() can run: `lithe compress` on a TorchScript model with data (the
  /// FLOPs are counted on one sample of it), an embedder that called session.set_cost_meter.
  virtual bool can_measure_cost() const;
  /// The model's cost as the current masks leave it once sped up, and as the session found it
  /// (ModelCost). Masks that remove no whole channel (level pruning, or filters whose channel
  /// a residual add still needs) change neither count. A speedup per call: call it once per
  /// candidate, not per layer. Throws sdk::Error(kUnsupported) when can_measure_cost() is
  /// false, naming what would provide one.
  virtual ModelCost measure_cost();
};

}  // namespace lithe::sdk
