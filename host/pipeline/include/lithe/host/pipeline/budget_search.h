#pragma once
/// \file
/// Auto-compression to a measured budget (`lithe search`): per-layer sparsities for a registered
/// pruner that keep the sped-up model within a FLOPs, parameter or latency budget at the best
/// accuracy. Trial 0 is uniform (every layer the same sparsity: the baseline every other trial
/// is compared with). Random and annealing trials pick a direction (how much each layer is
/// pruned relative to the others) and bisect the overall scale along it until the sped-up model
/// just fits; NetAdapt's trials prune one layer (or set of coupled layers) further per round.
/// Each candidate is scored (after an optional short fine-tune and BatchNorm re-estimation).
/// Every trial's randomness comes from the seed and the trial's index alone, and every decision
/// from the trials before it, so a search resumed from its recorded trials continues exactly as
/// an uninterrupted one.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lithe/host/pipeline/resource_budget.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"

namespace torch::jit {
struct Module;
}

namespace lithe::host {

enum class SearchStrategy {
  kRandom,     ///< every direction drawn afresh: log-normal per layer
  kAnnealing,  ///< a perturbation of the current direction, kept by Metropolis' rule
  /// NetAdapt: rounds that each lower the resource by netadapt_step, one candidate per unit
  /// (that unit alone pruned further), the most accurate kept. A unit is a layer, or the
  /// searched layers whose outputs meet in an add (pruned alike: speedup keeps the union of
  /// their channels)
  kNetAdapt,
  /// AMC: a DDPG agent proposes each layer's preserve ratio from the layer's state, learning
  /// from every trial's accuracy; its proposal is the direction the scale is bisected along
  kAmc,
};

/// "random", "annealing", "netadapt", "amc"; parse_search_strategy is the inverse (sdk::Error
/// naming `option`).
const char* search_strategy_name(SearchStrategy strategy);
SearchStrategy parse_search_strategy(const std::string& text, const std::string& option);

struct SearchOptions {
  std::string algorithm;                     ///< a registered pruner (one layer per entry)
  std::string algorithm_options_json = "{}";  ///< its "options" object (every pruner's)
  /// Random and annealing: further pruners a trial may prune with instead of `algorithm`. Trials
  /// 0..k (k alternatives) are the uniform baselines of `algorithm` and of each alternative in
  /// turn; after them, random draws a pruner per trial, and annealing keeps the current one or
  /// switches to another with probability 1/3. Empty: `algorithm` alone.
  std::vector<std::string> alternatives;
  std::vector<std::string> op_types = {"Conv2d"};  ///< the module types searched
  std::vector<std::string> layers;           ///< only these (each of op_types); empty: all
  ResourceBudget budget;
  SearchStrategy strategy = SearchStrategy::kAnnealing;
  int64_t trials = 16;     ///< trial 0 (uniform) included; >= 1
  uint64_t seed = 0;
  double max_sparsity = 0.9;    ///< no layer beyond it, in (0, 1)
  /// σ of the log-normal change of each layer's share (random: of the draw; annealing: at the
  /// start temperature, shrinking with it).
  double perturbation = 0.5;
  /// Annealing: a worse trial is kept with probability exp(Δaccuracy / T), T starting here
  /// (in accuracy units) and multiplied by cool_down_rate after each trial.
  double start_temperature = 0.02;
  double cool_down_rate = 0.9;
  /// Random and annealing: trial 1 tries this direction (one share per searched layer, > 0;
  /// e.g. what each layer tolerates in a sensitivity table) and annealing goes on from it when
  /// it is the better; empty: none.
  std::vector<double> start_direction;
  /// AMC: episodes of random actions before the agent acts, and the spread of the exploration
  /// noise added to its actions (multiplied by amc_noise_decay after each episode).
  int64_t amc_warmup = 8;
  double amc_noise = 0.5;
  double amc_noise_decay = 0.95;
  /// NetAdapt: how much each round lowers the target, as a share of the dense model's resource.
  double netadapt_step = 0.1;
  int bisection_steps = 12;     ///< measurements of the scale per trial, >= 1
  /// Random, annealing, sensitivity and AMC trials under a FLOPs or parameter budget: after the
  /// scale is bisected, give pruned channels back one at a time (the most pruned layer first)
  /// while the sped-up model still fits, so that a trial uses the budget up to one channel
  /// rather than up to the last step of the scale. Not the uniform trial 0, not under a latency
  /// budget.
  bool fill_budget = true;
  FlopsMode flops_mode = FlopsMode::kDefault;
  LatencySettings latency;      ///< input_shape also fixes the FLOPs count's input
  /// Times a candidate against the dense model: (dense ms, candidate ms) as medians. Empty:
  /// in this process (median_latencies with `latency`). `lithe search` times every candidate
  /// in a fresh process (`lithe latency`), as a server would run it: the search's own heap
  /// otherwise favours smaller models (it measured 0.49 of the dense model for a ResNet that a
  /// fresh process times at 0.54).
  LatencyProbe latency_probe;
  /// Epochs of fine-tuning each trial's sped-up model gets before it is evaluated (0: none),
  /// with `train` (its seed included: every trial trains on the same batches).
  int64_t trial_epochs = 0;
  /// Then re-estimate every BatchNorm layer's running statistics on this many training batches
  /// (recalibrate_batchnorm; 0: none). One-shot filter pruning leaves the statistics of the
  /// channels' old mix, so a BatchNorm network's accuracy without it says little about a
  /// candidate (not NNI's: its searches score the model as pruned).
  int64_t recalibrate_bn_batches = 0;
  TrainOptions train;
};

/// One evaluated candidate.
struct SearchTrial {
  int64_t index = 0;
  /// "uniform", "sensitivity" (SearchOptions::start_direction), "random", "annealing",
  /// "netadapt" or "amc"
  std::string origin;
  /// The pruner that made it (SearchOptions::algorithm or an alternative). Set on every trial
  /// run_budget_search returns; empty only as read from a state file written before
  /// alternatives existed (the search then fills in SearchOptions::algorithm).
  std::string algorithm;
  /// Each layer's relative share (SearchResult::layers order); empty for NetAdapt's trials,
  /// which prune one unit further than the round's start.
  std::vector<double> direction;
  /// The fitted scale: sparsity of layer i = min(max_sparsity, scale·direction[i]), less the
  /// channels fill_budget gave back
  double scale = 0;
  std::vector<double> sparsities;  ///< the candidate, one per layer
  bool feasible = false;           ///< within the budget
  /// Of the sped-up model (when no scale fits, at the largest one tried).
  ResourceUse use;
  /// Of the candidate: every feasible one is scored, and NetAdapt also scores the candidates of
  /// its rounds above the budget; none when the candidate could not reach its target.
  std::optional<double> accuracy;
  /// Annealing: whether it became the current direction; NetAdapt: whether its round kept it.
  bool accepted = false;
  double seconds = 0;              ///< the trial's wall time (not read back on resume)
};

struct SearchResult {
  std::vector<std::string> layers;  ///< the searched layers, in the model's module order
  ResourceUse dense;                ///< the model as it came
  double dense_accuracy = 0;
  std::vector<SearchTrial> trials;
  /// The feasible trial with the highest accuracy (ties: less of the budget's resource, then
  /// the earlier trial); none when no trial fits.
  std::optional<int64_t> best;
};

/// What a search evaluates on; `train` only with trial_epochs or recalibrate_bn_batches > 0
/// (kept alive by the caller).
struct SearchData {
  const Dataset* test = nullptr;
  const Dataset* train = nullptr;
};

/// Called after the dense model is measured (no trial yet) and after every trial.
using SearchProgress = std::function<void(const SearchResult&)>;

/// "l1_filter", or with alternatives "l1_filter,fpgm": the pruners a search chooses from.
std::string search_algorithms_text(const SearchOptions& options);
/// A trial as progress lines and reports name it: its origin, and its pruner when the search
/// chose among several ("annealing, fpgm").
std::string trial_label(const SearchTrial& trial, bool several_pruners);

/// sdk::Error(kInvalidConfig) naming the option for a value out of range (trials < 1, a
/// start direction with a share <= 0 or given to NetAdapt,
/// max_sparsity outside (0, 1), perturbation <= 0, temperatures, bisection steps, latency
/// settings, an input shape with a size < 1).
void check_search_options(const SearchOptions& options);

/// The searched layers of `dense`: modules of options.op_types with a weight, or
/// options.layers (sdk::Error(kInvalidConfig) naming --layers for one that does not exist or is
/// not of op_types; no layer at all is an error too).
std::vector<std::string> searched_layers(const torch::jit::Module& dense,
                                         const SearchOptions& options);

/// Runs the search on `dense` (never changed). `resumed` (a previous run's result with the same
/// options, e.g. read from a state file) supplies the dense measurements and the trials already
/// done, which are not run again; its layers must be this search's (sdk::Error(kInvalidConfig)
/// otherwise). Runs trials until options.trials exist. The plugin's errors name it and the
/// layer; speedup's name the layer.
SearchResult run_budget_search(const torch::jit::Module& dense, const PluginRegistry& registry,
                               const SearchOptions& options, const SearchData& data,
                               const SearchResult* resumed = nullptr,
                               const SearchProgress& on_progress = {});

/// The config_list of a candidate: one entry per layer with a sparsity > 0
/// ({"sparsity": s, "op_names": [layer]}); layers at 0 are left out.
nlohmann::json search_config_list(const std::vector<std::string>& layers,
                                  const std::vector<double>& sparsities);

/// The sped-up model of `sparsities` (one per layer of `layers`): pruned by `algorithm` (empty:
/// options.algorithm; a trial's SearchTrial::algorithm), sped
/// up on an input of options.latency.input_shape, fine-tuned for options.trial_epochs and its
/// BatchNorm statistics re-estimated on options.recalibrate_bn_batches — the model a trial
/// evaluated. In eval mode.
torch::jit::Module build_search_candidate(const torch::jit::Module& dense,
                                          const PluginRegistry& registry,
                                          const SearchOptions& options,
                                          const std::vector<std::string>& layers,
                                          const std::vector<double>& sparsities,
                                          const SearchData& data,
                                          const std::string& algorithm = {});

/// The trials no other trial beats on both accuracy and the budget's resource (lower use, higher
/// accuracy), by ascending use; feasible or not, evaluated ones only.
std::vector<int64_t> pareto_front(const SearchResult& result, ResourceKind kind);

}  // namespace lithe::host
