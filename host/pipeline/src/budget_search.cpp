#include "lithe/host/pipeline/budget_search.h"

#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "lithe/host/model/model.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/speedup/speedup.h"
#include "lithe/host/train/batchnorm_recalibration.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

using Clock = std::chrono::steady_clock;

// SplitMix64: a generator whose whole state is one word, so that every trial's draws follow
// from (seed, trial, stream) alone and are the same on every platform (std::normal_distribution
// is not).
class TrialRandom {
 public:
  TrialRandom(uint64_t seed, int64_t trial, uint64_t stream)
      : state_(seed * 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(trial) << 20) ^ stream) {
    (void)next();
  }
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  /// In (0, 1): 53 random bits, never 0.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  /// Standard normal (Box–Muller, the cosine branch only: one draw per two uniforms).
  double normal() {
    const double u = uniform();
    const double v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
  }

 private:
  uint64_t state_;
};

constexpr uint64_t kDirectionStream = 1;
constexpr uint64_t kAcceptStream = 2;
// No layer's share below this fraction of the largest: the scale's range stays bounded, and a
// layer left almost dense is still expressible (0.05 × 0.9 ≈ 4%).
constexpr double kMinShare = 0.05;

// Shares divided by the largest, each at least kMinShare.
std::vector<double> normalised(std::vector<double> shares) {
  const double top = *std::max_element(shares.begin(), shares.end());
  for (double& s : shares) {
    s = std::clamp(s / top, kMinShare, 1.0);
    s = std::round(s * 1e9) / 1e9;  // short in the state file, and the same when read back
  }
  return shares;
}

std::vector<double> sparsities_at(const std::vector<double>& direction, double scale,
                                  double max_sparsity) {
  std::vector<double> out;
  for (const double share : direction) {
    // Rounded so that the config the pruner reads, the state file and a rebuild agree exactly.
    out.push_back(std::round(std::min(max_sparsity, scale * share) * 1e6) / 1e6);
  }
  return out;
}

// The direction trial `index` tries. Trial 0 is uniform; random draws every share afresh;
// annealing perturbs the current direction by a log-normal factor whose spread shrinks with
// the temperature.
std::vector<double> propose(const SearchOptions& options, int64_t index, size_t layers,
                            const std::vector<double>* current, std::string* origin) {
  if (index == 0) {
    *origin = "uniform";
    return std::vector<double>(layers, 1.0);
  }
  TrialRandom random(options.seed, index, kDirectionStream);
  std::vector<double> shares(layers, 1.0);
  double sigma = options.perturbation;
  if (options.strategy == SearchStrategy::kAnnealing) {
    *origin = "annealing";
    if (current != nullptr) {
      shares = *current;
      sigma *= std::max(std::pow(options.cool_down_rate, static_cast<double>(index - 1)), 0.05);
    }
  } else {
    *origin = "random";
  }
  for (double& s : shares) {
    s *= std::exp(sigma * random.normal());
  }
  return normalised(shares);
}

nlohmann::json config_list_for(const std::vector<std::string>& layers,
                               const std::vector<double>& sparsities) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    if (sparsities[i] > 0) {
      list.push_back({{"sparsity", sparsities[i]}, {"op_names", {layers[i]}}});
    }
  }
  return list;
}

// Pruned by the algorithm and sped up; no fine-tuning.
torch::jit::Module pruned_and_sped_up(const torch::jit::Module& dense,
                                      const PluginRegistry& registry,
                                      const SearchOptions& options,
                                      const std::vector<std::string>& layers,
                                      const std::vector<double>& sparsities) {
  const nlohmann::json list = config_list_for(layers, sparsities);
  if (list.empty()) {
    torch::jit::Module copy = dense.clone();
    copy.eval();
    return copy;
  }
  torch::jit::Module copy = dense.clone();
  const std::unique_ptr<Model> model = make_torchscript_model(copy);
  PruningSession session(*model, registry,
                         make_compression_config(options.algorithm, list.dump(),
                                                 options.algorithm_options_json, "<search>"));
  session.compress();
  const at::Tensor input = at::zeros(options.latency.input_shape);
  SpeedupResult sped = speedup_model(dense, session.masks(), input, "the search's masks");
  torch::jit::Module out = *sped.module;
  out.eval();
  return out;
}

