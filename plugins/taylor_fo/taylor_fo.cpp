// Taylor first-order filter pruning of Conv1d/2d/3d and Linear layers (NNI v2.0
// TaylorFOWeightFilterPruner, reference §2.0, §2.1, §2.6; v2.0 takes Conv2d only, departure
// 6). After each of the first statistics_batch_num optimizer steps, every
// filter's contribution grows by Σ (W · ∂L/∂W)² over its weights (NNI's element-wise form, not
// the paper's (Σ W∇W)²); the filters with the smallest totals are pruned. The step callback runs
// after the host's mask update, as NNI's calc_contributions runs after its update_mask patch, so
// the masks appear at the step after the statistics_batch_num-th. Mask making (exact k, ties to
// the lower index, dependency-aware mode) is the SDK's filter pruner.
#include "taylor_fo.h"

#include <ATen/ATen.h>
#include <lithe/sdk.h>
#include <lithe/sdk/filter_pruning.h>

#include <string>
#include <utility>
#include <vector>

namespace lithe::plugins::taylor_fo {
namespace {

constexpr const char* kAlgorithm = "taylor_fo";

}  // namespace

const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::sparsity_or_total_keys())
          .add(sdk::filter_pruner_keys())
          .add(sdk::option("statistics_batch_num", sdk::OptionType::kInteger,
                           "optimizer steps whose gradients are summed before filters are ranked")
                   .defaults_to("1")
                   .above(0));
  return schema;
}

int64_t read_statistics_batch_num(const sdk::Options& options) {
  return option_keys().read<int64_t>(options, "statistics_batch_num");
}

at::Tensor step_contribution(const at::Tensor& weight, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  // NNI: (w * w.grad).data.pow(2).view(F, -1).sum(dim=1) — same ops, same order, same dtype.
  return (weight.detach() * grad.detach()).pow(2).reshape({weight.size(0), -1}).sum(1);
}

TaylorFoScorer::TaylorFoScorer(int64_t statistics_batch_num)
    : state_(std::make_shared<State>(State{statistics_batch_num, 0, {}, {}})) {}

// The callback (owned by the context) holds its own reference to the state; the context may
// already be gone when a pruner is destroyed, so nothing is unregistered here.
TaylorFoScorer::~TaylorFoScorer() = default;

void TaylorFoScorer::attach(sdk::CompressionContext& context) {
  context_ = &context;
  std::shared_ptr<State> state = state_;
  sdk::CompressionContext* ctx = &context;
  context.add_optimizer_step_callback([state, ctx] { accumulate(*state, ctx->layers()); });
  context.add_end_of_data_callback([state] { check_end_of_data(*state); });
}

void TaylorFoScorer::check_end_of_data(const State& state) {
  if (state.waiting.empty()) {
    return;
  }
  LITHE_CHECK(false, sdk::Errc::kInvalidConfig, "layer '", *state.waiting.begin(), "': ",
              kAlgorithm, " ranks filters after statistics_batch_num = ",
              state.statistics_batch_num, " optimizer steps with data, but the data ended after ",
              state.iterations, "; the layer", state.waiting.size() > 1 ? " (and " : "",
              state.waiting.size() > 1 ? std::to_string(state.waiting.size() - 1) + " more)" : "",
              " would stay unpruned. Give more batches (--calibration-batches N or --epochs N) "
              "or lower statistics_batch_num");
}

void TaylorFoScorer::accumulate(const std::vector<sdk::LayerView*>& layers) {
  accumulate(*state_, layers);
}

void TaylorFoScorer::accumulate(State& state, const std::vector<sdk::LayerView*>& layers) {
  if (state.iterations >= state.statistics_batch_num) {
    return;  // enough steps for this round; NNI stops accumulating too
  }
  // Check every layer first, so that a failing step leaves the statistics consistent.
  for (const sdk::LayerView* layer : layers) {
    const at::Tensor& grad = layer->weight().grad();
    LITHE_CHECK(grad.defined(), sdk::Errc::kUnsupportedLayer, "layer '", layer->name(), "': ",
                kAlgorithm,
                " needs the weight's gradient at every optimizer step, but the weight has none; "
                "call loss.backward() before the optimizer step (and keep the weight trainable)");
    LITHE_CHECK(grad.sizes() == layer->weight().sizes(), sdk::Errc::kShapeMismatch, "layer '",
                layer->name(), "': ", kAlgorithm, " got a gradient of shape ", grad.sizes(),
                " for a weight of shape ", layer->weight().sizes());
  }
  for (const sdk::LayerView* layer : layers) {
    at::Tensor step = step_contribution(layer->weight(), layer->weight().grad());
    auto it = state.contributions.find(layer->name());
    if (it == state.contributions.end()) {
      state.contributions.emplace(layer->name(), std::move(step));
    } else {
      it->second.add_(step);  // NNI: wrapper.contribution += taylor (in the weight's dtype)
    }
  }
  state.iterations += 1;
}

std::optional<at::Tensor> TaylorFoScorer::filter_scores(sdk::LayerView& layer) {
  if (state_->iterations < state_->statistics_batch_num) {
    state_->waiting.insert(layer.name());
    return std::nullopt;
  }
  const auto it = state_->contributions.find(layer.name());
  LITHE_CHECK(it != state_->contributions.end(), sdk::Errc::kInternal, "layer '", layer.name(),
              "': ", kAlgorithm, " counted ", state_->iterations,
              " optimizer steps but recorded no contribution for this layer");
  return it->second.clone();
}

void TaylorFoScorer::on_masks_computed(const sdk::LayerView& layer) {
  state_->waiting.erase(layer.name());
  done_layers_.insert(layer.name());
  if (context_ == nullptr) {
    return;
  }
  for (const sdk::LayerView* compressed : context_->layers()) {
    if (done_layers_.count(compressed->name()) == 0) {
      return;  // some layer still uses this round's contributions
    }
  }
  done_layers_.clear();
  state_->contributions.clear();
  state_->iterations = 0;
}

std::optional<at::Tensor> TaylorFoScorer::contribution(const std::string& layer) const {
  const auto it = state_->contributions.find(layer);
  if (it == state_->contributions.end()) {
    return std::nullopt;
  }
  return it->second;
}

void register_algorithms(sdk::Registry& registry) {
  // The masker reads the same option (schedules pass their algorithm options through, as NNI
  // passes **algo_kwargs to the masker); the default when they are empty.
  registry.add_masker(
      {kAlgorithm, "the Conv/Linear filters with the smallest Taylor first-order contribution"},
      [](const sdk::Options& options, const sdk::Registry&) {
        return sdk::make_filter_masker_for(
            sdk::filter_op_types(),
            std::make_shared<TaylorFoScorer>(read_statistics_batch_num(options)), kAlgorithm);
      });
  registry.add_pruner(
      {kAlgorithm,
       "one-shot pruning of the Conv1d/2d/3d and Linear filters with the smallest Taylor "
       "first-order contribution, gathered over the first optimizer steps"},
      [](const sdk::Options& options, const sdk::Registry&) {
        return sdk::make_filter_pruner_for(
            sdk::filter_op_types(),
            std::make_shared<TaylorFoScorer>(read_statistics_batch_num(options)), kAlgorithm,
            options);
      });
  registry.add_nni_counterpart({kAlgorithm, "TaylorFOWeightFilterPruner", "gradient_statistics"});
  registry.describe_options(kAlgorithm, option_keys());
}

}  // namespace lithe::plugins::taylor_fo

LITHE_PLUGIN("taylor_fo", "1.3.0", lithe::plugins::taylor_fo::register_algorithms)
