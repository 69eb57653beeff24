// NNI's NetAdaptPruner (v2.0, reference §2.12): reach an overall sparsity S in steps, each step
// pruning one more layer a little, the layer chosen by trying every one:
//
//   delta = int(total weights · sparsity_per_iteration)
//   current = 0
//   while current < S:
//     for each layer (model order):
//       target = its sparsity now + delta / related(layer)        (skipped when ≥ 1)
//       from the state the last step left: masks of every layer pruned so far at its sparsity
//       and of this one at target (the base masker on the current weights), fine-tune
//       short_term_fine_tune_epochs (the host's trainer), evaluate
//       the best metric so far (strictly better; the first layer wins ties) is remembered,
//       weights and masks included
//     none: halve sparsity_per_iteration (and delta) and try again
//     else: the best layer keeps its target; the model becomes the best candidate (its
//           fine-tuned weights and its masks); current += sparsity_per_iteration
//
// related(layer) = its weight count × (1 − the previous layer's sparsity, if pruned) + the
// weights the next layer keeps: what one layer's channels touch in a chain.
//
// As NNI's, "total weights" counts every Conv2d and Linear module of the model, and the previous
// and next layers are the model's Conv2d/Linear modules in named_modules order, compressed or
// not (SDK 1.9 weighted_modules). A host that does not list them (a test double, an SDK 1.8
// host) leaves the compressed layers alone to count, with a warning; that agrees with NNI when
// every Conv2d/Linear module is compressed.
//
// Everything runs when the session attaches (compress()), through SDK 1.7's fine_tune and
// evaluate and SDK 1.8's snapshots.
//
// With a budget instead of a sparsity (`flops_budget` / `params_budget`, SDK 1.10's
// measure_cost), the resource is the sped-up model's FLOPs or parameters, as NetAdapt's paper
// has it, and a step lowers it by sparsity_per_iteration of the model's as it came:
//
//   used = cost now (a share of the model as it came)
//   while used > budget:
//     target = max(used − sparsity_per_iteration, budget)
//     for each layer (model order): its smallest sparsity above its current one whose masks
//       leave a sped-up model within target (bisected, 10 steps, at most 0.99; skipped when
//       even 0.99 does not reach it); fine-tune, evaluate, keep the best as above
//     none: halve sparsity_per_iteration and try again; stop (with a warning) below 1e-4
//   (a budget that every layer at 0.99 does not reach is refused before the first step)
//     else: the best layer keeps its sparsity; used = its cost
//
// Departures from NNI:
// - When no layer can take a step, NNI halves the step but not delta, so it tries the same
//   candidates again forever; Lithe halves both, and stops (keeping what it has, with a
//   warning) once a step would prune less than one weight.
// - A NaN or infinite metric is an error.
#include "net_adapt.h"

#include <lithe/sdk.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lithe::plugins::net_adapt {
namespace {

constexpr const char* kAlgorithm = "net_adapt";
constexpr double kMostSparsity = 0.99;  // a budget step prunes no layer further
constexpr int kBisectionSteps = 10;
constexpr double kSmallestBudgetStep = 1e-4;

const sdk::OptionSchema& net_adapt_keys() {
  static const sdk::OptionSchema schema = [] {
    sdk::OptionSchema keys;
    keys.add(sdk::search_target_keys());
    keys.add(sdk::option("optimize_mode", sdk::OptionType::kString,
                         "whether the evaluator's metric is better higher or lower")
                 .defaults_to("\"maximize\"")
                 .one_of({"maximize", "minimize"}));
    keys.add(sdk::option("base_algo", sdk::OptionType::kString,
                         "the masker that prunes each layer at its sparsity")
                 .defaults_to("\"l1\"")
                 .one_of({"level", "l1", "l2", "fpgm"}));
    keys.add(sdk::option("masker_options", sdk::OptionType::kObject,
                         "options passed to the masker's factory")
                 .defaults_to("{}"));
    keys.add(sdk::option("sparsity_per_iteration", sdk::OptionType::kNumber,
                         "the overall sparsity each step adds (with a budget: the share of "
                         "the model's cost each step removes)")
                 .defaults_to("0.05")
                 .above(0)
                 .below(1));
    keys.add(sdk::option("short_term_fine_tune_epochs", sdk::OptionType::kInteger,
                         "epochs of the host's fine-tuning of every candidate before it is "
                         "evaluated (NNI's short_term_fine_tuner; 0: none)")
                 .defaults_to("1")
                 .at_least(0));
    return keys;
  }();
  return schema;
}

// The best candidate of one step: its layer, sparsity, metric, the budget share it uses (budget
// search), and a snapshot of the model it left (its fine-tuned weights and masks). The first
// offer is always taken, later ones only when strictly better, so the first layer wins ties
// (NNI's). Owns the snapshot until adopt().
class BestCandidate {
 public:
  BestCandidate(sdk::CompressionContext& context, bool minimize)
      : context_(context), minimize_(minimize) {}
  BestCandidate(const BestCandidate&) = delete;
  BestCandidate& operator=(const BestCandidate&) = delete;
  ~BestCandidate() {
    if (layer_.has_value()) {
      try {
        context_.release_snapshot(state_);
      } catch (...) {  // unwinding from the search's own error: that one is reported
      }
    }
  }