// What a trial's model gets before it is evaluated: fine-tuning, then BatchNorm re-estimation.
void adapt(torch::jit::Module& module, const SearchOptions& options, const SearchData& data) {
  if (options.trial_epochs <= 0 && options.recalibrate_bn_batches <= 0) {
    return;
  }
  LITHE_CHECK(data.train != nullptr, sdk::Errc::kInvalidConfig,
              "trial fine-tuning and BatchNorm re-estimation need training data");
  const std::unique_ptr<Model> model = make_torchscript_model(module);
  if (options.trial_epochs > 0) {
    TrainOptions tune = options.train;
    tune.epochs = options.trial_epochs;
    tune.progress = false;
    (void)train(*model, *data.train, nullptr, tune);
  }
  if (options.recalibrate_bn_batches > 0) {
    (void)recalibrate_batchnorm(*model, *data.train, options.recalibrate_bn_batches,
                                options.train.batch_size);
  }
  module.eval();
}

double accuracy_of(torch::jit::Module& module, const SearchOptions& options,
                   const SearchData& data) {
  const std::unique_ptr<Model> model = make_torchscript_model(module);
  return evaluate(*model, *data.test, options.train.eval_batch_size).accuracy;
}

bool better(const SearchTrial& a, const SearchTrial& b, const SearchResult& result,
            ResourceKind kind) {
  if (*a.accuracy != *b.accuracy) {
    return *a.accuracy > *b.accuracy;
  }
  const double ua = a.use.ratio(kind, result.dense);
  const double ub = b.use.ratio(kind, result.dense);
  if (ua != ub) {
    return ua < ub;
  }
  return a.index < b.index;
}

}  // namespace

const char* search_strategy_name(SearchStrategy strategy) {
  return strategy == SearchStrategy::kRandom ? "random" : "annealing";
}

SearchStrategy parse_search_strategy(const std::string& text, const std::string& option) {
  if (text == "random") {
    return SearchStrategy::kRandom;
  }
  if (text == "annealing") {
    return SearchStrategy::kAnnealing;
  }
  throw sdk::Error(sdk::Errc::kInvalidConfig,
                   option + ": the strategy must be random or annealing, got '" + text + "'");
}

void check_search_options(const SearchOptions& options) {
  const auto check = [](bool ok, const std::string& option, const std::string& rule,
                        const std::string& seen) {
    LITHE_CHECK(ok, sdk::Errc::kInvalidConfig, option, " must be ", rule, ", got ", seen);
  };
  check(options.trials >= 1 && options.trials <= 100000, "--trials", "in [1, 100000]",
        std::to_string(options.trials));
  check(std::isfinite(options.max_sparsity) && options.max_sparsity > 0 &&
            options.max_sparsity < 1,
        "--max-sparsity", "in (0, 1)", std::to_string(options.max_sparsity));
  check(std::isfinite(options.perturbation) && options.perturbation > 0 &&
            options.perturbation <= 5,
        "--perturbation", "in (0, 5]", std::to_string(options.perturbation));
  check(std::isfinite(options.start_temperature) && options.start_temperature > 0,
        "--start-temperature", "> 0", std::to_string(options.start_temperature));
  check(std::isfinite(options.cool_down_rate) && options.cool_down_rate > 0 &&
            options.cool_down_rate <= 1,
        "--cool-down-rate", "in (0, 1]", std::to_string(options.cool_down_rate));
  check(options.bisection_steps >= 1 && options.bisection_steps <= 64, "--bisection-steps",
        "in [1, 64]", std::to_string(options.bisection_steps));
  check(options.latency.runs >= 1 && options.latency.runs <= 100000, "--latency-runs",
        "in [1, 100000]", std::to_string(options.latency.runs));
  check(options.latency.warmup >= 0 && options.latency.warmup <= 100000, "--latency-warmup",
        "in [0, 100000]", std::to_string(options.latency.warmup));
  check(options.trial_epochs >= 0, "--trial-epochs", ">= 0",
        std::to_string(options.trial_epochs));
  check(options.recalibrate_bn_batches >= 0, "--recalibrate-bn", ">= 0",
        std::to_string(options.recalibrate_bn_batches));
  LITHE_CHECK(!options.latency.input_shape.empty(), sdk::Errc::kInvalidConfig,
              "--input-shape: no size given");
  for (const int64_t size : options.latency.input_shape) {
    check(size >= 1, "every --input-shape size", ">= 1", std::to_string(size));
  }
  LITHE_CHECK(!options.algorithm.empty(), sdk::Errc::kInvalidConfig,
              "--algorithm: no pruner named");
  if (options.trial_epochs > 0) {
    TrainOptions tune = options.train;
    tune.epochs = options.trial_epochs;
    validate_train_options(tune);
  }
}

