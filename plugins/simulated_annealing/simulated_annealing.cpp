// NNI's SimulatedAnnealingPruner (v2.0, reference §2.13): search the per-layer sparsities that
// reach an overall sparsity with the best metric, by simulated annealing over sparsity vectors.
//
//   s = sorted uniform(0, 1, L), rescaled to the overall sparsity S (retried until in [0, 1))
//   T = start_temperature
//   while T > stop_temperature:
//     repeat:                                   (until a candidate is accepted)
//       m = T / start_temperature · perturbation_magnitude
//       c = rescale(max(0, s + uniform(−m, m, L)))        (retried until in [0, 1))
//       masks = base masker, layer k at c's k-th smallest sparsity where layers are ordered by
//               weight count (bigger layers get the bigger sparsities); |c_k| ≤ 1e-6: unpruned
//       score = evaluate() (negated when minimizing)
//       accept if score > current, else with probability exp(−|score − current| / T)
//     T *= cool_down_rate
//   the best accepted candidate's masks are the result
//
// rescale(c): pair the sorted c with the sorted weight counts n, pruned = Σ int(n_k · c_k);
// none when pruned is 0; else c · S / (pruned / Σ n).
//
// Every candidate is pruned from the original weights (SDK 1.8 snapshots) and measured by the
// host's evaluator (SDK 1.7). Random numbers are NumPy's (NumpyRandom): with `seed` s the
// search is NNI's after np.random.seed(s), draw for draw.
//
// With a budget instead of a sparsity (`flops_budget` / `params_budget`, SDK 1.10), rescale(c)
// becomes fit(c): the sorted c times the smallest scale (bisected, 10 steps) whose masks leave a
// sped-up model within the budget (the host's measure_cost), the largest sparsity at most 0.99;
// none when even that scale does not fit. Everything else is the search above.
//
// `short_term_fine_tune_epochs` (Lithe's; 0 by default, NNI's search) fine-tunes each candidate
// before its evaluation, as NetAdapt does; the next candidate starts from the original weights
// again, and so does the result.
//
// Departures: a metric that is NaN or infinite is an error (NNI's acceptance loop would spin
// forever on NaN); `max_evaluations` can bound the search (NNI: unbounded); after 1,000 draws
// that rescale to nothing usable the search stops with an error (NNI retries forever).
#include "simulated_annealing.h"

#include <lithe/sdk.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace lithe::plugins::simulated_annealing {

double NumpyRandom::uniform(double low, double high) {
  const uint32_t a = engine_() >> 5;
  const uint32_t b = engine_() >> 6;
  const double u = (a * 67108864.0 + b) / 9007199254740992.0;
  return low + (high - low) * u;
}

namespace {

constexpr const char* kAlgorithm = "simulated_annealing";
constexpr double kMostSparsity = 0.99;  // a budget's fit prunes no layer further
constexpr int kBisectionSteps = 10;
constexpr int kMaxDraws = 1000;

const sdk::OptionSchema& annealing_keys() {
  static const sdk::OptionSchema schema = [] {
    sdk::OptionSchema keys;
    keys.add(sdk::search_target_keys());
    keys.add(sdk::option("optimize_mode", sdk::OptionType::kString,
                         "whether the evaluator's metric is better higher or lower")
                 .defaults_to("\"maximize\"")
                 .one_of({"maximize", "minimize"}));
    keys.add(sdk::option("base_algo", sdk::OptionType::kString,
                         "the masker that prunes each layer at its chosen sparsity")
                 .defaults_to("\"l1\"")
                 .one_of({"level", "l1", "l2", "fpgm"}));
    keys.add(sdk::option("masker_options", sdk::OptionType::kObject,
                         "options passed to the masker's factory")
                 .defaults_to("{}"));
    keys.add(sdk::option("start_temperature", sdk::OptionType::kNumber,
                         "the first temperature; must exceed stop_temperature")
                 .defaults_to("100")
                 .above(0));
    keys.add(sdk::option("stop_temperature", sdk::OptionType::kNumber,
                         "the search ends when the temperature falls to it")
                 .defaults_to("20")
                 .above(0));
    keys.add(sdk::option("cool_down_rate", sdk::OptionType::kNumber,
                         "the temperature's factor after each accepted candidate")
                 .defaults_to("0.9")
                 .above(0)
                 .below(1));
    keys.add(sdk::option("perturbation_magnitude", sdk::OptionType::kNumber,
                         "the largest change of one sparsity at start_temperature (it shrinks "
                         "with the temperature)")
                 .defaults_to("0.35")
                 .above(0));
    keys.add(sdk::option("seed", sdk::OptionType::kInteger,
                         "NumPy's seed for the random draws (np.random.seed)")
                 .defaults_to("0")
                 .at_least(0)
                 .at_most(4294967295.0));
    keys.add(sdk::option("short_term_fine_tune_epochs", sdk::OptionType::kInteger,
                         "epochs of the host's fine-tuning of every candidate before it is "
                         "evaluated, as net_adapt's (0: none, NNI's); the result keeps the "
                         "original weights under the best masks")
                 .defaults_to("0")
                 .at_least(0));
    keys.add(sdk::option("max_evaluations", sdk::OptionType::kInteger,
                         "stop after this many candidates with the best so far (0: no bound)")
                 .defaults_to("0")
                 .at_least(0));
    return keys;
  }();
  return schema;
}

std::string format(const std::vector<double>& values) {
  std::ostringstream out;
  out.precision(4);
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) {
    out << (i == 0 ? "" : ", ") << values[i];
  }
  out << "]";
  return out.str();
}