  /// Keeps the candidate the model holds now when it is the first or strictly better.
  void offer(size_t layer, double sparsity, double metric, double used = 0.0) {
    if (layer_.has_value() && !(minimize_ ? metric < metric_ : metric > metric_)) {
      return;
    }
    if (layer_.has_value()) {
      context_.release_snapshot(state_);
    }
    const int64_t state = context_.save_snapshot();
    layer_ = layer;
    sparsity_ = sparsity;
    metric_ = metric;
    used_ = used;
    state_ = state;
  }

  bool found() const { return layer_.has_value(); }
  size_t layer() const { return *layer_; }
  double sparsity() const { return sparsity_; }
  double metric() const { return metric_; }
  double used() const { return used_; }

  /// Puts the best candidate's model back and frees its snapshot.
  void adopt() {
    context_.restore_snapshot(state_);
    context_.release_snapshot(state_);
    layer_.reset();
  }

 private:
  sdk::CompressionContext& context_;
  bool minimize_;
  std::optional<size_t> layer_;
  double sparsity_ = 0.0;
  double metric_ = 0.0;
  double used_ = 0.0;
  int64_t state_ = 0;
};

class NetAdaptPruner final : public sdk::Pruner {
 public:
  NetAdaptPruner(const sdk::Options& options, const sdk::Registry& registry)
      : minimize_(net_adapt_keys().read<std::string>(options, "optimize_mode") == "minimize"),
        base_algo_(net_adapt_keys().read<std::string>(options, "base_algo")),
        step_(net_adapt_keys().read<double>(options, "sparsity_per_iteration")),
        fine_tune_epochs_(net_adapt_keys().read<int64_t>(options, "short_term_fine_tune_epochs")),
        budget_(sdk::read_cost_budget(options)) {
    const sdk::Options masker_options =
        options.has("masker_options") ? options.child("masker_options") : sdk::Options();
    try {
      masker_ = registry.make_masker(sdk::base_algo_masker(base_algo_), masker_options);
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(),
                       options.path() + "/base_algo '" + base_algo_ + "': " + e.what());
    }
  }

  void validate_config(const sdk::Options& entry) const override {
    sdk::check_search_entry(entry, budget_, kAlgorithm);
  }