std::vector<std::string> searched_layers(const torch::jit::Module& dense,
                                         const SearchOptions& options) {
  const std::unique_ptr<Model> model = make_torchscript_model(dense);
  const std::set<std::string> types(options.op_types.begin(), options.op_types.end());
  const auto searched = [&](const ModuleRecord& m) {
    return (types.count(m.op_type) != 0 || types.count(m.class_name) != 0) &&
           m.weight.has_value();
  };
  std::vector<std::string> out;
  if (options.layers.empty()) {
    for (const ModuleRecord& m : model->modules()) {
      if (searched(m)) {
        out.push_back(m.name);
      }
    }
    LITHE_CHECK(!out.empty(), sdk::Errc::kInvalidConfig,
                "the model has no module of the searched types (--op-types)");
    return out;
  }
  std::set<std::string> wanted(options.layers.begin(), options.layers.end());
  for (const std::string& name : options.layers) {
    const ModuleRecord* record = model->find_module(name);
    LITHE_CHECK(record != nullptr, sdk::Errc::kInvalidConfig,
                "--layers: the model has no module '", name, "'");
    LITHE_CHECK(searched(*record), sdk::Errc::kInvalidConfig, "--layers: module '", name,
                "' is a ", record->op_type, ", not one of the searched types (--op-types)");
  }
  for (const ModuleRecord& m : model->modules()) {  // the model's order, each once
    if (wanted.erase(m.name) != 0) {
      out.push_back(m.name);
    }
  }
  return out;
}

torch::jit::Module build_search_candidate(const torch::jit::Module& dense,
                                          const PluginRegistry& registry,
                                          const SearchOptions& options,
                                          const std::vector<std::string>& layers,
                                          const std::vector<double>& sparsities,
                                          const SearchData& data) {
  LITHE_CHECK(sparsities.size() == layers.size(), sdk::Errc::kInvalidConfig, "a candidate needs ",
              layers.size(), " sparsities (one per searched layer), got ", sparsities.size());
  torch::jit::Module module = pruned_and_sped_up(dense, registry, options, layers, sparsities);
  adapt(module, options, data);
  return module;
}

