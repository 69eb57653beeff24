// The search to a measured budget on real models (the bundled LeNet, the residual block) with
// the L1 filter pruner linked directly: every feasible trial's sped-up model fits the budget as
// counted afresh, the search is reproducible trial for trial (at any thread count, and when
// resumed from a prefix of its trials), and budgets parse as documented.
#include "lithe/host/pipeline/budget_search.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/graph/layer_dependencies.h"
#include "lithe/host/model/model.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "plugins/filter_norm/filter_norm.h"
#include "support/fashion_data.h"
#include "support/paths.h"
#include "support/registry.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

PluginRegistry& filter_registry() {
  return test::registry_of({&plugins::filter_norm::register_algorithms});
}

SearchOptions lenet_options(ResourceKind kind, const std::string& budget, int64_t trials) {
  SearchOptions o;
  o.algorithm = "l1_filter";
  o.budget = parse_resource_budget(kind, budget, "--budget");
  o.trials = trials;
  o.seed = 7;
  o.latency.input_shape = {1, 1, 28, 28};
  o.latency.runs = 3;
  o.latency.warmup = 1;
  o.bisection_steps = 8;
  return o;
}

// Everything a trial decided, without its wall time and latency (measured, so never the same).
void expect_same_trials(const SearchResult& a, const SearchResult& b) {
  ASSERT_EQ(a.trials.size(), b.trials.size());
  for (size_t i = 0; i < a.trials.size(); ++i) {
    const SearchTrial& x = a.trials[i];
    const SearchTrial& y = b.trials[i];
    EXPECT_EQ(x.origin, y.origin) << i;
    EXPECT_EQ(x.algorithm, y.algorithm) << i;
    EXPECT_EQ(x.direction, y.direction) << i;
    EXPECT_EQ(x.scale, y.scale) << i;
    EXPECT_EQ(x.sparsities, y.sparsities) << i;
    EXPECT_EQ(x.feasible, y.feasible) << i;
    EXPECT_EQ(x.use.flops, y.use.flops) << i;
    EXPECT_EQ(x.use.params, y.use.params) << i;
    EXPECT_EQ(x.accuracy, y.accuracy) << i;
    EXPECT_EQ(x.accepted, y.accepted) << i;
  }
  EXPECT_EQ(a.best, b.best);
}

// `result` run again from its first `kept` trials (as a state file would give them): the same
// trials, the recorded ones taken as they were.
void expect_resumes_identically(const torch::jit::Module& dense, const SearchOptions& options,
                                const Dataset& test, const SearchResult& result, size_t kept) {
  SearchResult prefix = result;
  prefix.trials.resize(kept);
  prefix.best.reset();
  expect_same_trials(result, run_budget_search(dense, filter_registry(), options,
                                               {&test, nullptr}, &prefix));
}

// The conformance residual block (a shortcut add on each of its two blocks), and 64 seeded
// random images for it: enough to score its trials.
torch::jit::Module resblock_model() {
  return load_torchscript_module(test::source_dir() / "tests/data/nni/models/resblock.pt");
}

Dataset resblock_data() {
  Dataset data;
  data.images = at::randn({64, 3, 16, 16}, at::detail::createCPUGenerator(1));
  data.labels = at::randint(0, 10, {64}, at::detail::createCPUGenerator(2), at::kLong);
  return data;
}

class BudgetSearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::fashion_installed()) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
    dense_ = load_torchscript_module(test::lenet_model());
    test_ = test::fashion("test", 300);
  }
  torch::jit::Module dense_;
  Dataset test_;
};

