#pragma once
// Taylor first-order filter pruning of Conv2d layers (NNI v2.0 TaylorFOWeightFilterPruner).
// Declared for unit tests, which link this plugin's object library, call the scorer directly
// and register the plugin into their own registry.

#include <ATen/core/Tensor.h>
#include <lithe/sdk/context.h>
#include <lithe/sdk/filter_pruning.h>
#include <lithe/sdk/layer.h>
#include <lithe/sdk/option_spec.h>
#include <lithe/sdk/options.h>
#include <lithe/sdk/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lithe::plugins::taylor_fo {

/// Every key taylor_fo reads: sparsity, dependency_aware, dummy_input (the SDK's) and
/// "statistics_batch_num" (integer > 0, default 1).
const sdk::OptionSchema& option_keys();

/// Reads "statistics_batch_num" from `options` by option_keys(). Throws
/// sdk::Error(kInvalidConfig) naming options.path() + "/statistics_batch_num", the rule and the
/// value.
int64_t read_statistics_batch_num(const sdk::Options& options);

/// One optimizer step's contribution of every filter of a layer: Σ over the filter of
/// (W · ∂L/∂W)², computed in the weight's dtype exactly as NNI does
/// (`(w * w.grad).data.pow(2).view(F, -1).sum(dim=1)`), so float32 results are bit-identical.
/// `weight` and `grad` have the same shape [F, ...]; returns [F].
at::Tensor step_contribution(const at::Tensor& weight, const at::Tensor& grad);

/// The criterion: per-filter contributions accumulated over the first statistics_batch_num
/// optimizer steps (one counter for all layers, like NNI's pruner.iterations).
///
/// attach() registers an optimizer-step callback; the host runs it after each step, once the
/// masks were updated (NNI's patch order), so masks appear at the step after the
/// statistics_batch_num-th. Once masks were computed for every compressed layer, contributions
/// and counter are reset, so that a schedule asking again (AGP) uses fresh steps.
///
/// Not thread-safe (the host calls it from one thread).
class TaylorFoScorer final : public sdk::FilterScorer {
 public:
  explicit TaylorFoScorer(int64_t statistics_batch_num);
  ~TaylorFoScorer() override;

  /// Registers the optimizer-step callback (accumulate() over context.layers()) and an
  /// end-of-data callback that fails (kInvalidConfig, naming the layer, statistics_batch_num
  /// and the steps seen) when a layer still waits for its statistics: the data ran out before
  /// its filters could be ranked, so it would stay unpruned.
  void attach(sdk::CompressionContext& context) override;

  /// nullopt until statistics_batch_num steps were accumulated; then the layer's accumulated
  /// contributions (a copy, the weight's dtype, [F]).
  std::optional<at::Tensor> filter_scores(sdk::LayerView& layer) override;

  /// Once every compressed layer is done: contributions and step counter are reset.
  void on_masks_computed(const sdk::LayerView& layer) override;

  /// What the optimizer-step callback does: while fewer than statistics_batch_num steps were
  /// counted, adds step_contribution(weight, grad) of every layer in `layers`, then counts one
  /// step. Throws sdk::Error(kUnsupportedLayer) naming a layer whose weight has no gradient
  /// (loss.backward() did not run before the optimizer step, or the weight is frozen); nothing
  /// is accumulated then.
  void accumulate(const std::vector<sdk::LayerView*>& layers);

  /// Optimizer steps accumulated since the last reset.
  int64_t iterations() const { return state_->iterations; }
  /// The accumulated contributions of `layer`, or nullopt if none were recorded.
  std::optional<at::Tensor> contribution(const std::string& layer) const;

 private:
  // Shared with the registered callback, which may outlive this scorer inside the host.
  struct State {
    int64_t statistics_batch_num;
    int64_t iterations = 0;
    std::map<std::string, at::Tensor> contributions;
    std::set<std::string> waiting;  // layers asked for scores that could not be given yet
  };
  /// The end-of-data check: throws naming the first layer still waiting for statistics.
  static void check_end_of_data(const State& state);
  static void accumulate(State& state, const std::vector<sdk::LayerView*>& layers);

  std::shared_ptr<State> state_;
  sdk::CompressionContext* context_ = nullptr;
  std::set<std::string> done_layers_;  // layers whose masks were computed since the last reset
};

/// Registers masker and pruner "taylor_fo".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::taylor_fo