SearchResult run_budget_search(const torch::jit::Module& dense, const PluginRegistry& registry,
                               const SearchOptions& options, const SearchData& data,
                               const SearchResult* resumed, const SearchProgress& on_progress) {
  check_search_options(options);
  LITHE_CHECK(data.test != nullptr && data.test->size() > 0, sdk::Errc::kInvalidConfig,
              "the search needs test data to evaluate its trials");
  SearchResult result;
  result.layers = searched_layers(dense, options);
  torch::jit::Module reference = dense.clone();  // timed beside every candidate
  reference.eval();
  if (resumed != nullptr) {
    LITHE_CHECK(resumed->layers == result.layers, sdk::Errc::kInvalidConfig,
                "the resumed search searched other layers than this model has (state file of "
                "another model or --layers)");
    result.dense = resumed->dense;
    result.dense_accuracy = resumed->dense_accuracy;
    result.trials.assign(resumed->trials.begin(),
                         resumed->trials.begin() +
                             std::min<int64_t>(options.trials, resumed->trials.size()));
  }
  const auto measure = [&](torch::jit::Module& module, bool time_it) {
    if (time_it && options.latency_probe) {
      ResourceUse use =
          measure_resources(module, reference, options.flops_mode, options.latency, false);
      std::tie(use.dense_latency_ms, use.latency_ms) = options.latency_probe(module);
      return use;
    }
    return measure_resources(module, reference, options.flops_mode, options.latency, time_it);
  };
  if (resumed == nullptr) {
    torch::jit::Module copy = dense.clone();
    result.dense = measure(copy, true);
    result.dense_accuracy = accuracy_of(copy, options, data);
  }
  if (on_progress) {
    on_progress(result);
  }
  const ResourceKind kind = options.budget.kind;
  const bool timed = kind == ResourceKind::kLatency;
  // The current direction of annealing and its accuracy, replayed over every trial so far.
  std::optional<size_t> current;
  const auto consider = [&](SearchTrial& trial) {
    trial.accepted = false;
    if (!trial.accuracy.has_value() || options.strategy != SearchStrategy::kAnnealing) {
      return;
    }
    if (!current.has_value()) {
      trial.accepted = true;
    } else {
      const double delta = *trial.accuracy - *result.trials[*current].accuracy;
      const double temperature =
          options.start_temperature *
          std::pow(options.cool_down_rate, static_cast<double>(std::max<int64_t>(trial.index - 1, 0)));
      TrialRandom random(options.seed, trial.index, kAcceptStream);
      trial.accepted = delta >= 0 || random.uniform() < std::exp(delta / temperature);
    }
    if (trial.accepted) {
      current = static_cast<size_t>(trial.index);
    }
  };
  for (SearchTrial& trial : result.trials) {
    consider(trial);
  }
  for (int64_t index = static_cast<int64_t>(result.trials.size()); index < options.trials;
       ++index) {
    const auto start = Clock::now();
    SearchTrial trial;
    trial.index = index;
    trial.direction =
        propose(options, index, result.layers.size(),
                current.has_value() ? &result.trials[*current].direction : nullptr,
                &trial.origin);
    const double top = options.max_sparsity /
                       *std::min_element(trial.direction.begin(), trial.direction.end());
    // The largest scale first: a direction that cannot fit the budget even there is reported
    // as infeasible with what it reached.
    std::vector<double> sparsities = sparsities_at(trial.direction, top, options.max_sparsity);
    torch::jit::Module fitting =
        pruned_and_sped_up(dense, registry, options, result.layers, sparsities);
    ResourceUse use = measure(fitting, timed);
    double hi = top;
    trial.feasible = within_budget(options.budget, use, result.dense);
    if (trial.feasible) {
      // The smallest scale that fits: resources fall as the scale grows (in steps, one per
      // channel count; latency with the measurement's noise).
      double lo = 0;
      for (int step = 1; step < options.bisection_steps; ++step) {
        const double mid = 0.5 * (lo + hi);
        const std::vector<double> at_mid = sparsities_at(trial.direction, mid, options.max_sparsity);
        if (at_mid == sparsities) {
          lo = mid;  // rounding made it the same candidate
          continue;
        }
        torch::jit::Module candidate =
            pruned_and_sped_up(dense, registry, options, result.layers, at_mid);
        const ResourceUse mid_use = measure(candidate, timed);
        if (within_budget(options.budget, mid_use, result.dense)) {
          hi = mid;
          sparsities = at_mid;
          use = mid_use;
          fitting = candidate;
        } else {
          lo = mid;
        }
      }
    }
    if (!timed) {
      use = measure(fitting, true);  // the latency the report shows beside the FLOPs
    }
    trial.scale = hi;
    trial.sparsities = sparsities;
    trial.use = use;
    if (trial.feasible) {
      adapt(fitting, options, data);
      trial.accuracy = accuracy_of(fitting, options, data);
    }
    consider(trial);
    trial.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.trials.push_back(std::move(trial));
    if (on_progress) {
      on_progress(result);
    }
  }
  for (const SearchTrial& trial : result.trials) {
    if (trial.feasible && trial.accuracy.has_value() &&
        (!result.best.has_value() ||
         better(trial, result.trials[*result.best], result, kind))) {
      result.best = trial.index;
    }
  }
  return result;
}

std::vector<int64_t> pareto_front(const SearchResult& result, ResourceKind kind) {
  std::vector<const SearchTrial*> evaluated;
  for (const SearchTrial& trial : result.trials) {
    if (trial.accuracy.has_value()) {
      evaluated.push_back(&trial);
    }
  }
  std::sort(evaluated.begin(), evaluated.end(), [&](const SearchTrial* a, const SearchTrial* b) {
    const double ua = a->use.ratio(kind, result.dense);
    const double ub = b->use.ratio(kind, result.dense);
    if (ua != ub) {
      return ua < ub;
    }
    if (*a->accuracy != *b->accuracy) {
      return *a->accuracy > *b->accuracy;
    }
    return a->index < b->index;
  });
  std::vector<int64_t> front;
  double best = -std::numeric_limits<double>::infinity();
  for (const SearchTrial* trial : evaluated) {
    if (*trial->accuracy > best) {
      front.push_back(trial->index);
      best = *trial->accuracy;
    }
  }
  return front;
}

}  // namespace lithe::host