TEST_F(BudgetSearchTest, EveryFeasibleTrialFitsTheFlopsBudgetCountedAfresh) {
  const SearchOptions options = lenet_options(ResourceKind::kFlops, "0.5x", 5);
  const SearchResult result =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  EXPECT_EQ(result.layers, (std::vector<std::string>{"conv1", "conv2"}));
  EXPECT_EQ(result.dense.flops, count_flops(dense_, {1, 1, 28, 28}, FlopsMode::kDefault).total_flops);
  ASSERT_EQ(result.trials.size(), 5U);
  EXPECT_EQ(result.trials[0].origin, "uniform");
  EXPECT_EQ(result.trials[0].direction, (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(result.trials[0].sparsities[0], result.trials[0].sparsities[1]);
  int feasible = 0;
  for (const SearchTrial& trial : result.trials) {
    EXPECT_EQ(trial.origin, trial.index == 0 ? "uniform" : "annealing");
    if (!trial.feasible) {
      continue;
    }
    ++feasible;
    // The model the trial measured, rebuilt and counted by the FLOPs counter on its own.
    torch::jit::Module rebuilt = build_search_candidate(dense_, filter_registry(), options,
                                                        result.layers, trial.sparsities, {});
    const FlopsReport counted = count_flops(rebuilt, {1, 1, 28, 28}, FlopsMode::kDefault);
    EXPECT_EQ(counted.total_flops, trial.use.flops) << trial.index;
    EXPECT_LE(static_cast<double>(counted.total_flops), 0.5 * result.dense.flops) << trial.index;
    // Smaller than dense in earnest: the conv layers lost filters.
    EXPECT_LT(rebuilt.attr("conv1").toModule().attr("weight").toTensor().size(0) +
                  rebuilt.attr("conv2").toModule().attr("weight").toTensor().size(0),
              6 + 16);
    ASSERT_TRUE(trial.accuracy.has_value());
    EXPECT_GE(*trial.accuracy, 0.0);
    // Sparsities are the scale along the direction, capped, less the channels the fill gave
    // back (none for the uniform trial).
    for (size_t i = 0; i < trial.sparsities.size(); ++i) {
      const double scaled = std::min(options.max_sparsity, trial.scale * trial.direction[i]);
      EXPECT_LE(trial.sparsities[i], scaled + 1e-6) << trial.index;
      if (trial.index == 0) {
        EXPECT_NEAR(trial.sparsities[i], scaled, 1e-6);
      }
    }
  }
  EXPECT_GE(feasible, 4) << "the budget is reachable along nearly every direction";
  ASSERT_TRUE(result.best.has_value());
  for (const SearchTrial& trial : result.trials) {
    if (trial.feasible) {
      EXPECT_LE(*trial.accuracy, *result.trials[*result.best].accuracy);
    }
  }
}

// The fill: after the scale is bisected, pruned channels go back one at a time while the model
// fits. Every filled trial is then full: one more channel back in any pruned layer breaks the
// budget (or changes nothing). Without the fill, trial 1 (the same direction either way) prunes
// at least as many channels and uses less of the budget; the uniform trial 0 is never filled.
TEST_F(BudgetSearchTest, TheFillGivesChannelsBackUntilOneMoreWouldBreakTheBudget) {
  SearchOptions options = lenet_options(ResourceKind::kFlops, "0.5x", 4);
  options.op_types = {"Conv2d", "Linear"};
  options.layers = {"conv1", "conv2", "fc1", "fc2"};
  SearchOptions unfilled = options;
  unfilled.fill_budget = false;
  const SearchResult filled =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  const SearchResult plain =
      run_budget_search(dense_, filter_registry(), unfilled, {&test_, nullptr});
  const std::vector<int64_t> rows = {6, 16, 120, 84};  // conv1, conv2, fc1, fc2
  ASSERT_EQ(filled.layers.size(), rows.size());
  const double budget = 0.5 * static_cast<double>(filled.dense.flops);
  int full = 0;
  for (const SearchTrial& trial : filled.trials) {
    if (!trial.feasible || trial.index == 0) {
      continue;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto removed = static_cast<int64_t>(trial.sparsities[i] * rows[i] + 1e-9);
      if (removed < 1) {
        continue;
      }
      std::vector<double> more = trial.sparsities;
      more[i] = (static_cast<double>(removed) - 0.75) / static_cast<double>(rows[i]);
      torch::jit::Module rebuilt = build_search_candidate(dense_, filter_registry(), options,
                                                          filled.layers, more, {});
      const int64_t flops = count_flops(rebuilt, {1, 1, 28, 28}, FlopsMode::kDefault).total_flops;
      EXPECT_TRUE(static_cast<double>(flops) > budget || flops == trial.use.flops)
          << "trial " << trial.index << " could give " << filled.layers[i]
          << " a channel back: " << flops << " FLOPs of " << budget;
      ++full;
    }
  }
  EXPECT_GE(full, 3) << "the filled trials prune channels";
  EXPECT_EQ(filled.trials[0].sparsities, plain.trials[0].sparsities);
  ASSERT_TRUE(filled.trials[1].feasible && plain.trials[1].feasible);
  EXPECT_EQ(filled.trials[1].direction, plain.trials[1].direction);
  EXPECT_GT(filled.trials[1].use.flops, plain.trials[1].use.flops);
  EXPECT_LE(static_cast<double>(filled.trials[1].use.flops), budget);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_LE(filled.trials[1].sparsities[i], plain.trials[1].sparsities[i]) << i;
  }
}

TEST_F(BudgetSearchTest, SameSeedSameTrialsAtAnyThreadCountAndWhenResumed) {
  const SearchOptions options = lenet_options(ResourceKind::kFlops, "0.4x", 5);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const SearchResult one = run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  at::set_num_threads(2);
  std::vector<size_t> seen;
  const SearchResult two = run_budget_search(dense_, filter_registry(), options, {&test_, nullptr},
                                             nullptr, [&](const SearchResult& r) {
                                               seen.push_back(r.trials.size());
                                             });
  at::set_num_threads(threads);
  expect_same_trials(one, two);
  EXPECT_EQ(seen, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));  // once before, once per trial

  // Resumed from its first two trials (as read from a state file): the rest is run, the same.
  SearchResult prefix = one;
  prefix.trials.resize(2);
  prefix.best.reset();
  std::vector<size_t> resumed_seen;
  const SearchResult resumed =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr}, &prefix,
                        [&](const SearchResult& r) { resumed_seen.push_back(r.trials.size()); });
  expect_same_trials(one, resumed);
  for (size_t i = 0; i < 2; ++i) {  // taken as recorded, not measured again
    EXPECT_EQ(resumed.trials[i].use.latency_ms, one.trials[i].use.latency_ms);
  }
  EXPECT_EQ(resumed_seen, (std::vector<size_t>{2, 3, 4, 5}));

  // Another seed draws other directions.
  SearchOptions other = options;
  other.seed = 8;
  other.trials = 2;
  const SearchResult different =
      run_budget_search(dense_, filter_registry(), other, {&test_, nullptr});
  EXPECT_NE(different.trials[1].direction, one.trials[1].direction);
  EXPECT_EQ(different.trials[0].direction, one.trials[0].direction);  // uniform either way
}

