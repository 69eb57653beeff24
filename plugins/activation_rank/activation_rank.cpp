// Activation-based filter pruning of Conv2d layers (NNI v2.0 ActivationAPoZRankFilterPruner and
// ActivationMeanRankFilterPruner, reference §2.0, §2.1, §2.7). NNI hooks every compressed conv,
// stores act(conv output) of every forward and, once statistics_batch_num batches were seen,
// ranks the filters over all of them: APoZ by 1 − (fraction of zero activations), mean by the
// mean activation; the smallest go. Lithe keeps running per-channel reductions instead of the
// activations (O(C) memory; APoZ bit-identical, mean accumulated in float64 where NNI takes a
// float32 mean, equal to ~1e-7 relative) and leaves mask making to the SDK's filter pruner
// (exact k, ties to the lower index, optional dependency-aware mode).
#include "activation_rank.h"

#include <ATen/ATen.h>
#include <lithe/sdk.h>
#include <lithe/sdk/filter_pruning.h>

#include <string>
#include <utility>
#include <vector>

namespace lithe::plugins::activation_rank {
namespace {

const char* algorithm_name(Criterion criterion) {
  return criterion == Criterion::kApoz ? "apoz" : "mean_activation";
}

}  // namespace

const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::sparsity_or_total_keys())
          .add(sdk::filter_pruner_keys())
          .add(sdk::option("activation", sdk::OptionType::kString,
                           "the activation applied to each Conv2d output before it is counted")
                   .defaults_to("\"relu\"")
                   .one_of({"relu", "relu6"}))
          .add(sdk::option("statistics_batch_num", sdk::OptionType::kInteger,
                           "forwards per layer observed before filters are ranked")
                   .defaults_to("1")
                   .above(0));
  return schema;
}

ActivationRankOptions read_options(const sdk::Options& options) {
  ActivationRankOptions out;
  const std::string activation = option_keys().read<std::string>(options, "activation");
  out.activation = activation == "relu" ? Activation::kRelu : Activation::kRelu6;
  out.statistics_batch_num = option_keys().read<int64_t>(options, "statistics_batch_num");
  return out;
}

ActivationRankScorer::ActivationRankScorer(Criterion criterion, ActivationRankOptions options)
    : state_(std::make_shared<State>(State{criterion, options, {}, {}})) {}

// The collector (if still registered) holds its own reference to the state; the context may
// already be gone when a pruner is destroyed, so nothing is unregistered here.
ActivationRankScorer::~ActivationRankScorer() = default;

void ActivationRankScorer::attach(sdk::CompressionContext& context) {
  context_ = &context;
  if (!collecting()) {
    start_collecting();
  }
  std::shared_ptr<State> state = state_;
  context.add_end_of_data_callback([state] { check_end_of_data(*state); });
}

void ActivationRankScorer::check_end_of_data(const State& state) {
  if (state.waiting.empty()) {
    return;
  }
  const std::string& layer = *state.waiting.begin();
  const auto it = state.layers.find(layer);
  const int64_t seen = it == state.layers.end() ? 0 : it->second.batches;
  LITHE_CHECK(false, sdk::Errc::kInvalidConfig, "layer '", layer, "': ",
              algorithm_name(state.criterion), " ranks filters after statistics_batch_num = ",
              state.options.statistics_batch_num, " batches of activations, but the data ended after ",
              seen, "; the layer", state.waiting.size() > 1 ? " (and " : "",
              state.waiting.size() > 1 ? std::to_string(state.waiting.size() - 1) + " more)" : "",
              " would stay unpruned. Give more batches (--calibration-batches N or --epochs N) "
              "or lower statistics_batch_num");
}

void ActivationRankScorer::start_collecting() {
  state_->layers.clear();
  // reset_layers_ is kept: a layer with nothing to prune this round (e.g. AGP's early epochs)
  // may have reported done before another layer restarted collection, and will not report
  // again in this round.
  // The collector shares the state, not `this`: the host may keep it a little longer than the
  // pruner (e.g. while a session is torn down).
  std::shared_ptr<State> state = state_;
  collector_id_ = context_->add_activation_collector(
      [state](const sdk::LayerView& layer, const at::Tensor& output) {
        accumulate(*state, layer, output);
      });
}

void ActivationRankScorer::observe(const sdk::LayerView& layer, const at::Tensor& output) {
  accumulate(*state_, layer, output);
}

void ActivationRankScorer::accumulate(State& state, const sdk::LayerView& layer,
                                      const at::Tensor& output) {
  LITHE_CHECK(output.dim() == 4, sdk::Errc::kShapeMismatch, "layer '", layer.name(), "': ",
              algorithm_name(state.criterion),
              " needs 4-dimensional outputs [N, C, H, W] to rank filters, got shape ",
              output.sizes());
  // Runs on every forward, in training too: no autograd graph, one temporary at most.
  at::NoGradGuard no_grad;
  const at::Tensor out = output.detach();
  const std::vector<int64_t> dims{0, 2, 3};
  at::Tensor reduced;
  if (state.criterion == Criterion::kApoz) {
    // relu(x) == 0 and relu6(x) == 0 both hold exactly when x <= 0, so the activation itself
    // need not be materialised; counts are exact integers, hence 1 − count/total below is
    // bit-identical to NNI's float64 sum of the eq(0) mask.
    reduced = out.le(0).sum(dims, /*keepdim=*/false, at::kLong);
  } else {
    const at::Tensor act = state.options.activation == Activation::kRelu
                               ? at::clamp_min(out, 0)
                               : at::clamp(out, 0, 6);  // NNI's relu6 = hardtanh(0, 6)
    reduced = act.sum(dims, /*keepdim=*/false, at::kDouble);  // float64 accumulation
  }
  LayerStatistics& stats = state.layers[layer.name()];
  if (stats.batches == 0) {
    stats.accumulated = reduced;
  } else {
    LITHE_CHECK(stats.accumulated.size(0) == reduced.size(0), sdk::Errc::kShapeMismatch,
                "layer '", layer.name(), "': ", algorithm_name(state.criterion),
                " saw outputs with ", stats.accumulated.size(0),
                " channels before, now an output of shape ", output.sizes());
    stats.accumulated.add_(reduced);
  }
  stats.elements_per_channel += out.size(0) * out.size(2) * out.size(3);
  stats.batches += 1;
}