class SimulatedAnnealingPruner final : public sdk::Pruner {
 public:
  SimulatedAnnealingPruner(const sdk::Options& options, const sdk::Registry& registry)
      : minimize_(annealing_keys().read<std::string>(options, "optimize_mode") == "minimize"),
        base_algo_(annealing_keys().read<std::string>(options, "base_algo")),
        start_(annealing_keys().read<double>(options, "start_temperature")),
        stop_(annealing_keys().read<double>(options, "stop_temperature")),
        cool_down_(annealing_keys().read<double>(options, "cool_down_rate")),
        magnitude_(annealing_keys().read<double>(options, "perturbation_magnitude")),
        max_evaluations_(annealing_keys().read<int64_t>(options, "max_evaluations")),
        fine_tune_epochs_(
            annealing_keys().read<int64_t>(options, "short_term_fine_tune_epochs")),
        random_(static_cast<uint32_t>(annealing_keys().read<int64_t>(options, "seed"))),
        budget_(sdk::read_cost_budget(options)) {
    LITHE_CHECK(start_ > stop_, sdk::Errc::kInvalidConfig, options.path(),
                "/start_temperature must exceed stop_temperature (", stop_, "), got ", start_,
                ": the search would evaluate nothing");
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
                "simulated_annealing: the config_list selects no layer");
    if (budget_.has_value()) {
      LITHE_CHECK(context.can_measure_cost(), sdk::Errc::kUnsupported, "simulated_annealing: ",
                  budget_->key(), " needs the sped-up model's cost, and the host cannot "
                  "measure it (lithe compress: a TorchScript model and --data; C++: "
                  "session.set_cost_meter)");
    } else {
      target_ = sdk::shared_sparsity(layers, kAlgorithm);
      LITHE_CHECK(target_ > 0.0, sdk::Errc::kInvalidConfig,
                  "simulated_annealing: the overall sparsity must be > 0, got ", target_);
    }
    LITHE_CHECK(context.can_evaluate(), sdk::Errc::kUnsupported,
                "simulated_annealing scores every candidate with the host's evaluator, and "
                "there is none (lithe compress: --data DIR with a test split, or --test-data; "
                "C++: session.set_evaluator)");
    LITHE_CHECK(fine_tune_epochs_ == 0 || context.can_fine_tune(), sdk::Errc::kUnsupported,
                "simulated_annealing fine-tunes every candidate for short_term_fine_tune_epochs "
                "(", fine_tune_epochs_, ") and the host cannot fine-tune (lithe compress: give "
                "--data; C++: session.set_fine_tuner), or set short_term_fine_tune_epochs 0");
    // Layers by weight count, ties in model order (Python's stable sort): the k-th gets the
    // k-th smallest sparsity of a candidate.
    order_.resize(layers.size());
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
      return layers[a]->weight().numel() < layers[b]->weight().numel();
    });
    for (size_t k : order_) {
      sorted_counts_.push_back(layers[k]->weight().numel());
    }
    chosen_.assign(layers.size(), 0.0);
    search(context, layers);
  }

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    if (finished_) {
      return std::nullopt;  // the best candidate's masks are final
    }
    const double sparsity = chosen_.at(layer.index());
    if (std::fabs(sparsity) <= 1e-6) {
      return sdk::Masks::keep_all(layer);  // NNI drops the layer from the candidate's config
    }
    std::optional<sdk::Masks> masks = masker_->calc_mask(layer, sparsity);
    LITHE_CHECK(masks.has_value(), sdk::Errc::kInternal, "layer '", layer.name(),
                "': simulated_annealing's masker '", base_algo_, "' returned no masks");
    return masks;
  }

 private:
  // NNI's _rescale_sparsities: sorted, scaled so that the pruned weights make up the target;
  // with a budget, fit().
  std::optional<std::vector<double>> rescale(sdk::CompressionContext& context, int64_t snapshot,
                                             std::vector<double> sparsities) {
    std::sort(sparsities.begin(), sparsities.end());
    if (budget_.has_value()) {
      return fit(context, snapshot, std::move(sparsities));
    }
    int64_t total = 0;
    int64_t pruned = 0;
    for (size_t k = 0; k < sparsities.size(); ++k) {
      total += sorted_counts_[k];
      pruned += static_cast<int64_t>(static_cast<double>(sorted_counts_[k]) * sparsities[k]);
    }
    if (pruned == 0) {
      return std::nullopt;
    }
    const double scale =
        target_ / (static_cast<double>(pruned) / static_cast<double>(total));
    for (double& s : sparsities) {
      s *= scale;
    }
    return sparsities;
  }

  // The sorted direction scaled by the smallest factor whose masks fit the budget.
  std::optional<std::vector<double>> fit(sdk::CompressionContext& context, int64_t snapshot,
                                         const std::vector<double>& direction) {
    if (direction.back() <= 0.0) {
      return std::nullopt;
    }
    const auto scaled = [&](double scale) {
      std::vector<double> out = direction;
      for (double& s : out) {
        s *= scale;
      }
      return out;
    };
    const auto fits = [&](double scale) {
      return budget_->fits(cost_of(context, snapshot, scaled(scale)));
    };
    const double top = kMostSparsity / direction.back();
    if (!fits(top)) {
      return std::nullopt;
    }
    return scaled(sdk::smallest_fitting(0.0, top, kBisectionSteps, fits));
  }

  // The cost of a candidate's masks, pruned from the original weights.
  sdk::ModelCost cost_of(sdk::CompressionContext& context, int64_t snapshot,
                         const std::vector<double>& sorted_sparsities) {
    context.restore_snapshot(snapshot);
    for (size_t k = 0; k < order_.size(); ++k) {
      chosen_[order_[k]] = sorted_sparsities[k];
    }
    context.update_masks_now();
    return context.measure_cost();
  }

  static bool usable(const std::optional<std::vector<double>>& s) {
    return s.has_value() && s->front() >= 0.0 && s->back() < 1.0;
  }

  // NNI's _init_sparsities and _generate_perturbations: retried until usable (at most
  // kMaxDraws times).
  std::vector<double> drawn(sdk::CompressionContext& context, int64_t snapshot,
                            const std::function<std::vector<double>()>& draw) {
    for (int attempt = 0; attempt < kMaxDraws; ++attempt) {
      std::optional<std::vector<double>> s = rescale(context, snapshot, draw());
      if (usable(s)) {
        return *s;
      }
    }
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     "simulated_annealing: none of " + std::to_string(kMaxDraws) +
                         " random sparsity vectors " +
                         (budget_ ? std::string("fit ") + budget_->key() + " " +
                                        std::to_string(budget_->share) +
                                        " with every layer below sparsity 1"
                                  : std::string("rescaled to the overall sparsity with every "
                                                "layer below 1")) +
                         "; lower the target or select more layers");
  }

  std::vector<double> initial(sdk::CompressionContext& context, int64_t snapshot) {
    return drawn(context, snapshot, [&] {
      std::vector<double> draw(sorted_counts_.size());
      for (double& d : draw) {
        d = random_.uniform(0.0, 1.0);
      }
      return draw;
    });
  }

  std::vector<double> perturbed(sdk::CompressionContext& context, int64_t snapshot,
                                double temperature) {
    const double magnitude = temperature / start_ * magnitude_;
    return drawn(context, snapshot, [&] {
      std::vector<double> draw(current_.size());
      for (size_t k = 0; k < draw.size(); ++k) {
        draw[k] = std::max(0.0, current_[k] + random_.uniform(-magnitude, magnitude));
      }
      return draw;
    });
  }

  // With a budget: refuses one that pruning every layer to kMostSparsity does not reach, before
  // any random draw.
  void check_budget_reachable(sdk::CompressionContext& context, int64_t snapshot) {
    sdk::check_budget_reachable(
        *budget_, cost_of(context, snapshot, std::vector<double>(order_.size(), kMostSparsity)),
        kMostSparsity, kAlgorithm);
  }

  // The candidate's masks from the original weights; returns the evaluator's metric.
  double evaluate_candidate(sdk::CompressionContext& context, int64_t snapshot,
                            const std::vector<double>& sorted_sparsities) {
    context.restore_snapshot(snapshot);
    for (size_t k = 0; k < order_.size(); ++k) {
      chosen_[order_[k]] = sorted_sparsities[k];
    }
    context.update_masks_now();
    if (fine_tune_epochs_ > 0) {
      context.fine_tune(fine_tune_epochs_);  // undone by the next candidate's restore
    }
    const double metric = context.evaluate();
    LITHE_CHECK(std::isfinite(metric), sdk::Errc::kInvalidConfig,
                "simulated_annealing: the evaluator returned ", metric, " for sparsities ",
                format(sorted_sparsities), "; a search needs finite metrics");
    return metric;
  }

  void search(sdk::CompressionContext& context, const std::vector<sdk::LayerView*>& layers) {
    const int64_t snapshot = context.save_snapshot();
    if (budget_.has_value()) {
      check_budget_reachable(context, snapshot);
    }
    current_ = initial(context, snapshot);
    double current_score = -std::numeric_limits<double>::infinity();
    double best_score = -std::numeric_limits<double>::infinity();
    std::vector<double> best;
    int64_t evaluations = 0;
    bool bounded = false;
    for (double temperature = start_; temperature > stop_ && !bounded;
         temperature *= cool_down_) {
      for (;;) {
        if (max_evaluations_ > 0 && evaluations >= max_evaluations_) {
          LITHE_LOG(kWarn, "simulated_annealing: stopped at max_evaluations (", max_evaluations_,
                    ") at temperature ", temperature, "; the best candidate so far is kept");
          bounded = true;
          break;
        }
        const std::vector<double> candidate = perturbed(context, snapshot, temperature);
        const double metric = evaluate_candidate(context, snapshot, candidate);
        ++evaluations;
        const double score = minimize_ ? -metric : metric;
        bool accepted = score > current_score;
        if (accepted && score > best_score) {
          best_score = score;
          best = candidate;
        }
        if (!accepted) {
          const double probability = std::exp(-std::fabs(score - current_score) / temperature);
          accepted = random_.uniform(0.0, 1.0) < probability;
        }
        LITHE_LOG(kInfo, "simulated_annealing: temperature ", temperature, ", candidate ",
                  evaluations, " ", format(candidate), ": metric ", metric,
                  accepted ? " (accepted)" : " (rejected)");
        if (accepted) {
          current_score = score;
          current_ = candidate;
          break;
        }
      }
    }
    LITHE_CHECK(!best.empty(), sdk::Errc::kInvalidConfig,
                "simulated_annealing: no candidate was evaluated (max_evaluations)");
    context.restore_snapshot(snapshot);
    context.release_snapshot(snapshot);
    for (size_t k = 0; k < order_.size(); ++k) {
      chosen_[order_[k]] = best[k];
    }
    std::string summary;
    for (size_t i = 0; i < layers.size(); ++i) {
      summary += (i == 0 ? "" : ", ") + layers[i]->name() + " " + std::to_string(chosen_[i]);
    }
    context.update_masks_now();
    if (budget_.has_value()) {
      summary += "; " + std::string(budget_->key()) + " used " +
                 std::to_string(budget_->ratio(context.measure_cost()));
    }
    LITHE_LOG(kInfo, "simulated_annealing: best of ", evaluations, " candidates: metric ",
                     minimize_ ? -best_score : best_score, "; sparsities ", summary);
    finished_ = true;
  }

  bool minimize_;
  std::string base_algo_;
  double start_;
  double stop_;
  double cool_down_;
  double magnitude_;
  int64_t max_evaluations_;
  int64_t fine_tune_epochs_;
  NumpyRandom random_;
  std::optional<sdk::CostBudget> budget_;  // instead of target_
  std::unique_ptr<sdk::WeightMasker> masker_;
  double target_ = 0.0;
  std::vector<size_t> order_;          // layer indices by weight count
  std::vector<int64_t> sorted_counts_;  // their weight counts, ascending
  std::vector<double> current_;         // the accepted sparsities, ascending
  std::vector<double> chosen_;          // per layer index: the sparsity its masks use
  bool finished_ = false;
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_pruner({kAlgorithm, "NNI's SimulatedAnnealingPruner: per-layer sparsities for "
                                   "an overall sparsity or a FLOPs/parameter budget, searched "
                                   "by simulated annealing on the host's evaluator"},
                      [](const sdk::Options& options, const sdk::Registry& algorithms) {
                        return std::make_unique<SimulatedAnnealingPruner>(options, algorithms);
                      });
  registry.describe_options(kAlgorithm, annealing_keys());
  registry.add_nni_counterpart({kAlgorithm, "SimulatedAnnealingPruner", "evaluator_search"});
}

}  // namespace lithe::plugins::simulated_annealing

LITHE_PLUGIN("simulated_annealing", "1.1.0",
             lithe::plugins::simulated_annealing::register_algorithms)