// Several pruners: each has its uniform baseline (the same sparsities: FLOPs count channels,
// not which ones), every later trial names the pruner it used, the best is rebuilt with its own
// pruner, and the trials replay exactly when resumed.
TEST_F(BudgetSearchTest, AlternativePrunersEachGetABaselineAndTheBestIsRebuiltWithItsOwn) {
  SearchOptions options = lenet_options(ResourceKind::kFlops, "0.5x", 8);
  options.alternatives = {"l2_filter"};
  const SearchResult result =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  ASSERT_EQ(result.trials.size(), 8U);
  EXPECT_EQ(result.trials[0].origin, "uniform");
  EXPECT_EQ(result.trials[0].algorithm, "l1_filter");
  EXPECT_EQ(result.trials[1].origin, "uniform");
  EXPECT_EQ(result.trials[1].algorithm, "l2_filter");
  EXPECT_EQ(result.trials[1].sparsities, result.trials[0].sparsities);
  for (size_t i = 2; i < result.trials.size(); ++i) {
    EXPECT_EQ(result.trials[i].origin, "annealing") << i;
    EXPECT_TRUE(result.trials[i].algorithm == "l1_filter" ||
                result.trials[i].algorithm == "l2_filter") << result.trials[i].algorithm;
  }
  // Past the baselines the directions are the ones a single-pruner search proposes (from a
  // uniform current direction either way).
  SearchOptions single = options;
  single.alternatives.clear();
  single.trials = 2;
  const SearchResult alone =
      run_budget_search(dense_, filter_registry(), single, {&test_, nullptr});
  EXPECT_EQ(result.trials[2].direction, alone.trials[1].direction);
  ASSERT_TRUE(result.best.has_value());
  const SearchTrial& best = result.trials[static_cast<size_t>(*result.best)];
  torch::jit::Module rebuilt = build_search_candidate(
      dense_, filter_registry(), options, result.layers, best.sparsities, {&test_, nullptr},
      best.algorithm);
  const std::unique_ptr<Model> model = make_torchscript_model(rebuilt);
  EXPECT_EQ(evaluate(*model, test_, options.train.eval_batch_size).accuracy, *best.accuracy);
  expect_resumes_identically(dense_, options, test_, result, 3);

  // Only random and annealing choose among pruners; a pruner named twice is an error.
  SearchOptions netadapt = options;
  netadapt.strategy = SearchStrategy::kNetAdapt;
  EXPECT_THAT([&] { check_search_options(netadapt); },
              ThrowsMessage<sdk::Error>(HasSubstr("several pruners (--algorithm a,b) are for the "
                                                  "random and annealing strategies, not netadapt")));
  SearchOptions twice = options;
  twice.alternatives = {"l2_filter", "l1_filter"};
  EXPECT_THAT([&] { check_search_options(twice); },
              ThrowsMessage<sdk::Error>(HasSubstr("--algorithm: 'l1_filter' is named twice")));
}

