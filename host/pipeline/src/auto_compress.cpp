#include "lithe/host/pipeline/auto_compress.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lithe/host/model/model.h"
#include "lithe/host/model/trainable_clone.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/speedup/speedup.h"
#include "lithe/host/train/batchnorm_recalibration.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

std::string round_name(int64_t round, int64_t rounds) {
  return "auto_compress round " + std::to_string(round) + " of " + std::to_string(rounds);
}

// Times a candidate against the dense model in this process (the search's own probe is
// relative to the model each round starts from, which moves).
LatencyProbe in_process_probe(const torch::jit::Module& dense, const SearchOptions& options) {
  torch::jit::Module reference = dense.clone();
  reference.eval();
  return [reference, &options](const torch::jit::Module& candidate) mutable {
    torch::jit::Module handle = candidate;  // measure_resources switches it to eval mode
    const ResourceUse use =
        measure_resources(handle, reference, options.flops_mode, options.latency, true);
    return std::pair{use.dense_latency_ms, use.latency_ms};
  };
}

// FLOPs and parameters against `dense`, latency timed against it by `probe`.
ResourceUse measured(const torch::jit::Module& model, torch::jit::Module& dense,
                     const SearchOptions& options, const LatencyProbe& probe) {
  torch::jit::Module handle = model;
  return measure_resources(handle, dense, options.flops_mode, options.latency, true, probe);
}

// The round's pruner (ADMM) from `start` toward `sparsities`, its masks applied, then sped up;
// in eval mode.
torch::jit::Module admm_round(const torch::jit::Module& start, const PluginRegistry& registry,
                              const AutoCompressOptions& options,
                              const std::vector<std::string>& layers,
                              const std::vector<double>& sparsities, const SearchData& data,
                              int64_t round) {
  const std::string where = round_name(round, options.rounds);
  torch::jit::Module copy = trainable_clone(start);
  const std::unique_ptr<Model> model = make_torchscript_model(copy);
  PruningSession session(
      *model, registry,
      make_compression_config(
          options.round_algorithm, search_config_list(layers, sparsities).dump(),
          options.round_options_json, "<" + where + ">"));
  int64_t fine_tunes = 0;
  session.set_fine_tuner([&](int64_t epochs) {
    TrainOptions tune = options.search.train;
    tune.epochs = epochs;
    tune.progress = false;
    // Each training of the round's pruner, in each round, shuffles with its own seed.
    tune.seed = options.search.train.seed + 1000003ULL * static_cast<uint64_t>(++fine_tunes) +
                7919ULL * static_cast<uint64_t>(round);
    (void)train(*model, *data.train, nullptr, tune, &session);
  });
  session.compress();
  const at::Tensor input = at::zeros(options.search.latency.input_shape);
  SpeedupResult sped = speedup_model(copy, session.masks(), input, where + "'s ADMM masks");
  torch::jit::Module out = *sped.module;
  if (options.search.recalibrate_bn_batches > 0) {
    // ADMM's last step masks the trained weights in one shot: the BatchNorm statistics are
    // still the unmasked model's, and the next round's search scores from this model.
    const std::unique_ptr<Model> sped_model = make_torchscript_model(out);
    (void)recalibrate_batchnorm(*sped_model, *data.train, options.search.recalibrate_bn_batches,
                                options.search.train.batch_size);
  }
  out.eval();
  return out;
}

}  // namespace

void check_auto_compress_options(const AutoCompressOptions& options) {
  LITHE_CHECK(options.rounds >= 1, sdk::Errc::kInvalidConfig, "--rounds must be >= 1, got ",
              options.rounds);
  LITHE_CHECK(options.search.alternatives.empty(), sdk::Errc::kInvalidConfig,
              "auto_compress searches with one pruner, got ",
              search_algorithms_text(options.search));
  LITHE_CHECK(!options.round_algorithm.empty(), sdk::Errc::kInvalidConfig,
              "auto_compress needs --round-algorithm: the pruner each round trains toward the "
              "searched sparsities with (NNI's AutoCompress: admm, with --round-options "
              "{\"base_algo\": ...} the search's pruner)");
  LITHE_CHECK(nlohmann::json::parse(options.round_options_json, nullptr, false).is_object(),
              sdk::Errc::kInvalidConfig, "--round-options must be a JSON object, got '",
              options.round_options_json, "'");
  check_search_options(options.search);
}

ResourceBudget auto_compress_round_budget(const ResourceBudget& overall, const ResourceUse& dense,
                                          int64_t round, int64_t rounds) {
  const double whole = dense.of(overall.kind);
  const double share =
      overall.relative ? overall.value : overall.value / std::max(whole, 1e-300);
  const double round_share =
      std::pow(share, static_cast<double>(round) / static_cast<double>(rounds));
  ResourceBudget budget = overall;
  if (overall.kind == ResourceKind::kLatency) {
    // Timed against the dense model in every round: a share of it stays one.
    budget.value = overall.relative ? round_share : round_share * whole;
  } else {
    budget.relative = false;
    budget.value = std::floor(round_share * whole);
  }
  return budget;
}