std::optional<at::Tensor> ActivationRankScorer::filter_scores(sdk::LayerView& layer) {
  LITHE_CHECK(context_ != nullptr, sdk::Errc::kInternal, "layer '", layer.name(), "': ",
              algorithm_name(state_->criterion), " was asked for filter scores before attach()");
  if (!collecting()) {
    // Asked again after every layer was done (e.g. AGP at a later epoch): NNI would have no
    // hooks left; Lithe gathers fresh statistics from the next forwards instead.
    start_collecting();
    state_->waiting.insert(layer.name());
    return std::nullopt;
  }
  const auto it = state_->layers.find(layer.name());
  if (it == state_->layers.end() || it->second.batches < state_->options.statistics_batch_num) {
    state_->waiting.insert(layer.name());
    return std::nullopt;
  }
  const LayerStatistics& stats = it->second;
  // Data-parallel runs: the counts and sums of every rank's share of the batches, as one
  // process would have seen them (a single process: unchanged).
  std::vector<at::Tensor> totals = {stats.accumulated.to(at::kCPU, /*non_blocking=*/false,
                                                         /*copy=*/true),  // the SDK's rule
                                    at::tensor({stats.elements_per_channel}, at::kLong)};
  context_->reduce_over_processes(totals, sdk::Reduction::kSum);
  const at::Tensor& accumulated = totals[0];
  const double total = static_cast<double>(totals[1].item<int64_t>());
  if (state_->criterion == Criterion::kApoz) {
    // NNI: ones_like(apoz) − zeros.sum(float64) / numel, i.e. 1 − APoZ (smaller = more zeros).
    return 1.0 - accumulated.to(at::kDouble) / total;
  }
  return accumulated / total;
}

void ActivationRankScorer::on_masks_computed(const sdk::LayerView& layer) {
  state_->waiting.erase(layer.name());
  state_->layers.erase(layer.name());
  reset_layers_.insert(layer.name());
  if (context_ == nullptr) {
    return;
  }
  for (const sdk::LayerView* compressed : context_->layers()) {
    if (reset_layers_.count(compressed->name()) == 0) {
      return;  // some layer still waits for its masks: keep collecting
    }
  }
  // Every layer reported: the round is over, whether or not a collector was running (a round
  // in which no layer had anything to prune never starts one).
  reset_layers_.clear();
  if (collecting()) {
    context_->remove_activation_collector(collector_id_);
    collector_id_ = 0;
  }
  // Layers reset earlier kept accumulating until now; a later round starts from nothing.
  state_->layers.clear();
}

int64_t ActivationRankScorer::batches_seen(const std::string& layer) const {
  const auto it = state_->layers.find(layer);
  return it == state_->layers.end() ? 0 : it->second.batches;
}

namespace {

void register_criterion(sdk::Registry& registry, Criterion criterion, const char* nni_class,
                        const char* masker_description, const char* pruner_description) {
  const char* name = algorithm_name(criterion);
  // The masker reads the same options (AGP and other schedules pass their algorithm options
  // through, as NNI passes **algo_kwargs to the masker); defaults when they are empty.
  registry.add_masker({name, masker_description},
                      [criterion, name](const sdk::Options& options, const sdk::Registry&) {
                        return sdk::make_filter_masker(
                            std::make_shared<ActivationRankScorer>(criterion,
                                                                   read_options(options)),
                            name);
                      });
  registry.add_pruner({name, pruner_description},
                      [criterion, name](const sdk::Options& options, const sdk::Registry&) {
                        return sdk::make_filter_pruner(
                            std::make_shared<ActivationRankScorer>(criterion,
                                                                   read_options(options)),
                            name, options);
                      });
  registry.add_nni_counterpart({name, nni_class, "activation_statistics"});
  registry.describe_options(name, option_keys());
}

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  register_criterion(
      registry, Criterion::kApoz, "ActivationAPoZRankFilterPruner",
      "the Conv2d filters whose activations are most often zero (highest APoZ)",
      "one-shot pruning of the Conv2d filters with the highest average percentage of zero "
      "activations");
  register_criterion(registry, Criterion::kMean, "ActivationMeanRankFilterPruner",
                     "the Conv2d filters with the smallest mean activation",
                     "one-shot pruning of the Conv2d filters with the smallest mean activation");
}

}  // namespace lithe::plugins::activation_rank

LITHE_PLUGIN("activation_rank", "1.2.0", lithe::plugins::activation_rank::register_algorithms)