TEST_F(BudgetSearchTest, RandomDrawsEveryDirectionAfreshAndALatencyBudgetIsTimed) {
  SearchOptions options = lenet_options(ResourceKind::kLatency, "0.95x", 3);
  options.strategy = SearchStrategy::kRandom;
  options.latency.input_shape = {32, 1, 28, 28};
  options.latency.runs = 5;
  const SearchResult result =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  for (const SearchTrial& trial : result.trials) {
    EXPECT_EQ(trial.origin, trial.index == 0 ? "uniform" : "random");
    EXPECT_GT(trial.use.latency_ms, 0);
    EXPECT_GT(trial.use.dense_latency_ms, 0);
    if (trial.feasible) {  // the measurement that decided it, alongside the dense model
      EXPECT_LE(trial.use.latency_ms / trial.use.dense_latency_ms, 0.95);
    }
  }
  EXPECT_EQ(result.dense.flops,
            count_flops(dense_, {32, 1, 28, 28}, FlopsMode::kDefault).total_flops);
}

TEST_F(BudgetSearchTest, ABudgetNoDirectionReachesLeavesNoBest) {
  SearchOptions options = lenet_options(ResourceKind::kParams, "0.05x", 2);
  options.max_sparsity = 0.3;
  const SearchResult result =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  ASSERT_EQ(result.trials.size(), 2U);
  for (const SearchTrial& trial : result.trials) {
    EXPECT_FALSE(trial.feasible);
    EXPECT_FALSE(trial.accuracy.has_value());
    EXPECT_GT(trial.use.ratio(ResourceKind::kParams, result.dense), 0.05);
    // Reported at the largest scale: the layer with the smallest share at the cap.
    EXPECT_DOUBLE_EQ(*std::max_element(trial.sparsities.begin(), trial.sparsities.end()), 0.3);
  }
  EXPECT_FALSE(result.best.has_value());
}

