#pragma once
// Activation-based filter pruning of Conv2d layers: NNI v2.0 ActivationAPoZRankFilterPruner
// ("apoz") and ActivationMeanRankFilterPruner ("mean_activation"). Declared for unit tests, which
// link this plugin's object library, call the scorer directly and register the plugin into their
// own registry.

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

namespace lithe::plugins::activation_rank {

/// Which statistic of the activated layer output ranks the filters.
enum class Criterion {
  kApoz,  ///< 1 − APoZ: the fraction of non-zero activations per channel (NNI returns 1 − APoZ)
  kMean,  ///< the mean activation per channel
};

/// The activation NNI applies to the conv output inside its forward hook.
enum class Activation { kRelu, kRelu6 };

/// Pruner / masker options shared by "apoz" and "mean_activation".
struct ActivationRankOptions {
  Activation activation = Activation::kRelu;
  int64_t statistics_batch_num = 1;  ///< forwards per layer before filters can be ranked
};

/// Every key apoz and mean_activation read: sparsity, dependency_aware, dummy_input (the SDK's),
/// "activation" and "statistics_batch_num".
const sdk::OptionSchema& option_keys();

/// Reads "activation" ("relu" | "relu6", default "relu") and "statistics_batch_num" (integer
/// > 0, default 1) from `options`. Throws sdk::Error(kInvalidConfig) naming options.path() +
/// "/key", the rule and the value.
ActivationRankOptions read_options(const sdk::Options& options);

/// The criterion of both pruners. It keeps running per-layer statistics of act(output) of every
/// compressed layer's forward (a per-channel count or float64 sum and the number of batches),
/// never the activations themselves, so memory is O(channels) whatever the number of batches.
///
/// Lifetime (NNI removes its hooks once masks were computed): attach() registers one activation
/// collector. on_masks_computed(layer) resets that layer's statistics; once every compressed
/// layer of the context was reset, the collector is removed. A later filter_scores() with no
/// collector registered (a schedule such as AGP asking again) registers it again and returns
/// nullopt, so that fresh statistics are gathered.
///
/// Not thread-safe (the host calls it from one thread; collectors run on the forward thread).
class ActivationRankScorer final : public sdk::FilterScorer {
 public:
  ActivationRankScorer(Criterion criterion, ActivationRankOptions options);
  ~ActivationRankScorer() override;

  /// Registers the activation collector on every compressed layer of `context` and remembers
  /// `context` (valid for the whole session) to register again later.
  void attach(sdk::CompressionContext& context) override;

  /// nullopt until `layer` has seen at least statistics_batch_num forwards since its last reset
  /// (or while the collector is being re-registered); otherwise one float64 score per output
  /// channel over every batch seen: APoZ 1 − zeros/(N·H·W), mean Σact/(N·H·W). Throws
  /// sdk::Error(kInternal) when called before attach().
  std::optional<at::Tensor> filter_scores(sdk::LayerView& layer) override;

  /// Resets `layer`'s statistics; removes the collector once every compressed layer was reset.
  void on_masks_computed(const sdk::LayerView& layer) override;

  /// What the collector does with one forward `output` of `layer`: act(output) reduced per
  /// channel into the layer's running statistics. `output` must be 4-D [N, C, H, W] with the
  /// same C as earlier batches of that layer, else sdk::Error(kShapeMismatch) naming the layer
  /// and the shape. Does not modify or keep `output`.
  void observe(const sdk::LayerView& layer, const at::Tensor& output);

  /// Batches of `layer` accumulated since its last reset (0 for an unknown layer).
  int64_t batches_seen(const std::string& layer) const;
  /// Whether an activation collector is currently registered.
  bool collecting() const { return collector_id_ != 0; }

 private:
  struct LayerStatistics {
    int64_t batches = 0;
    int64_t elements_per_channel = 0;  // Σ N·H·W over the batches
    at::Tensor accumulated;            // [C]: APoZ int64 zero counts, mean float64 sums
  };
  // Shared with the registered collector, which may outlive this scorer inside the host.
  struct State {
    Criterion criterion;
    ActivationRankOptions options;
    std::map<std::string, LayerStatistics> layers;
    std::set<std::string> waiting;  // layers asked for scores that could not be given yet
  };
  static void accumulate(State& state, const sdk::LayerView& layer, const at::Tensor& output);
  /// The end-of-data check: throws naming the first layer still waiting for statistics.
  static void check_end_of_data(const State& state);
  void start_collecting();

  std::shared_ptr<State> state_;
  sdk::CompressionContext* context_ = nullptr;
  int64_t collector_id_ = 0;  // 0: no collector registered
  std::set<std::string> reset_layers_;  // layers reset since the collector was registered
};

/// Registers masker and pruner "apoz" and "mean_activation".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::activation_rank