AutoCompressResult run_auto_compress(const torch::jit::Module& dense,
                                     const PluginRegistry& registry,
                                     const AutoCompressOptions& options, const SearchData& data,
                                     const AutoCompressResume* resumed,
                                     const AutoCompressProgress& on_progress) {
  check_auto_compress_options(options);
  LITHE_CHECK(data.test != nullptr && data.test->size() > 0, sdk::Errc::kInvalidConfig,
              "auto_compress needs test data to evaluate its trials");
  LITHE_CHECK(data.train != nullptr && data.train->size() > 0, sdk::Errc::kInvalidConfig,
              "auto_compress trains every round: give training data");
  const auto probe = options.search.latency_probe
                         ? options.search.latency_probe
                         : in_process_probe(dense, options.search);
  torch::jit::Module reference = dense.clone();
  reference.eval();

  AutoCompressResult result;
  if (resumed != nullptr) {  // the dense measurements as recorded: the rounds' budgets follow
    LITHE_CHECK(resumed->rounds.empty() || resumed->model.has_value(),
                sdk::Errc::kInvalidConfig, "resuming auto_compress after ",
                resumed->rounds.size(), " rounds needs the model they left");
    LITHE_CHECK(static_cast<int64_t>(resumed->rounds.size()) <= options.rounds,
                sdk::Errc::kInvalidConfig, "the resumed auto_compress ran ",
                resumed->rounds.size(), " rounds; --rounds is ", options.rounds);
    result.dense = resumed->dense;
    result.dense_accuracy = resumed->dense_accuracy;
    result.rounds = resumed->rounds;
    for (size_t i = 0; i < result.rounds.size(); ++i) {  // not kept in the state file
      result.rounds[i].budget = auto_compress_round_budget(
          options.search.budget, result.dense, static_cast<int64_t>(i) + 1, options.rounds);
    }
    // `lithe search --epochs` trains the result.
    result.model = trainable_clone(result.rounds.empty() ? dense : *resumed->model);
    result.model.eval();
  } else {
    result.model = trainable_clone(dense);
    result.model.eval();
    result.dense = measured(result.model, reference, options.search, probe);
    const std::unique_ptr<Model> model = make_torchscript_model(result.model);
    result.dense_accuracy =
        evaluate(*model, *data.test, options.search.train.eval_batch_size).accuracy;
  }

  {  // the round pruner's options are checked (by the plugin) before the first round searches
    torch::jit::Module copy = result.model.clone();
    const std::unique_ptr<Model> model = make_torchscript_model(copy);
    const std::vector<std::string> layers = searched_layers(copy, options.search);
    try {
      const PruningSession check(
          *model, registry,
          make_compression_config(
              options.round_algorithm,
              search_config_list(layers, std::vector<double>(layers.size(), 0.5)).dump(),
              options.round_options_json, "<--round-options>"));
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), std::string("--round-algorithm, --round-options: ") + e.what());
    }
  }
  for (int64_t round = static_cast<int64_t>(result.rounds.size()) + 1; round <= options.rounds;
       ++round) {
    const std::string where = round_name(round, options.rounds);
    try {
      SearchOptions search = options.search;
      search.budget = auto_compress_round_budget(options.search.budget, result.dense, round,
                                                 options.rounds);
      search.seed = options.search.seed + static_cast<uint64_t>(round);
      search.latency_probe = probe;
      const SearchResult* in_flight =
          resumed != nullptr && resumed->in_flight &&
                  static_cast<int64_t>(resumed->rounds.size()) + 1 == round
              ? &*resumed->in_flight
              : nullptr;
      SearchResult found = run_budget_search(
          result.model, registry, search, data, in_flight,
          [&](const SearchResult& so_far) {
            if (on_progress) {
              on_progress(result, &so_far);
            }
          });
      LITHE_CHECK(found.best.has_value(), sdk::Errc::kInvalidConfig, "no trial of ",
                  found.trials.size(), " fits the round's budget ", search.budget.describe(),
                  " (more --trials, a larger --max-sparsity or fewer --rounds)");
      AutoCompressRound done;
      done.budget = search.budget;
      done.sparsities = found.trials[*found.best].sparsities;
      torch::jit::Module next =
          admm_round(result.model, registry, options, found.layers, done.sparsities, data, round);
      done.use = measured(next, reference, options.search, probe);
      const std::unique_ptr<Model> model = make_torchscript_model(next);
      done.accuracy =
          evaluate(*model, *data.test, options.search.train.eval_batch_size).accuracy;
      done.search = std::move(found);
      result.rounds.push_back(std::move(done));
      result.model = next;
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), where + ": " + e.what());
    }
    if (on_progress) {
      on_progress(result, nullptr);
    }
  }
  return result;
}

}  // namespace lithe::host