TEST_F(BudgetSearchTest, AResidualModelIsSearchedThroughItsSkipConnection) {
  const torch::jit::Module resblock = resblock_model();
  const Dataset data = resblock_data();
  SearchOptions options = lenet_options(ResourceKind::kFlops, "0.6x", 3);
  options.latency.input_shape = {1, 3, 16, 16};
  const SearchResult result =
      run_budget_search(resblock, filter_registry(), options, {&data, nullptr});
  ASSERT_TRUE(result.best.has_value());
  const SearchTrial& best = result.trials[*result.best];
  EXPECT_LE(best.use.ratio(ResourceKind::kFlops, result.dense), 0.6);
  EXPECT_LT(best.use.params, result.dense.params);

  // With fine-tuning and BatchNorm re-estimation before scoring: the model a trial scored is
  // the one build_search_candidate rebuilds (what `lithe search` writes), and its statistics
  // are re-estimated (they differ from the model merely pruned).
  SearchOptions adapted = options;
  adapted.trials = 2;
  adapted.trial_epochs = 1;
  adapted.recalibrate_bn_batches = 2;
  adapted.train.batch_size = 16;
  adapted.train.progress = false;
  EXPECT_THAT([&] { (void)run_budget_search(resblock, filter_registry(), adapted, {&data, nullptr}); },
              ThrowsMessage<sdk::Error>(HasSubstr("need training data")));
  const SearchResult tuned =
      run_budget_search(resblock, filter_registry(), adapted, {&data, &data});
  for (const SearchTrial& trial : tuned.trials) {
    ASSERT_TRUE(trial.accuracy.has_value());
    torch::jit::Module rebuilt = build_search_candidate(resblock, filter_registry(), adapted,
                                                        tuned.layers, trial.sparsities,
                                                        {&data, &data});
    const std::unique_ptr<Model> model = make_torchscript_model(rebuilt);
    EXPECT_EQ(evaluate(*model, data).accuracy, *trial.accuracy) << trial.index;
    SearchOptions bare = adapted;
    bare.trial_epochs = 0;
    bare.recalibrate_bn_batches = 0;
    torch::jit::Module pruned = build_search_candidate(resblock, filter_registry(), bare,
                                                       tuned.layers, trial.sparsities, {});
    EXPECT_FALSE(rebuilt.attr("bn1").toModule().attr("running_mean").toTensor().equal(
        pruned.attr("bn1").toModule().attr("running_mean").toTensor()));
  }
}

// NetAdapt on a residual model: the layers whose outputs meet in an add are one candidate,
// pruned alike (one of them alone would remove nothing after speedup). Round 1 makes one
// candidate per unit, each the dense model with that unit alone pruned.
TEST_F(BudgetSearchTest, NetAdaptPrunesLayersCoupledByASkipConnectionAsOneCandidate) {
  const torch::jit::Module resblock = resblock_model();
  const Dataset data = resblock_data();
  SearchOptions options = lenet_options(ResourceKind::kFlops, "0.6x", 40);
  options.strategy = SearchStrategy::kNetAdapt;
  options.latency.input_shape = {1, 3, 16, 16};
  const SearchResult result =
      run_budget_search(resblock, filter_registry(), options, {&data, nullptr});
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < result.layers.size(); ++i) {
    index[result.layers[i]] = i;
  }
  std::vector<std::vector<size_t>> coupled;
  size_t units = result.layers.size();
  for (const std::vector<std::string>& set : analyze_dependencies(resblock).channel_sets) {
    if (set.size() > 1) {
      coupled.emplace_back();
      for (const std::string& name : set) {
        coupled.back().push_back(index.at(name));
      }
      units -= set.size() - 1;
    }
  }
  ASSERT_EQ(coupled.size(), 2U) << "the stem with block 1's conv2, block 2's conv2 with its "
                                   "shortcut convolution";
  ASSERT_GT(result.trials.size(), units);
  bool coupled_candidate_shrank = false;
  for (const SearchTrial& trial : result.trials) {
    if (trial.index == 0) {
      continue;
    }
    for (const std::vector<size_t>& set : coupled) {
      for (const size_t i : set) {
        EXPECT_EQ(trial.sparsities[i], trial.sparsities[set[0]]) << trial.index;
      }
      if (trial.index <= static_cast<int64_t>(units) && trial.sparsities[set[0]] > 0 &&
          trial.use.flops < result.dense.flops) {
        coupled_candidate_shrank = true;
      }
    }
    if (trial.index <= static_cast<int64_t>(units)) {  // round 1: one unit pruned, from dense
      std::set<double> pruned;
      size_t layers_pruned = 0;
      for (const double s : trial.sparsities) {
        if (s > 0) {
          pruned.insert(s);
          ++layers_pruned;
        }
      }
      EXPECT_EQ(pruned.size(), 1U) << trial.index;
      EXPECT_GE(layers_pruned, 1U) << trial.index;
    }
  }
  EXPECT_TRUE(coupled_candidate_shrank) << "a coupled set pruned alike removes its channels";
  ASSERT_TRUE(result.best.has_value());
  EXPECT_LE(result.trials[*result.best].use.ratio(ResourceKind::kFlops, result.dense), 0.6);
}

