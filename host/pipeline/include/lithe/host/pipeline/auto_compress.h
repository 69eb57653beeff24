#pragma once
/// \file
/// AutoCompress (NNI's AutoCompressPruner, Liu et al. 2020) to a measured budget: `rounds`
/// rounds, each of which
///   1. searches per-layer sparsities on the model the round starts from (run_budget_search,
///      annealing as NNI's SimulatedAnnealingPruner) for this round's share of the budget;
///   2. trains the model toward the best trial's sparsities with `round_algorithm` (NNI's is
///      ADMM: the `admm` plugin with base_algo the search's pruner) and masks it;
///   3. speeds the masked model up, so the next round starts from a physically smaller model,
///      and re-estimates its BatchNorm statistics (search.recalibrate_bn_batches, as the
///      search's trials get: ADMM masks the trained weights in one shot at its end).
/// Round r of R aims at dense · (budget / dense)^(r / R): every round removes the same share of
/// what is left, as NNI's sparsity_each_round = 1 − (1 − S)^(1/R) does for weights.
///
/// Departures from NNI, each because NNI's is wrong or weaker: the budget is FLOPs, parameters
/// or measured latency of the sped-up model, not the weight sparsity of the Conv2d layers
/// (which speedup then exceeds, as removing a filter also removes the next layer's input
/// channel); the search is Lithe's budget search (its trials bisect the scale until the
/// sped-up model fits). With the admm plugin the training step is NNI's.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/script.h>

#include "lithe/host/pipeline/budget_search.h"

namespace lithe::host {

struct AutoCompressOptions {
  /// The search of every round: `budget` is the overall one, against the dense model;
  /// `algorithm` the base pruner (level, l1_filter, l2_filter or fpgm: ADMM's base_algo), no
  /// alternatives; `trials` per round; round r searches with seed `seed + r`.
  SearchOptions search;
  int64_t rounds = 3;  ///< NNI's num_iterations, >= 1
  /// The registered pruner each round trains toward the best trial's sparsities with, given
  /// one config_list entry per layer; NNI's is ADMM (plugins/admm, whose `base_algo` should
  /// be the search's pruner). The host names no plugin: the caller does.
  std::string round_algorithm;
  std::string round_options_json = "{}";  ///< its "options" object
};

/// One finished round.
struct AutoCompressRound {
  /// The round's search on the model the round started from (its `dense` is that model,
  /// its budget the round's).
  SearchResult search;
  ResourceBudget budget;          ///< the round's target
  std::vector<double> sparsities;  ///< the best trial's, one per search.layers entry
  ResourceUse use;                 ///< of the round's sped-up model, against the dense model
  double accuracy = 0;             ///< of the round's model, on the test data
};

struct AutoCompressResult {
  ResourceUse dense;  ///< the model as it came
  double dense_accuracy = 0;
  std::vector<AutoCompressRound> rounds;
  torch::jit::Module model;  ///< after the last finished round (the dense model before any)
};

/// What a restarted AutoCompress continues from: the finished rounds with the model after the
/// last of them, and the search of the round in flight (its trials are not run again).
struct AutoCompressResume {
  ResourceUse dense;
  double dense_accuracy = 0;
  std::vector<AutoCompressRound> rounds;
  std::optional<torch::jit::Module> model;  ///< required with rounds
  std::optional<SearchResult> in_flight;
};

/// Called with the rounds finished so far and, while a round searches, its search so far
/// (nullptr when a round just finished: result.model is then the new model).
using AutoCompressProgress =
    std::function<void(const AutoCompressResult& result, const SearchResult* in_flight)>;

/// sdk::Error(kInvalidConfig) naming the option: rounds < 1, alternatives, no round algorithm,
/// round options that are not a JSON object; and check_search_options' rules.
void check_auto_compress_options(const AutoCompressOptions& options);

/// The budget of round `round` (1-based) of `rounds`: FLOPs and parameters as counts, latency
/// as a share of the dense model's (or milliseconds, when the budget is), at
/// dense · (budget / dense)^(round / rounds).
ResourceBudget auto_compress_round_budget(const ResourceBudget& overall, const ResourceUse& dense,
                                          int64_t round, int64_t rounds);

/// Runs AutoCompress on `dense` (never changed). data.train is required (the rounds train);
/// options.search.train is how (NNI: Adam, lr 1e-3, weight decay 5e-5). Latency is timed
/// against `dense` in every round: options.search.latency_probe when set, in this process
/// otherwise. Errors name the round; a round whose search finds no trial within its budget is
/// an error.
AutoCompressResult run_auto_compress(const torch::jit::Module& dense,
                                     const PluginRegistry& registry,
                                     const AutoCompressOptions& options, const SearchData& data,
                                     const AutoCompressResume* resumed = nullptr,
                                     const AutoCompressProgress& on_progress = {});

}  // namespace lithe::host
