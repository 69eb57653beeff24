#include "lithe/host/pipeline/budget_search.h"

#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "ddpg_agent.h"
#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/graph/layer_dependencies.h"
#include "lithe/host/model/model.h"
#include "lithe/host/model/trainable_clone.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/speedup/speedup.h"
#include "lithe/host/train/batchnorm_recalibration.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/pruner.h"

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
constexpr uint64_t kAmcActStream = 3;
constexpr uint64_t kAmcUpdateStream = 4;
constexpr uint64_t kAmcInitStream = 5;
constexpr uint64_t kAlgorithmStream = 6;
// Annealing with alternatives: how often a trial tries another pruner than the current one.
constexpr double kSwitchProbability = 1.0 / 3.0;
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
  if (index == 1 && !options.start_direction.empty()) {
    *origin = "sensitivity";
    return normalised(options.start_direction);
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

// Pruned by the algorithm and sped up; no fine-tuning.
torch::jit::Module pruned_and_sped_up(const torch::jit::Module& dense,
                                      const PluginRegistry& registry,
                                      const SearchOptions& options,
                                      const std::string& algorithm,
                                      const std::vector<std::string>& layers,
                                      const std::vector<double>& sparsities) {
  const nlohmann::json list = search_config_list(layers, sparsities);
  if (list.empty()) {
    torch::jit::Module copy = trainable_clone(dense);  // adapt() may fine-tune it
    copy.eval();
    return copy;
  }
  torch::jit::Module copy = dense.clone();
  const std::unique_ptr<Model> model = make_torchscript_model(copy);
  PruningSession session(*model, registry,
                         make_compression_config(algorithm, list.dump(),
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

}  // namespace

nlohmann::json search_config_list(const std::vector<std::string>& layers,
                                  const std::vector<double>& sparsities) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    if (sparsities[i] > 0) {
      list.push_back({{"sparsity", sparsities[i]}, {"op_names", {layers[i]}}});
    }
  }
  return list;
}

const char* search_strategy_name(SearchStrategy strategy) {
  switch (strategy) {
    case SearchStrategy::kRandom: return "random";
    case SearchStrategy::kAnnealing: return "annealing";
    case SearchStrategy::kNetAdapt: return "netadapt";
    case SearchStrategy::kAmc: return "amc";
  }
  return "?";
}

SearchStrategy parse_search_strategy(const std::string& text, const std::string& option) {
  if (text == "random") {
    return SearchStrategy::kRandom;
  }
  if (text == "annealing") {
    return SearchStrategy::kAnnealing;
  }
  if (text == "netadapt") {
    return SearchStrategy::kNetAdapt;
  }
  if (text == "amc") {
    return SearchStrategy::kAmc;
  }
  throw sdk::Error(sdk::Errc::kInvalidConfig, option +
                                                  ": the strategy must be random, annealing, "
                                                  "netadapt or amc, got '" + text + "'");
}

std::string search_algorithms_text(const SearchOptions& options) {
  std::string text = options.algorithm;
  for (const std::string& name : options.alternatives) {
    text += "," + name;
  }
  return text;
}

std::string trial_label(const SearchTrial& trial, bool several_pruners) {
  return several_pruners ? trial.origin + ", " + trial.algorithm : trial.origin;
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
  for (const double share : options.start_direction) {
    check(std::isfinite(share) && share > 0, "every share of the start direction", "> 0",
          std::to_string(share));
  }
  LITHE_CHECK(options.alternatives.empty() || options.strategy == SearchStrategy::kRandom ||
                  options.strategy == SearchStrategy::kAnnealing,
              sdk::Errc::kInvalidConfig,
              "several pruners (--algorithm a,b) are for the random and annealing strategies, "
              "not ", search_strategy_name(options.strategy));
  for (size_t i = 0; i < options.alternatives.size(); ++i) {
    const std::string& name = options.alternatives[i];
    LITHE_CHECK(name != options.algorithm &&
                    std::find(options.alternatives.begin(), options.alternatives.begin() + i,
                              name) == options.alternatives.begin() + i,
                sdk::Errc::kInvalidConfig, "--algorithm: '", name, "' is named twice");
  }
  LITHE_CHECK(options.start_direction.empty() || options.strategy == SearchStrategy::kRandom ||
                  options.strategy == SearchStrategy::kAnnealing,
              sdk::Errc::kInvalidConfig,
              "a start direction (--sensitivity) is for the random and annealing strategies, "
              "not ", search_strategy_name(options.strategy));
  check(options.amc_warmup >= 0, "--amc-warmup", ">= 0", std::to_string(options.amc_warmup));
  check(std::isfinite(options.amc_noise) && options.amc_noise >= 0, "--amc-noise", ">= 0",
        std::to_string(options.amc_noise));
  check(std::isfinite(options.amc_noise_decay) && options.amc_noise_decay > 0 &&
            options.amc_noise_decay <= 1,
        "--amc-noise-decay", "in (0, 1]", std::to_string(options.amc_noise_decay));
  check(std::isfinite(options.netadapt_step) && options.netadapt_step > 0 &&
            options.netadapt_step < 1,
        "--netadapt-step", "in (0, 1)", std::to_string(options.netadapt_step));
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
                                          const SearchData& data,
                                          const std::string& algorithm) {
  LITHE_CHECK(sparsities.size() == layers.size(), sdk::Errc::kInvalidConfig, "a candidate needs ",
              layers.size(), " sparsities (one per searched layer), got ", sparsities.size());
  torch::jit::Module module = pruned_and_sped_up(
      dense, registry, options, algorithm.empty() ? options.algorithm : algorithm, layers,
      sparsities);
  adapt(module, options, data);
  return module;
}

namespace {

// One search: the dense model's measurements, the trials in order (those read from a state file
// first, replayed rather than run), and the strategies that propose them.
class SearchRun {
 public:
  SearchRun(const torch::jit::Module& dense, const PluginRegistry& registry,
            const SearchOptions& options, const SearchData& data, const SearchProgress& progress)
      : dense_(dense), registry_(registry), options_(options), data_(data), progress_(progress),
        reference_(dense.clone()), timed_(options.budget.kind == ResourceKind::kLatency) {
    reference_.eval();
  }

  SearchResult run(const SearchResult* resumed) {
    result_.layers = searched_layers(dense_, options_);
    LITHE_CHECK(options_.start_direction.empty() ||
                    options_.start_direction.size() == result_.layers.size(),
                sdk::Errc::kInvalidConfig, "the start direction has ",
                options_.start_direction.size(), " shares for ", result_.layers.size(),
                " searched layers");
    if (resumed != nullptr) {
      LITHE_CHECK(resumed->layers == result_.layers, sdk::Errc::kInvalidConfig,
                  "the resumed search searched other layers than this model has (state file "
                  "of another model or --layers)");
      result_.dense = resumed->dense;
      result_.dense_accuracy = resumed->dense_accuracy;
      result_.trials.assign(resumed->trials.begin(),
                            resumed->trials.begin() +
                                std::min<int64_t>(options_.trials, resumed->trials.size()));
      for (SearchTrial& trial : result_.trials) {  // states written before alternatives existed
        if (trial.algorithm.empty()) {
          trial.algorithm = options_.algorithm;
        }
      }
    } else {
      torch::jit::Module copy = dense_.clone();
      result_.dense = measure(copy, true);
      result_.dense_accuracy = accuracy_of(copy, options_, data_);
    }
    if (progress_) {
      progress_(result_);
    }
    if (options_.strategy == SearchStrategy::kNetAdapt) {
      (void)next_trial([&] { return direction_trial(0, nullptr); });  // the uniform baseline
      run_net_adapt();
    } else if (options_.strategy == SearchStrategy::kAmc) {
      run_amc();
    } else {
      run_directions();
    }
    const ResourceKind kind = options_.budget.kind;
    for (const SearchTrial& trial : result_.trials) {
      if (trial.feasible && trial.accuracy.has_value() &&
          (!result_.best.has_value() || better(trial, result_.trials[*result_.best], kind))) {
        result_.best = trial.index;
      }
    }
    return std::move(result_);
  }

 private:
  ResourceUse measure(torch::jit::Module& module, bool time_it) {
    return measure_resources(module, reference_, options_.flops_mode, options_.latency, time_it,
                             options_.latency_probe);
  }

  torch::jit::Module pruned(const std::vector<double>& sparsities,
                            const std::string& algorithm) {
    return pruned_and_sped_up(dense_, registry_, options_, algorithm, result_.layers,
                              sparsities);
  }

  // The pruner of direction trial `index` after the baselines: random draws one; annealing
  // keeps the current trial's or switches to another.
  std::string choose_algorithm(int64_t index, const SearchTrial* current) const {
    const std::vector<std::string>& others = options_.alternatives;
    if (others.empty()) {
      return options_.algorithm;
    }
    std::vector<std::string> all = {options_.algorithm};
    all.insert(all.end(), others.begin(), others.end());
    TrialRandom random(options_.seed, index, kAlgorithmStream);
    const auto pick = [&](size_t n) {
      return std::min(static_cast<size_t>(random.uniform() * static_cast<double>(n)), n - 1);
    };
    if (options_.strategy != SearchStrategy::kAnnealing || current == nullptr) {
      return all[pick(all.size())];
    }
    const std::string& kept = current->algorithm;
    if (random.uniform() >= kSwitchProbability) {
      return kept;
    }
    all.erase(std::find(all.begin(), all.end(), kept));
    return all[pick(all.size())];
  }

  double ratio(const ResourceUse& use) const {
    return use.ratio(options_.budget.kind, result_.dense);
  }

  // The budget as a share of the dense model.
  double budget_ratio() const {
    const ResourceBudget& b = options_.budget;
    return b.relative ? b.value : b.value / std::max(result_.dense.of(b.kind), 1e-300);
  }

  bool better(const SearchTrial& a, const SearchTrial& b, ResourceKind kind) const {
    if (*a.accuracy != *b.accuracy) {
      return *a.accuracy > *b.accuracy;
    }
    const double ua = a.use.ratio(kind, result_.dense);
    const double ub = b.use.ratio(kind, result_.dense);
    if (ua != ub) {
      return ua < ub;
    }
    return a.index < b.index;
  }

  // The next trial: the recorded one at this position when the search was resumed, otherwise
  // `compute()`'s, recorded (and reported) now.
  template <typename Compute>
  SearchTrial& next_trial(Compute compute) {
    const auto index = static_cast<size_t>(cursor_++);
    if (index < result_.trials.size()) {
      return result_.trials[index];
    }
    const auto start = Clock::now();
    SearchTrial trial = compute();
    trial.index = static_cast<int64_t>(index);
    trial.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result_.trials.push_back(std::move(trial));
    if (progress_) {
      progress_(result_);
    }
    return result_.trials.back();
  }

  // Fine-tuned, BatchNorm re-estimated as asked, and scored.
  void score(SearchTrial& trial, torch::jit::Module& module) {
    adapt(module, options_, data_);
    trial.accuracy = accuracy_of(module, options_, data_);
  }

  // A direction's trial: the smallest overall scale along it that fits the budget. With
  // alternatives, trials 0..k are each pruner's uniform baseline, and the directions after
  // them are proposed as trials 1, 2, ... would be without alternatives.
  SearchTrial direction_trial(int64_t index, const SearchTrial* current) {
    const auto baselines = static_cast<int64_t>(options_.alternatives.size());
    if (index > 0 && index <= baselines) {
      return fitted_trial(std::vector<double>(result_.layers.size(), 1.0), "uniform",
                          options_.alternatives[static_cast<size_t>(index - 1)]);
    }
    std::string origin;
    std::vector<double> direction =
        propose(options_, index > 0 ? index - baselines : 0, result_.layers.size(),
                current != nullptr ? &current->direction : nullptr, &origin);
    return fitted_trial(std::move(direction), std::move(origin),
                        index > 0 ? choose_algorithm(index, current) : options_.algorithm);
  }

  SearchTrial fitted_trial(std::vector<double> direction, std::string origin,
                           const std::string& algorithm) {
    SearchTrial trial;
    trial.direction = std::move(direction);
    trial.origin = std::move(origin);
    trial.algorithm = algorithm;
    const double top = options_.max_sparsity /
                       *std::min_element(trial.direction.begin(), trial.direction.end());
    // The largest scale first: a direction that cannot fit the budget even there is reported
    // as infeasible with what it reached.
    std::vector<double> sparsities = sparsities_at(trial.direction, top, options_.max_sparsity);
    torch::jit::Module fitting = pruned(sparsities, algorithm);
    ResourceUse use = measure(fitting, timed_);
    double hi = top;
    trial.feasible = within_budget(options_.budget, use, result_.dense);
    if (trial.feasible) {
      // The smallest scale that fits: resources fall as the scale grows (in steps, one per
      // channel count; latency with the measurement's noise).
      double lo = 0;
      for (int step = 1; step < options_.bisection_steps; ++step) {
        const double mid = 0.5 * (lo + hi);
        const std::vector<double> at_mid =
            sparsities_at(trial.direction, mid, options_.max_sparsity);
        if (at_mid == sparsities) {
          lo = mid;  // rounding made it the same candidate
          continue;
        }
        torch::jit::Module candidate = pruned(at_mid, algorithm);
        const ResourceUse mid_use = measure(candidate, timed_);
        if (within_budget(options_.budget, mid_use, result_.dense)) {
          hi = mid;
          sparsities = at_mid;
          use = mid_use;
          fitting = candidate;
        } else {
          lo = mid;
        }
      }
    }
    if (trial.feasible && fills(trial)) {
      fill(&sparsities, &use, &fitting, algorithm);
    }
    trial.use = timed_ ? use : measure(fitting, true);  // the latency shown beside the FLOPs
    trial.scale = hi;
    trial.sparsities = sparsities;
    if (trial.feasible) {
      score(trial, fitting);
    }
    return trial;
  }

  // Whether a fitted trial gets the budget's remainder back (fill): not the uniform baseline,
  // which would stop being uniform, and not under a latency budget, whose noise is larger than
  // one channel's time.
  bool fills(const SearchTrial& trial) const {
    return options_.fill_budget && !timed_ && trial.origin != "uniform";
  }

  // Each searched layer's output channels (rows), the unit a filter pruner removes.
  const std::vector<int64_t>& layer_units() {
    if (units_.empty()) {
      const std::unique_ptr<Model> model = make_torchscript_model(dense_);
      for (const std::string& name : result_.layers) {
        units_.push_back(std::max<int64_t>(model->find_module(name)->weight->size(0), 1));
      }
    }
    return units_;
  }

  // Gives pruned channels back, one at a time, while the sped-up model still fits. The scale
  // moves every layer at once, so the channel that brings an expensive layer under the budget
  // can leave a gap that cheaper layers' channels would fill: AMC's trials on the LeNet, whose
  // conv1 has 6 filters, landed between 0.37 and 0.50 of a 0.5 FLOPs budget. The most pruned
  // layer is offered a channel first; a layer whose channel does not fit, or changes nothing
  // (a pruner of coarser units, a channel its skip connection keeps anyway), is not offered
  // another. Filter pruners remove sdk::prune_count(rows, sparsity) rows, so one row fewer is
  // asked for as (removed - 0.75) / rows.
  void fill(std::vector<double>* sparsities, ResourceUse* use, torch::jit::Module* fitting,
            const std::string& algorithm) {
    const std::vector<int64_t>& units = layer_units();
    const size_t n = sparsities->size();
    std::vector<bool> closed(n, false);
    bool grew = true;
    while (grew) {
      grew = false;
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return (*sparsities)[a] > (*sparsities)[b];
      });
      for (const size_t i : order) {
        const int64_t removed = sdk::prune_count(units[i], (*sparsities)[i]);
        if (closed[i] || removed < 1) {
          continue;
        }
        std::vector<double> fewer = *sparsities;
        fewer[i] = removed == 1 ? 0.0
                                : std::round((static_cast<double>(removed) - 0.75) /
                                             static_cast<double>(units[i]) * 1e6) / 1e6;
        torch::jit::Module candidate = pruned(fewer, algorithm);
        const ResourceUse fewer_use = measure(candidate, false);
        const ResourceKind kind = options_.budget.kind;
        if (fewer_use.of(kind) > use->of(kind) &&
            within_budget(options_.budget, fewer_use, result_.dense)) {
          *sparsities = std::move(fewer);
          *use = fewer_use;
          *fitting = candidate;
          grew = true;
        } else {
          closed[i] = true;
        }
      }
    }
  }

  // Random and annealing: trial 0 uniform, then one direction per trial. Annealing's current
  // direction is replayed over the recorded trials with the same rule.
  void run_directions() {
    std::optional<size_t> current;
    while (cursor_ < options_.trials) {
      const int64_t index = cursor_;
      SearchTrial& trial = next_trial([&] {
        return direction_trial(index, current.has_value() ? &result_.trials[*current] : nullptr);
      });
      LITHE_CHECK(!trial.direction.empty(), sdk::Errc::kInvalidConfig, "trial ", trial.index,
                  " of the state file is a ", trial.origin, " trial, which ",
                  search_strategy_name(options_.strategy), " does not make");
      trial.accepted = false;
      if (!trial.accuracy.has_value() || options_.strategy != SearchStrategy::kAnnealing) {
        continue;
      }
      if (!current.has_value()) {
        trial.accepted = true;
      } else {
        const double delta = *trial.accuracy - *result_.trials[*current].accuracy;
        const double temperature =
            options_.start_temperature *
            std::pow(options_.cool_down_rate,
                     static_cast<double>(std::max<int64_t>(trial.index - 1, 0)));
        TrialRandom random(options_.seed, trial.index, kAcceptStream);
        trial.accepted = delta >= 0 || random.uniform() < std::exp(delta / temperature);
      }
      if (trial.accepted) {
        current = static_cast<size_t>(trial.index);
      }
    }
  }

  // NetAdapt's units: the searched layers that must be pruned alike, together. Convolutions
  // whose outputs meet in an add keep the union of their channels after speedup, so pruning one
  // of them alone removes nothing (on torchvision's ResNet-18, 12 of its 20 convolutions); each
  // such set, restricted to the searched layers, is one unit, and every other layer a unit
  // alone. Units are ordered by their first layer. A graph the dependency analysis cannot read
  // leaves every layer a unit alone (NNI's NetAdapt: one layer per candidate).
  std::vector<std::vector<size_t>> net_adapt_units() const {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < result_.layers.size(); ++i) {
      index[result_.layers[i]] = i;
    }
    std::vector<std::vector<size_t>> units;
    std::vector<bool> placed(result_.layers.size(), false);
    try {
      for (const std::vector<std::string>& set : analyze_dependencies(dense_).channel_sets) {
        std::vector<size_t> unit;
        for (const std::string& name : set) {
          if (const auto it = index.find(name); it != index.end() && !placed[it->second]) {
            unit.push_back(it->second);
            placed[it->second] = true;
          }
        }
        if (!unit.empty()) {
          std::sort(unit.begin(), unit.end());
          units.push_back(std::move(unit));
        }
      }
    } catch (const sdk::Error&) {
      units.clear();
      placed.assign(placed.size(), false);
    }
    for (size_t i = 0; i < placed.size(); ++i) {
      if (!placed[i]) {
        units.push_back({i});
      }
    }
    std::sort(units.begin(), units.end());
    return units;
  }

  std::string unit_names(const std::vector<size_t>& unit) const {
    std::string names;
    for (const size_t i : unit) {
      names += (names.empty() ? "'" : ", '") + result_.layers[i] + "'";
    }
    return names;
  }

  // NetAdapt's candidate for one unit: the smallest increase of its layers' sparsity (the same
  // for all of them) that brings the model to `target` (a share of the dense model's resource);
  // recorded as not fitting, without a score, when even max_sparsity does not.
  SearchTrial unit_trial(const std::vector<double>& current, const std::vector<size_t>& unit,
                         double target) {
    SearchTrial trial;
    trial.origin = "netadapt";
    trial.algorithm = options_.algorithm;
    const auto with = [&](double sparsity) {
      std::vector<double> out = current;
      for (const size_t i : unit) {
        out[i] = sparsity;
      }
      return out;
    };
    std::vector<double> sparsities = with(options_.max_sparsity);
    torch::jit::Module fitting = pruned(sparsities, options_.algorithm);
    ResourceUse use = measure(fitting, timed_);
    if (ratio(use) > target) {
      trial.sparsities = sparsities;
      trial.use = timed_ ? use : measure(fitting, true);
      trial.feasible = false;
      return trial;
    }
    const double start = current[unit[0]];  // a unit's layers always share their sparsity
    double lo = start;
    double hi = options_.max_sparsity;
    for (int step = 1; step < options_.bisection_steps; ++step) {
      const double mid = std::round(0.5 * (lo + hi) * 1e6) / 1e6;
      std::vector<double> at_mid = with(mid);
      if (at_mid == sparsities || mid <= start) {
        lo = 0.5 * (lo + hi);
        continue;
      }
      torch::jit::Module candidate = pruned(at_mid, options_.algorithm);
      const ResourceUse mid_use = measure(candidate, timed_);
      if (ratio(mid_use) <= target) {
        hi = mid;
        sparsities = at_mid;
        use = mid_use;
        fitting = candidate;
      } else {
        lo = mid;
      }
    }
    trial.sparsities = sparsities;
    trial.use = timed_ ? use : measure(fitting, true);
    trial.feasible = within_budget(options_.budget, trial.use, result_.dense);
    score(trial, fitting);  // every candidate is scored: the best of the round is kept
    return trial;
  }

  // NetAdapt (Yang et al. 2018; NNI's NetAdaptPruner) on measured resources: each round lowers
  // the target by netadapt_step of the dense model's resource, makes one candidate per unit
  // (that unit alone pruned further until the model meets the round's target), scores each,
  // and keeps the most accurate. It ends when a kept candidate fits the budget, when no unit
  // can meet a round's target alone, or after `trials` trials.
  void run_net_adapt() {
    const std::vector<std::vector<size_t>> units = net_adapt_units();
    std::vector<double> current(result_.layers.size(), 0.0);
    double current_ratio = 1.0;
    const double goal = budget_ratio();
    while (cursor_ < options_.trials) {
      const double target = std::max(goal, current_ratio - options_.netadapt_step);
      std::optional<size_t> chosen;
      for (size_t u = 0; u < units.size() && cursor_ < options_.trials; ++u) {
        if (current[units[u][0]] >= options_.max_sparsity) {
          continue;
        }
        SearchTrial& trial = next_trial([&] { return unit_trial(current, units[u], target); });
        LITHE_CHECK(trial.origin == "netadapt", sdk::Errc::kInvalidConfig, "trial ",
                    trial.index, " of the state file is a ", trial.origin,
                    " trial where NetAdapt makes one for ", unit_names(units[u]));
        trial.accepted = false;
        if (trial.accuracy.has_value() &&
            (!chosen.has_value() ||
             better(trial, result_.trials[*chosen], options_.budget.kind))) {
          chosen = static_cast<size_t>(trial.index);
        }
      }
      if (!chosen.has_value()) {
        return;  // no unit meets the target alone: the budget is out of NetAdapt's reach
      }
      SearchTrial& kept = result_.trials[*chosen];
      kept.accepted = true;
      current = kept.sparsities;
      current_ratio = ratio(kept.use);
      if (kept.feasible) {
        return;
      }
    }
  }

  // Each searched layer's static features, min-max scaled over the layers (AMC's layer
  // embedding): position, Linear or not, input and output channels, kernel elements, weights;
  // and its share of the model's FLOPs (not scaled: the state's reduced and rest are sums of
  // it).
  void layer_embedding() {
    const std::unique_ptr<Model> model = make_torchscript_model(dense_);
    const FlopsReport flops = count_flops(dense_, options_.latency.input_shape, FlopsMode::kDefault);
    std::map<std::string, double> layer_flops;
    for (const LayerFlops& row : flops.layers) {
      layer_flops[row.name] += static_cast<double>(row.flops);
    }
    const size_t n = result_.layers.size();
    std::vector<std::vector<double>> columns(6, std::vector<double>(n, 0.0));
    double total = 0;
    for (size_t i = 0; i < n; ++i) {
      const ModuleRecord* m = model->find_module(result_.layers[i]);
      const at::Tensor& w = *m->weight;
      columns[0][i] = static_cast<double>(i);
      columns[1][i] = m->op_type == "Linear" ? 1.0 : 0.0;
      columns[2][i] = w.dim() > 1 ? static_cast<double>(w.size(1)) : 1.0;
      columns[3][i] = static_cast<double>(w.size(0));
      columns[4][i] = static_cast<double>(w.numel()) / (columns[2][i] * columns[3][i]);
      columns[5][i] = static_cast<double>(w.numel());
      flops_share_.push_back(layer_flops[result_.layers[i]]);
      total += flops_share_.back();
    }
    for (double& f : flops_share_) {
      f = total > 0 ? f / total : 1.0 / static_cast<double>(n);
    }
    features_.assign(n, {});
    for (const std::vector<double>& column : columns) {
      const auto [lo, hi] = std::minmax_element(column.begin(), column.end());
      for (size_t i = 0; i < n; ++i) {
        features_[i].push_back(
            static_cast<float>(*hi > *lo ? (column[i] - *lo) / (*hi - *lo) : 0.0));
      }
    }
  }

  // The state of layer `t` given the actions (preserve ratios) of the layers before it.
  std::vector<float> amc_state(size_t t, const std::vector<double>& actions) const {
    std::vector<float> state = features_[t];
    double reduced = 0;
    double rest = 0;
    for (size_t j = 0; j < flops_share_.size(); ++j) {
      if (j < t) {
        reduced += flops_share_[j] * (1.0 - actions[j]);
      } else if (j > t) {
        rest += flops_share_[j];
      }
    }
    state.push_back(static_cast<float>(flops_share_[t]));
    state.push_back(static_cast<float>(reduced));
    state.push_back(static_cast<float>(rest));
    state.push_back(static_cast<float>(t == 0 ? 1.0 : actions[t - 1]));
    return state;
  }

  // Episode `index`'s proposal: a preserve ratio per layer, random during the warm-up, then the
  // actor's with decaying Gaussian noise, each in [1 − max_sparsity, 1].
  std::vector<double> amc_actions(int64_t index, amc::DdpgAgent& agent) const {
    TrialRandom random(options_.seed, index, kAmcActStream);
    const double lowest = 1.0 - options_.max_sparsity;
    std::vector<double> actions;
    const double sigma =
        options_.amc_noise *
        std::pow(options_.amc_noise_decay,
                 static_cast<double>(std::max<int64_t>(index - options_.amc_warmup - 1, 0)));
    for (size_t t = 0; t < result_.layers.size(); ++t) {
      double a = 0;
      if (index <= options_.amc_warmup) {
        a = lowest + (1.0 - lowest) * random.uniform();
      } else {
        a = agent.act(amc_state(t, actions)) + sigma * random.normal();
      }
      actions.push_back(std::clamp(a, lowest, 1.0));
    }
    return actions;
  }

  // What the agent learns from a trial: the actions that happened (the sparsities after the
  // scale was fitted), each step rewarded with the episode's accuracy less a moving baseline.
  void amc_learn(const SearchTrial& trial, amc::DdpgAgent& agent, double* baseline,
                 bool* has_baseline) {
    const double accuracy = trial.accuracy.value_or(0.0);
    if (!*has_baseline) {
      *baseline = accuracy;
      *has_baseline = true;
    }
    const double reward = accuracy - *baseline;
    *baseline = 0.5 * *baseline + 0.5 * accuracy;  // NNI's moving_alpha 0.5
    std::vector<double> actions;
    for (const double sparsity : trial.sparsities) {
      actions.push_back(1.0 - sparsity);
    }
    const size_t n = actions.size();
    for (size_t t = 0; t < n; ++t) {
      amc::Transition transition;
      transition.state = amc_state(t, actions);
      transition.action = static_cast<float>(actions[t]);
      transition.reward = static_cast<float>(reward);
      transition.next_state = amc_state(std::min(t + 1, n - 1), actions);
      transition.done = t + 1 == n;
      agent.observe(std::move(transition));
    }
    if (trial.index >= options_.amc_warmup) {
      TrialRandom random(options_.seed, trial.index, kAmcUpdateStream);
      const std::function<double()> draw = [&] { return random.uniform(); };
      for (size_t t = 0; t < n; ++t) {
        agent.update(draw);
      }
    }
  }

  // AMC: trial 0 uniform, then one episode per trial; the agent learns from every trial,
  // recorded ones included (replayed from their sparsities and accuracies).
  void run_amc() {
    layer_embedding();
    TrialRandom init(options_.seed, -1, kAmcInitStream);
    amc::DdpgAgent agent(static_cast<int>(features_[0].size() + 4), amc::DdpgOptions(),
                         [&] { return init.uniform(); });
    double baseline = 0;
    bool has_baseline = false;
    while (cursor_ < options_.trials) {
      const int64_t index = cursor_;
      SearchTrial& trial = next_trial([&] {
        if (index == 0) {
          return direction_trial(0, nullptr);
        }
        std::vector<double> shares;
        for (const double a : amc_actions(index, agent)) {
          shares.push_back(std::max(1.0 - a, 1e-6));
        }
        return fitted_trial(normalised(shares), "amc", options_.algorithm);
      });
      LITHE_CHECK(trial.origin == (index == 0 ? "uniform" : "amc"), sdk::Errc::kInvalidConfig,
                  "trial ", trial.index, " of the state file is a ", trial.origin,
                  " trial, which amc does not make");
      amc_learn(trial, agent, &baseline, &has_baseline);
    }
  }

  std::vector<std::vector<float>> features_;  // AMC: each layer's scaled static features
  std::vector<double> flops_share_;           // AMC: each layer's share of the FLOPs
  std::vector<int64_t> units_;                // each searched layer's rows (fill)

  const torch::jit::Module& dense_;
  const PluginRegistry& registry_;
  const SearchOptions& options_;
  const SearchData& data_;
  const SearchProgress& progress_;
  torch::jit::Module reference_;  // timed beside every candidate
  const bool timed_;              // whether the budget is latency (every measurement timed)
  SearchResult result_;
  int64_t cursor_ = 0;            // trials consumed so far, recorded or run
};

}  // namespace

SearchResult run_budget_search(const torch::jit::Module& dense, const PluginRegistry& registry,
                               const SearchOptions& options, const SearchData& data,
                               const SearchResult* resumed, const SearchProgress& on_progress) {
  check_search_options(options);
  LITHE_CHECK(data.test != nullptr && data.test->size() > 0, sdk::Errc::kInvalidConfig,
              "the search needs test data to evaluate its trials");
  return SearchRun(dense, registry, options, data, on_progress).run(resumed);
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