// NetAdapt: after the uniform trial 0, rounds of one candidate per layer, each the round's start
// with that layer alone pruned further to the round's target; the most accurate is the next
// round's start; the search ends at the first kept candidate within the budget. Resumed from a
// prefix it makes the same trials.
TEST_F(BudgetSearchTest, NetAdaptPrunesOneLayerFurtherPerCandidateAndKeepsTheBestOfEachRound) {
  SearchOptions options = lenet_options(ResourceKind::kFlops, "0.5x", 40);
  options.strategy = SearchStrategy::kNetAdapt;
  options.netadapt_step = 0.2;
  options.op_types = {"Conv2d", "Linear"};
  options.layers = {"conv1", "conv2", "fc1"};
  const SearchResult result =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  ASSERT_GE(result.trials.size(), 4U);
  EXPECT_EQ(result.trials[0].origin, "uniform");
  std::vector<double> start(3, 0.0);
  double start_ratio = 1.0;
  size_t at = 1;
  int rounds = 0;
  while (at < result.trials.size()) {
    ++rounds;
    const double target = std::max(0.5, start_ratio - 0.2);
    std::optional<size_t> kept;
    for (size_t layer = 0; layer < 3 && at < result.trials.size(); ++layer) {
      if (start[layer] >= options.max_sparsity) {
        continue;
      }
      const SearchTrial& t = result.trials[at];
      EXPECT_EQ(t.origin, "netadapt");
      EXPECT_TRUE(t.direction.empty());
      for (size_t other = 0; other < 3; ++other) {  // only this layer moved, and only up
        if (other == layer) {
          EXPECT_GT(t.sparsities[other], start[other]) << at;
        } else {
          EXPECT_EQ(t.sparsities[other], start[other]) << at;
        }
      }
      if (t.accuracy.has_value()) {
        EXPECT_LE(t.use.ratio(ResourceKind::kFlops, result.dense), target) << at;
      } else {
        EXPECT_EQ(t.sparsities[layer], options.max_sparsity);  // could not reach the target
      }
      if (t.accepted) {
        EXPECT_FALSE(kept.has_value()) << "one kept candidate per round";
        kept = at;
      }
      ++at;
    }
    ASSERT_TRUE(kept.has_value()) << "round " << rounds;
    for (size_t i = at - 1; i > 0 && result.trials[i].origin == "netadapt" && i >= *kept; --i) {
      if (result.trials[i].accuracy.has_value() && i != *kept) {
        EXPECT_LE(*result.trials[i].accuracy, *result.trials[*kept].accuracy);
      }
    }
    start = result.trials[*kept].sparsities;
    start_ratio = result.trials[*kept].use.ratio(ResourceKind::kFlops, result.dense);
    if (result.trials[*kept].feasible) {
      EXPECT_EQ(at, result.trials.size()) << "the search ends with the first fitting round";
    }
  }
  EXPECT_GE(rounds, 2);
  ASSERT_TRUE(result.best.has_value());
  EXPECT_LE(result.trials[*result.best].use.ratio(ResourceKind::kFlops, result.dense), 0.5);

  expect_resumes_identically(dense_, options, test_, result, 3);
  // A state of another strategy does not pass for NetAdapt's.
  SearchResult prefix = result;
  prefix.trials.resize(3);
  SearchOptions annealing = options;
  annealing.strategy = SearchStrategy::kAnnealing;
  EXPECT_THAT([&] {
    (void)run_budget_search(dense_, filter_registry(), annealing, {&test_, nullptr}, &prefix);
  }, ThrowsMessage<sdk::Error>(HasSubstr("trial 1 of the state file is a netadapt trial")));
}

