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
// Everything runs when the session attaches (compress()), through SDK 1.7's fine_tune and
// evaluate and SDK 1.8's snapshots.
//
// Departures from NNI:
// - NNI's previous and next layers are the model's Conv2d/Linear modules in named_modules
//   order, compressed or not; a plugin sees the compressed layers only, so Lithe's are the
//   previous and next compressed layers. The two agree when every Conv2d/Linear module is
//   compressed (level with op_types default; filter pruning of an all-convolution chain).
// - When no layer can take a step, NNI halves the step but not delta, so it tries the same
//   candidates again forever; Lithe halves both, and stops (keeping what it has, with a
//   warning) once a step would prune less than one weight.
// - A NaN or infinite metric is an error.
#include "net_adapt.h"

#include <lithe/sdk.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lithe::plugins::net_adapt {
namespace {

constexpr const char* kAlgorithm = "net_adapt";

const sdk::OptionSchema& net_adapt_keys() {
  static const sdk::OptionSchema schema = [] {
    sdk::OptionSchema keys;
    keys.add(sdk::sparsity_keys());
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
                         "the overall sparsity each step adds")
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

std::string masker_name(const std::string& base_algo) {
  if (base_algo == "l1") {
    return "l1_filter";
  }
  if (base_algo == "l2") {
    return "l2_filter";
  }
  return base_algo;  // "level", "fpgm"
}

class NetAdaptPruner final : public sdk::Pruner {
 public:
  NetAdaptPruner(const sdk::Options& options, const sdk::Registry& registry)
      : minimize_(net_adapt_keys().read<std::string>(options, "optimize_mode") == "minimize"),
        base_algo_(net_adapt_keys().read<std::string>(options, "base_algo")),
        step_(net_adapt_keys().read<double>(options, "sparsity_per_iteration")),
        fine_tune_epochs_(net_adapt_keys().read<int64_t>(options, "short_term_fine_tune_epochs")) {
    const sdk::Options masker_options =
        options.has("masker_options") ? options.child("masker_options") : sdk::Options();
    try {
      masker_ = registry.make_masker(masker_name(base_algo_), masker_options);
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(),
                       options.path() + "/base_algo '" + base_algo_ + "': " + e.what());
    }
  }

  void validate_config(const sdk::Options& entry) const override {
    (void)net_adapt_keys().read<double>(entry, "sparsity");
  }

  void attach(sdk::CompressionContext& context) override {
    masker_->attach(context);
    const std::vector<sdk::LayerView*> layers = context.layers();
    LITHE_CHECK(!layers.empty(), sdk::Errc::kInvalidConfig,
                "net_adapt: the config_list selects no layer");
    const double target = layers.front()->config().require<double>("sparsity");
    for (const sdk::LayerView* layer : layers) {
      const double s = layer->config().require<double>("sparsity");
      LITHE_CHECK(s == target, sdk::Errc::kInvalidConfig, "layer '", layer->name(),
                  "': net_adapt prunes toward one overall sparsity, so every config_list "
                  "entry must give the same `sparsity`; layer '", layers.front()->name(),
                  "' has ", target, ", this one ", s);
    }
    LITHE_CHECK(context.can_evaluate(), sdk::Errc::kUnsupported,
                "net_adapt scores every candidate with the host's evaluator, and there is none "
                "(lithe compress: --data DIR with a test split, or --test-data; C++: "
                "session.set_evaluator)");
    LITHE_CHECK(fine_tune_epochs_ == 0 || context.can_fine_tune(), sdk::Errc::kUnsupported,
                "net_adapt fine-tunes every candidate for short_term_fine_tune_epochs (",
                fine_tune_epochs_, ") and the host cannot fine-tune (lithe compress: give "
                "--data; C++: session.set_fine_tuner), or set short_term_fine_tune_epochs 0");
    sparsity_.assign(layers.size(), 0.0);
    int64_t total = 0;
    for (const sdk::LayerView* layer : layers) {
      total += layer->weight().numel();
    }
    search(context, layers, target, total);
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

  // NNI's _calc_num_related_weights over the compressed layers (see the departures).
  double related(const std::vector<sdk::LayerView*>& layers, size_t i) const {
    double weights = static_cast<double>(layers[i]->weight().numel());
    if (i > 0 && sparsity_[i - 1] > 0.0) {
      weights *= 1.0 - sparsity_[i - 1];
    }
    if (i + 1 < layers.size()) {
      weights += kept(*layers[i + 1]);
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
      std::optional<size_t> best_layer;
      double best_sparsity = 0.0;
      double best_metric = 0.0;
      int64_t best_state = 0;
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
        const double previous = sparsity_[i];
        sparsity_[i] = candidate;
        context.update_masks_now();
        sparsity_[i] = previous;
        if (fine_tune_epochs_ > 0) {
          context.fine_tune(fine_tune_epochs_);
        }
        const double metric = context.evaluate();
        LITHE_CHECK(std::isfinite(metric), sdk::Errc::kInvalidConfig, "net_adapt: the "
                    "evaluator returned ", metric, " with layer '", layers[i]->name(),
                    "' at sparsity ", candidate, "; a search needs finite metrics");
        LITHE_LOG(kInfo, "net_adapt: step ", step_count + 1, ", layer '", layers[i]->name(),
                  "' at sparsity ", candidate, ": metric ", metric);
        const bool better = !best_layer || (minimize_ ? metric < best_metric
                                                      : metric > best_metric);
        if (better) {
          if (best_layer) {
            context.release_snapshot(best_state);
          }
          best_layer = i;
          best_sparsity = candidate;
          best_metric = metric;
          best_state = context.save_snapshot();
        }
      }
      if (!best_layer) {
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
      context.restore_snapshot(best_state);
      context.release_snapshot(best_state);
      context.release_snapshot(state);
      sparsity_[*best_layer] = best_sparsity;
      current += step_;
      ++step_count;
      LITHE_LOG(kInfo, "net_adapt: step ", step_count, " chose layer '",
                layers[*best_layer]->name(), "' at sparsity ", best_sparsity, " (metric ",
                best_metric, "); overall ", current, " of ", target);
    }
    finished_ = true;
  }

  bool minimize_;
  std::string base_algo_;
  double step_;
  int64_t fine_tune_epochs_;
  std::unique_ptr<sdk::WeightMasker> masker_;
  std::vector<double> sparsity_;  // per layer index: its sparsity so far (0: not pruned)
  bool finished_ = false;
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_pruner({kAlgorithm, "NNI's NetAdaptPruner: one layer more pruned per step, the "
                                   "one whose fine-tuned candidate evaluates best (SDK 1.8 "
                                   "snapshots)"},
                      [](const sdk::Options& options, const sdk::Registry& algorithms) {
                        return std::make_unique<NetAdaptPruner>(options, algorithms);
                      });
  registry.describe_options(kAlgorithm, net_adapt_keys());
  registry.add_nni_counterpart({kAlgorithm, "NetAdaptPruner", "evaluator_search"});
}

}  // namespace lithe::plugins::net_adapt

LITHE_PLUGIN("net_adapt", "1.0.0", lithe::plugins::net_adapt::register_algorithms)