  void attach(sdk::CompressionContext& context) override {
    masker_->attach(context);
    const std::vector<sdk::LayerView*> layers = context.layers();
    LITHE_CHECK(!layers.empty(), sdk::Errc::kInvalidConfig,
                "net_adapt: the config_list selects no layer");
    LITHE_CHECK(!budget_.has_value() || context.can_measure_cost(), sdk::Errc::kUnsupported,
                "net_adapt: ", budget_ ? budget_->key() : "", " needs the sped-up model's "
                "cost, and the host cannot measure it (lithe compress: a TorchScript model and "
                "--data; C++: session.set_cost_meter)");
    LITHE_CHECK(context.can_evaluate(), sdk::Errc::kUnsupported,
                "net_adapt scores every candidate with the host's evaluator, and there is none "
                "(lithe compress: --data DIR with a test split, or --test-data; C++: "
                "session.set_evaluator)");
    LITHE_CHECK(fine_tune_epochs_ == 0 || context.can_fine_tune(), sdk::Errc::kUnsupported,
                "net_adapt fine-tunes every candidate for short_term_fine_tune_epochs (",
                fine_tune_epochs_, ") and the host cannot fine-tune (lithe compress: give "
                "--data; C++: session.set_fine_tuner), or set short_term_fine_tune_epochs 0");
    sparsity_.assign(layers.size(), 0.0);
    if (budget_.has_value()) {
      search_budget(context, layers);
    } else {
      search(context, layers, sdk::shared_sparsity(layers, kAlgorithm),
             read_chain(context, layers));
    }
  }

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    if (finished_) {
      return std::nullopt;  // the last step's masks are final
    }
    const double sparsity = sparsity_.at(layer.index());
    if (sparsity <= 0.0) {
      return sdk::Masks::keep_all(layer);  // not pruned yet (NNI: not in the generated config)
    }
    std::optional<sdk::Masks> masks = masker_->calc_mask(layer, sparsity);
    LITHE_CHECK(masks.has_value(), sdk::Errc::kInternal, "layer '", layer.name(),
                "': net_adapt's masker '", base_algo_, "' returned no masks");
    return masks;
  }

 private:
  // Weights of `layer` it keeps under its current masks.
  static double kept(const sdk::LayerView& layer) {
    return layer.masks().weight.sum().item<double>();
  }

  // The modules NNI's arithmetic walks, in named_modules order: the model's weighted modules
  // (SDK 1.9), or the compressed layers where the host does not list them. Returns the total
  // weight count of the Conv2d and Linear modules among them.
  int64_t read_chain(sdk::CompressionContext& context,
                     const std::vector<sdk::LayerView*>& layers) {
    chain_.clear();
    std::map<std::string, int64_t> index;
    for (const sdk::LayerView* layer : layers) {
      index[layer->name()] = layer->index();
    }
    try {
      for (const sdk::ModuleSummary& m : context.weighted_modules()) {
        int64_t weights = 1;
        for (const int64_t size : m.weight_shape) {
          weights *= size;
        }
        const auto found = index.find(m.name);
        chain_.push_back({m.name, m.type == "Conv2d" || m.type == "Linear", weights,
                          found == index.end() ? -1 : found->second});
      }
    } catch (const sdk::Error& e) {
      if (e.code() != sdk::Errc::kUnsupported) {
        throw;
      }
      LITHE_LOG(kWarn, "net_adapt: ", e.what(), "; counting the compressed layers alone, "
                "which agrees with NNI only when every Conv2d/Linear module is compressed");
      chain_.clear();
      for (const sdk::LayerView* layer : layers) {
        chain_.push_back({layer->name(), true, layer->weight().numel(), layer->index()});
      }
    }
    int64_t total = 0;
    for (const Link& link : chain_) {
      total += link.counted ? link.weights : 0;
    }
    return total;
  }

  // NNI's _calc_num_related_weights: the layer's weights, times (1 − the sparsity of the
  // Conv2d/Linear module before it, when that one is pruned), plus the weights the
  // Conv2d/Linear module after it keeps (all of them when it is not compressed).
  double related(const std::vector<sdk::LayerView*>& layers, size_t i) const {
    const auto at = std::find_if(chain_.begin(), chain_.end(), [&](const Link& link) {
      return link.layer == static_cast<int64_t>(i);
    });
    LITHE_CHECK(at != chain_.end(), sdk::Errc::kInternal, "net_adapt: layer '",
                layers[i]->name(), "' is not among the model's weighted modules");
    double weights = static_cast<double>(layers[i]->weight().numel());
    const auto before = std::find_if(std::make_reverse_iterator(at), chain_.rend(),
                                     [](const Link& link) { return link.counted; });
    if (before != chain_.rend() && before->layer >= 0 && sparsity_[before->layer] > 0.0) {
      weights *= 1.0 - sparsity_[before->layer];
    }
    const auto after = std::find_if(std::next(at), chain_.end(),
                                    [](const Link& link) { return link.counted; });
    if (after != chain_.end()) {
      weights += after->layer >= 0 ? kept(*layers[after->layer])
                                   : static_cast<double>(after->weights);
    }
    return weights;
  }

  void search(sdk::CompressionContext& context, const std::vector<sdk::LayerView*>& layers,
              double target, int64_t total) {
    double current = 0.0;
    auto delta = static_cast<double>(static_cast<int64_t>(static_cast<double>(total) * step_));
    int64_t step_count = 0;
    while (current < target) {
      const int64_t state = context.save_snapshot();
      BestCandidate best(context, minimize_);
      for (size_t i = 0; i < layers.size(); ++i) {
        context.restore_snapshot(state);
        const double layer_sparsity =
            1.0 - kept(*layers[i]) / static_cast<double>(layers[i]->weight().numel());
        const double candidate = layer_sparsity + delta / related(layers, i);
        if (candidate >= 1.0) {
          LITHE_LOG(kInfo, "net_adapt: layer '", layers[i]->name(), "' has too few weights "
                    "left for a step (", candidate, ")");
          continue;
        }
        prune_layer(context, state, i, candidate);
        const double metric = score(context, "layer '" + layers[i]->name() + "' at sparsity " +
                                                 std::to_string(candidate));
        LITHE_LOG(kInfo, "net_adapt: step ", step_count + 1, ", layer '", layers[i]->name(),
                  "' at sparsity ", candidate, ": metric ", metric);
        best.offer(i, candidate, metric);
      }
      if (!best.found()) {
        context.restore_snapshot(state);
        context.release_snapshot(state);
        step_ *= 0.5;
        delta = static_cast<double>(static_cast<int64_t>(static_cast<double>(total) * step_));
        if (delta < 1.0) {
          LITHE_LOG(kWarn, "net_adapt: no layer can take another step; stopped at overall "
                    "sparsity ", current, " of ", target);
          break;
        }
        LITHE_LOG(kInfo, "net_adapt: no layer can take a step; the step is now ", step_);
        continue;
      }
      const size_t chosen = best.layer();
      sparsity_[chosen] = best.sparsity();
      current += step_;
      ++step_count;
      LITHE_LOG(kInfo, "net_adapt: step ", step_count, " chose layer '", layers[chosen]->name(),
                "' at sparsity ", best.sparsity(), " (metric ", best.metric(), "); overall ",
                current, " of ", target);
      best.adopt();
      context.release_snapshot(state);
    }
    finished_ = true;
  }

  // The candidate of layer `i` at `sparsity` from the state `snapshot` holds: its masks applied,
  // the other layers at theirs.
  void prune_layer(sdk::CompressionContext& context, int64_t snapshot, size_t i,
                   double sparsity) {
    context.restore_snapshot(snapshot);
    const double previous = sparsity_[i];
    sparsity_[i] = sparsity;
    context.update_masks_now();
    sparsity_[i] = previous;
  }

  // Fine-tunes and evaluates the candidate the model holds now.
  double score(sdk::CompressionContext& context, const std::string& what) {
    if (fine_tune_epochs_ > 0) {
      context.fine_tune(fine_tune_epochs_);
    }
    const double metric = context.evaluate();
    LITHE_CHECK(std::isfinite(metric), sdk::Errc::kInvalidConfig, "net_adapt: the evaluator "
                "returned ", metric, " with ", what, "; a search needs finite metrics");
    return metric;
  }

  void search_budget(sdk::CompressionContext& context,
                     const std::vector<sdk::LayerView*>& layers) {
    const int64_t start = context.save_snapshot();
    sparsity_.assign(layers.size(), kMostSparsity);
    context.update_masks_now();
    const sdk::ModelCost most = context.measure_cost();
    sparsity_.assign(layers.size(), 0.0);
    context.restore_snapshot(start);
    context.release_snapshot(start);
    sdk::check_budget_reachable(*budget_, most, kMostSparsity, kAlgorithm);
    double used = budget_->ratio(context.measure_cost());
    double step = step_;
    int64_t step_count = 0;
    while (used > budget_->share) {
      const double target = std::max(used - step, budget_->share);
      const int64_t state = context.save_snapshot();
      BestCandidate best(context, minimize_);
      for (size_t i = 0; i < layers.size(); ++i) {
        // The share each tried sparsity used, so that the bisection's answer is not measured
        // (sped up) a second time.
        std::map<double, double> used_by;
        const auto used_at = [&](double sparsity) {
          prune_layer(context, state, i, sparsity);
          return used_by[sparsity] = budget_->ratio(context.measure_cost());
        };
        if (sparsity_[i] >= kMostSparsity || used_at(kMostSparsity) > target) {
          LITHE_LOG(kInfo, "net_adapt: layer '", layers[i]->name(), "' alone cannot bring ",
                    budget_->key(), " to ", target);
          continue;
        }
        const double candidate =
            sdk::smallest_fitting(sparsity_[i], kMostSparsity, kBisectionSteps,
                                  [&](double s) { return used_at(s) <= target; });
        prune_layer(context, state, i, candidate);  // the model holds the candidate to score
        const double candidate_used = used_by.at(candidate);
        const double metric = score(context, "layer '" + layers[i]->name() +
                                                 "' at sparsity " + std::to_string(candidate));
        LITHE_LOG(kInfo, "net_adapt: step ", step_count + 1, ", layer '", layers[i]->name(),
                  "' at sparsity ", candidate, " (", budget_->key(), " used ", candidate_used,
                  "): metric ", metric);
        best.offer(i, candidate, metric, candidate_used);
      }
      if (!best.found()) {
        context.restore_snapshot(state);
        context.release_snapshot(state);
        step *= 0.5;
        if (step < kSmallestBudgetStep) {
          LITHE_LOG(kWarn, "net_adapt: no layer can lower ", budget_->key(), " further; "
                    "stopped at ", used, " of the budget's ", budget_->share);
          break;
        }
        LITHE_LOG(kInfo, "net_adapt: no layer can take a step; the step is now ", step);
        continue;
      }
      const size_t chosen = best.layer();
      sparsity_[chosen] = best.sparsity();
      used = best.used();
      ++step_count;
      LITHE_LOG(kInfo, "net_adapt: step ", step_count, " chose layer '", layers[chosen]->name(),
                "' at sparsity ", best.sparsity(), " (metric ", best.metric(), "); ",
                budget_->key(), " used ", used, " of ", budget_->share);
      best.adopt();
      context.release_snapshot(state);
    }
    finished_ = true;
  }

  bool minimize_;
  std::string base_algo_;
  double step_;
  int64_t fine_tune_epochs_;
  std::optional<sdk::CostBudget> budget_;  // instead of the entries' sparsity
  std::unique_ptr<sdk::WeightMasker> masker_;
  std::vector<double> sparsity_;  // per layer index: its sparsity so far (0: not pruned)
  // One weighted module of the model, as NNI's arithmetic sees it.
  struct Link {
    std::string name;
    bool counted;     // a Conv2d or Linear module: in the total, a previous or next layer
    int64_t weights;  // its weight count
    int64_t layer;    // its compressed layer's index, or -1
  };
  std::vector<Link> chain_;
  bool finished_ = false;
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_pruner({kAlgorithm, "NNI's NetAdaptPruner: one layer more pruned per step, the "
                                   "one whose fine-tuned candidate evaluates best, to an "
                                   "overall sparsity or a FLOPs/parameter budget"},
                      [](const sdk::Options& options, const sdk::Registry& algorithms) {
                        return std::make_unique<NetAdaptPruner>(options, algorithms);
                      });
  registry.describe_options(kAlgorithm, net_adapt_keys());
  registry.add_nni_counterpart({kAlgorithm, "NetAdaptPruner", "evaluator_search"});
}

}  // namespace lithe::plugins::net_adapt

LITHE_PLUGIN("net_adapt", "1.2.0", lithe::plugins::net_adapt::register_algorithms)