// AMC: after the uniform trial 0, one DDPG episode per trial (random during the warm-up, then
// the agent's); reproducible at any thread count and when resumed, the agent relearning from
// the recorded trials.
TEST_F(BudgetSearchTest, AmcEpisodesAreReproducibleAtAnyThreadCountAndWhenResumed) {
  SearchOptions options = lenet_options(ResourceKind::kFlops, "0.5x", 7);
  options.strategy = SearchStrategy::kAmc;
  options.amc_warmup = 2;
  options.op_types = {"Conv2d", "Linear"};
  options.layers = {"conv1", "conv2", "fc1"};
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  const SearchResult result =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  at::set_num_threads(1);
  const SearchResult one_thread =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  at::set_num_threads(threads);
  ASSERT_EQ(result.trials.size(), 7U);
  EXPECT_EQ(result.trials[0].origin, "uniform");
  std::set<std::vector<double>> directions;
  for (size_t i = 1; i < result.trials.size(); ++i) {
    const SearchTrial& t = result.trials[i];
    EXPECT_EQ(t.origin, "amc");
    EXPECT_EQ(t.direction.size(), 3U);
    directions.insert(t.direction);
    if (t.feasible) {
      EXPECT_LE(t.use.ratio(ResourceKind::kFlops, result.dense), 0.5);
    }
  }
  EXPECT_EQ(directions.size(), 6U) << "every episode proposes its own allocation";
  expect_same_trials(result, one_thread);
  // Resumed after the warm-up and one learning episode: the agent relearns from the record and
  // proposes the same episodes.
  expect_resumes_identically(dense_, options, test_, result, 4);
  // The agent's episodes depend on what it learnt: another trial 3 changes trial 4 onwards.
  SearchResult altered = result;
  altered.trials.resize(4);
  *altered.trials[3].accuracy += 0.5;
  const SearchResult diverted =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr}, &altered);
  EXPECT_NE(diverted.trials[4].direction, result.trials[4].direction);
}

// A start direction (what each layer tolerates in a sensitivity table) is trial 1, normalised;
// NetAdapt refuses one.
TEST_F(BudgetSearchTest, AStartDirectionIsTrialOne) {
  SearchOptions options = lenet_options(ResourceKind::kFlops, "0.5x", 3);
  options.start_direction = {0.2, 0.8};
  const SearchResult result =
      run_budget_search(dense_, filter_registry(), options, {&test_, nullptr});
  ASSERT_EQ(result.trials.size(), 3U);
  EXPECT_EQ(result.trials[1].origin, "sensitivity");
  EXPECT_EQ(result.trials[1].direction, (std::vector<double>{0.25, 1.0}));
  EXPECT_LT(result.trials[1].sparsities[0], result.trials[1].sparsities[1]);
  EXPECT_EQ(result.trials[2].origin, "annealing");
  options.start_direction = {0.2, 0.8, 0.5};
  EXPECT_THAT([&] { (void)run_budget_search(dense_, filter_registry(), options, {&test_, nullptr}); },
              ThrowsMessage<sdk::Error>(HasSubstr("the start direction has 3 shares for 2 "
                                                  "searched layers")));
  options.start_direction = {0.2, 0.8};
  options.strategy = SearchStrategy::kNetAdapt;
  EXPECT_THAT([&] { check_search_options(options); },
              ThrowsMessage<sdk::Error>(HasSubstr("is for the random and annealing strategies, not netadapt")));
}

TEST_F(BudgetSearchTest, BadLayersAndOptionsAreNamed) {
  SearchOptions options = lenet_options(ResourceKind::kFlops, "0.5x", 2);
  options.layers = {"conv2", "nope"};
  EXPECT_THAT([&] { (void)searched_layers(dense_, options); },
              ThrowsMessage<sdk::Error>(HasSubstr("--layers: the model has no module 'nope'")));
  options.layers = {"fc1"};
  EXPECT_THAT([&] { (void)searched_layers(dense_, options); },
              ThrowsMessage<sdk::Error>(HasSubstr("module 'fc1' is a Linear, not one of")));
  options.layers = {"conv2", "conv1"};
  EXPECT_EQ(searched_layers(dense_, options),
            (std::vector<std::string>{"conv1", "conv2"}));  // the model's order
  options.trials = 0;
  EXPECT_THAT([&] { check_search_options(options); },
              ThrowsMessage<sdk::Error>(HasSubstr("--trials must be in [1, 100000], got 0")));
  options.trials = 2;
  options.max_sparsity = 1;
  EXPECT_THAT([&] { check_search_options(options); },
              ThrowsMessage<sdk::Error>(HasSubstr("--max-sparsity must be in (0, 1)")));
  options.max_sparsity = 0.9;
  options.latency.input_shape = {1, 0, 28};
  EXPECT_THAT([&] { check_search_options(options); },
              ThrowsMessage<sdk::Error>(HasSubstr("every --input-shape size must be >= 1, got 0")));
}

TEST(ResourceBudgetTest, SharesAndAbsoluteValuesParse) {
  ResourceBudget b = parse_resource_budget(ResourceKind::kFlops, "0.5x", "--flops-budget");
  EXPECT_TRUE(b.relative);
  EXPECT_EQ(b.value, 0.5);
  EXPECT_EQ(b.describe(), "flops 0.5x");
  b = parse_resource_budget(ResourceKind::kParams, "2.5e4", "--params-budget");
  EXPECT_FALSE(b.relative);
  EXPECT_EQ(b.value, 25000);
  b = parse_resource_budget(ResourceKind::kLatency, "3.2ms", "--latency-budget");
  EXPECT_FALSE(b.relative);
  EXPECT_EQ(b.describe(), "latency 3.2ms");
  const auto error = [](ResourceKind kind, const std::string& text) {
    try {
      (void)parse_resource_budget(kind, text, "--x");
    } catch (const sdk::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error(ResourceKind::kFlops, "1.5x"), HasSubstr("--x: a share of the dense model "
                                                             "must be in (0, 1], got '1.5x'"));
  EXPECT_THAT(error(ResourceKind::kFlops, "0x"), HasSubstr("must be in (0, 1]"));
  EXPECT_THAT(error(ResourceKind::kFlops, "halfx"), HasSubstr("'halfx' is not a share"));
  EXPECT_THAT(error(ResourceKind::kFlops, "-5"), HasSubstr("the budget must be > 0, got '-5'"));
  EXPECT_THAT(error(ResourceKind::kFlops, "nan"), HasSubstr("'nan' is not a budget"));
  EXPECT_THAT(error(ResourceKind::kLatency, "3"), HasSubstr("milliseconds (0.5x or 3.2ms), got '3'"));
  EXPECT_THAT(error(ResourceKind::kLatency, " 3ms"), HasSubstr("' 3ms' is not a budget"));
}

TEST(ParetoFrontTest, KeepsTheTrialsNothingBeatsOnBothAccuracyAndUse) {
  SearchResult result;
  result.dense.flops = 100;
  const auto add = [&](int64_t flops, std::optional<double> accuracy) {
    SearchTrial t;
    t.index = static_cast<int64_t>(result.trials.size());
    t.use.flops = flops;
    t.accuracy = accuracy;
    t.feasible = accuracy.has_value();
    result.trials.push_back(t);
  };
  add(50, 0.80);  // 0: front
  add(40, 0.70);  // 1: front (cheapest)
  add(45, 0.69);  // 2: beaten by 1
  add(60, 0.85);  // 3: front
  add(60, 0.84);  // 4: beaten by 3
  add(30, std::nullopt);  // 5: not evaluated
  add(55, 0.80);  // 6: beaten by 0
  EXPECT_EQ(pareto_front(result, ResourceKind::kFlops), (std::vector<int64_t>{1, 0, 3}));
}

}  // namespace
}  // namespace lithe::host
