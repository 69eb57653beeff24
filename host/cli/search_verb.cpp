// `lithe search`: auto-compression to a measured budget. Per-layer sparsities for a registered
// pruner are searched so that the sped-up model fits a FLOPs, parameter or latency budget at the
// best accuracy; every trial is recorded in a state file (a restarted search continues from
// it), and the best model is written pruned and sped up (optionally quantized and converted to
// int8 as well), with an optional HTML report.
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "input_shape.h"
#include "comma_list.h"
#include "compress_report.h"
#include "latency_probe.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/model/model.h"
#include "lithe/host/pipeline/auto_compress_state.h"
#include "lithe/host/pipeline/budget_search.h"
#include "lithe/host/pipeline/search_report.h"
#include "lithe/host/pipeline/search_state.h"
#include "lithe/host/pipeline/sensitivity_allocation.h"
#include "lithe/host/pipeline/sensitivity_analysis.h"
#include "lithe/host/pipeline/svg_chart.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "search_auto_compress.h"
#include "search_quantization.h"
#include "training_options.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string duration(double seconds) {
  char text[32];
  if (seconds < 60) {
    std::snprintf(text, sizeof text, "%.0fs", seconds);
  } else if (seconds < 3600) {
    std::snprintf(text, sizeof text, "%.0fm%02.0fs", std::floor(seconds / 60),
                  std::fmod(seconds, 60));
  } else {
    std::snprintf(text, sizeof text, "%.0fh%02.0fm", std::floor(seconds / 3600),
                  std::fmod(seconds / 60, 60));
  }
  return text;
}

json use_json(const host::ResourceUse& use, const host::ResourceUse& dense) {
  return {{"flops", use.flops},
          {"params", use.params},
          {"latency_ms", use.latency_ms},
          {"flops_ratio", use.ratio(host::ResourceKind::kFlops, dense)},
          {"params_ratio", use.ratio(host::ResourceKind::kParams, dense)},
          {"latency_ratio", use.ratio(host::ResourceKind::kLatency, dense)}};
}

// AutoCompress's rounds for --json: budget, trials, sparsities by layer, use, accuracy.
json auto_compress_rounds_json(const host::AutoCompressResult& result) {
  json rounds = json::array();
  for (const host::AutoCompressRound& r : result.rounds) {
    json sparsities = json::object();
    for (size_t i = 0; i < r.search.layers.size(); ++i) {
      sparsities[r.search.layers[i]] = r.sparsities[i];
    }
    rounds.push_back({{"budget", r.budget.describe()},
                      {"trials", r.search.trials.size()},
                      {"sparsities", sparsities},
                      {"use", use_json(r.use, result.dense)},
                      {"accuracy", r.accuracy}});
  }
  return rounds;
}


}  // namespace

int run_search(const std::vector<std::string>& args) {
  std::string model_path;
  std::string output_path;
  std::string state_path;
  std::string report_path;
  std::string data = host::kDefaultDataDir;
  std::string test_path;
  std::string teacher_path;
  std::string flops_budget;
  std::string params_budget;
  std::string latency_budget;
  std::string strategy = "annealing";
  std::string op_types = "Conv2d";
  std::string layers;
  std::string input_shape;
  std::string flops_mode = "default";
  std::string sensitivity_path;
  double sensitivity_threshold = 0.05;
  double metric_floor = 0;
  int64_t eval_samples = 0;
  int64_t epochs = 0;
  bool json_out = false;
  bool latency_in_process = false;
  bool no_fill = false;
  host::AutoCompressOptions auto_compress;
  host::SearchOptions& options = auto_compress.search;
  SearchQuantization quantization;
  CommonOptions common;
  po::variables_map given;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model")
      ("algorithm", po::value(&options.algorithm)->required(),
       "a registered pruner whose masks come from the weights (e.g. l1_filter, fpgm), or "
       "several, comma-separated, that random and annealing trials choose from")
      ("options", po::value(&options.algorithm_options_json)->default_value("{}"),
       "the pruner's \"options\" object, JSON")
      ("output", po::value(&output_path)->required(),
       "write the best model here, pruned and sped up (TorchScript)")
      ("flops-budget", po::value(&flops_budget),
       "the sped-up model's FLOPs: a share of the dense model's (0.5x) or a count (2.5e6)")
      ("params-budget", po::value(&params_budget),
       "its parameters: a share (0.5x) or a count")
      ("latency-budget", po::value(&latency_budget),
       "its measured latency: a share of the dense model's, timed alternately with it (0.5x), "
       "or milliseconds (3.2ms)")
      ("metric-floor", po::value(&metric_floor),
       "fail (no model written) when the best model's test accuracy is below this")
      ("strategy", po::value(&strategy)->default_value(strategy),
       "random: every trial's per-layer shares drawn afresh; annealing: a perturbation of the "
       "current shares kept by Metropolis' rule; netadapt: rounds lowering the resource by "
       "--netadapt-step, one candidate per layer, the most accurate kept; amc: a DDPG agent "
       "proposes each layer's preserve ratio and learns from every trial (trial 0 is always "
       "uniform); auto_compress: --rounds rounds of an annealing search, training toward its "
       "best sparsities (--round-algorithm) and speedup (NNI's AutoCompressPruner)")
      ("rounds", po::value(&auto_compress.rounds)->default_value(auto_compress.rounds),
       "auto_compress: rounds, each removing the same share of what is left of the budget's "
       "resource; --trials is per round")
      ("round-algorithm", po::value(&auto_compress.round_algorithm),
       "auto_compress: the pruner each round trains toward the searched sparsities with "
       "(NNI's: admm)")
      ("round-options",
       po::value(&auto_compress.round_options_json)->default_value("{}"),
       "auto_compress: its options, JSON (admm: base_algo as --algorithm, num_iterations, "
       "training_epochs, row); it trains with the training options")
      ("amc-warmup", po::value(&options.amc_warmup)->default_value(options.amc_warmup),
       "amc: episodes of random actions before the agent acts")
      ("amc-noise", po::value(&options.amc_noise)->default_value(options.amc_noise),
       "amc: spread of the Gaussian noise added to the agent's actions")
      ("amc-noise-decay",
       po::value(&options.amc_noise_decay)->default_value(options.amc_noise_decay),
       "amc: the noise's spread is multiplied by this after each episode")
      ("sensitivity", po::value(&sensitivity_path),
       "random, annealing: trial 1 prunes each layer in proportion to the largest sparsity it "
       "tolerates in this sensitivity table (lithe sensitivity --csv, NNI's layout)")
      ("sensitivity-threshold",
       po::value(&sensitivity_threshold)->default_value(sensitivity_threshold),
       "with --sensitivity: the accuracy drop from the dense model a layer may cost")
      ("netadapt-step", po::value(&options.netadapt_step)->default_value(options.netadapt_step),
       "netadapt: how much each round lowers the resource, as a share of the dense model's")
      ("trials", po::value(&options.trials)->default_value(options.trials),
       "trials in all, trial 0 included (a resumed search may be given more); netadapt: at "
       "most this many")
      ("state", po::value(&state_path),
       "the state file, rewritten after every trial; a search started again with the same "
       "options continues from it (default: OUTPUT.search-state.json)")
      ("report", po::value(&report_path),
       "write an HTML report here: accuracy against FLOPs and latency, Pareto front, trials")
      ("op-types", po::value(&op_types)->default_value(op_types),
       "comma-separated module types searched")
      ("layers", po::value(&layers), "comma-separated layer names (default: every one)")
      ("max-sparsity", po::value(&options.max_sparsity)->default_value(options.max_sparsity),
       "no layer beyond it")
      ("perturbation", po::value(&options.perturbation)->default_value(options.perturbation),
       "sigma of the log-normal change of each layer's share")
      ("start-temperature",
       po::value(&options.start_temperature)->default_value(options.start_temperature),
       "annealing: a trial worse by d is kept with probability exp(-d/T), T starting here")
      ("cool-down-rate",
       po::value(&options.cool_down_rate)->default_value(options.cool_down_rate),
       "annealing: T is multiplied by this after each trial")
      ("bisection-steps",
       po::value(&options.bisection_steps)->default_value(options.bisection_steps),
       "measurements of the overall scale per trial")
      ("no-fill", po::bool_switch(&no_fill),
       "random, annealing and amc trials under a FLOPs or parameter budget: do not give "
       "pruned channels back, one at a time, while the model still fits")
      ("input-shape", po::value(&input_shape),
       "input of the FLOPs count, the speedup and the timing, batch first (default: one "
       "sample of the data, e.g. 1,1,28,28)")
      ("flops-mode", po::value(&flops_mode)->default_value(flops_mode),
       "default (Conv and Linear, NNI), full, or ops (every op of the forward)")
      ("latency-runs", po::value(&options.latency.runs)->default_value(options.latency.runs),
       "timed rounds per latency measurement (median)")
      ("latency-warmup",
       po::value(&options.latency.warmup)->default_value(options.latency.warmup),
       "untimed forwards before each latency measurement")
      ("latency-in-process", po::bool_switch(&latency_in_process),
       "time candidates in this process instead of a fresh `lithe latency` process each "
       "(faster; the search's own heap favours smaller models)")
      ("eval-samples", po::value(&eval_samples)->default_value(0),
       "evaluate trials on the first N test samples only (0: all); the best model is "
       "evaluated on all")
      ("trial-epochs", po::value(&options.trial_epochs)->default_value(0),
       "fine-tune every trial's model this many epochs before evaluating it (0: none)")
      ("recalibrate-bn", po::value(&options.recalibrate_bn_batches)->default_value(0),
       "then re-estimate every BatchNorm layer's statistics on N training batches (0: none); "
       "BatchNorm networks pruned in one shot score far below what they recover")
      ("epochs", po::value(&epochs)->default_value(0),
       "fine-tune the best model this many epochs before writing it (0: none)")
      ("json", po::bool_switch(&json_out), "print the result as JSON");
  add_search_quantization_options(desc, quantization);
  add_training_options(desc, options.train, data, test_path, teacher_path);
  add_common_options(desc, common);
  if (!parse_verb_args("search",
                       "--model M.pt --algorithm l1_filter --flops-budget 0.5x --output BEST.pt "
                       "[--trials 16] [--strategy annealing] [--report OUT.html] [--state FILE]",
                       args, desc, nullptr, &given)) {
    return 0;
  }
  // Every argument is checked before the model or the data is read.
  int budgets = 0;
  for (const auto& [text, kind, option] :
       {std::tuple{&flops_budget, host::ResourceKind::kFlops, "--flops-budget"},
        std::tuple{&params_budget, host::ResourceKind::kParams, "--params-budget"},
        std::tuple{&latency_budget, host::ResourceKind::kLatency, "--latency-budget"}}) {
    if (given.count(option + 2) != 0) {
      ++budgets;
      options.budget = host::parse_resource_budget(kind, *text, option);
    }
  }
  LITHE_CHECK(budgets == 1, sdk::Errc::kInvalidConfig,
              "give exactly one of --flops-budget, --params-budget and --latency-budget, got ",
              budgets);
  const bool auto_compressing = strategy == "auto_compress";
  try {  // auto_compress is the CLI's: rounds of the pipeline's annealing search
    options.strategy = auto_compressing ? host::SearchStrategy::kAnnealing
                              : host::parse_search_strategy(strategy, "--strategy");
  } catch (const sdk::Error&) {
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     "--strategy: the strategy must be random, annealing, netadapt, amc or "
                     "auto_compress, got '" + strategy + "'");
  }
  for (const char* option : {"rounds", "round-algorithm", "round-options"}) {
    LITHE_CHECK(auto_compressing || given.count(option) == 0 || given[option].defaulted(),
                sdk::Errc::kInvalidConfig, "--", option,
                " is for --strategy auto_compress, not ", strategy);
  }
  {
    const std::vector<std::string> pruners = split_commas(options.algorithm);
    LITHE_CHECK(!pruners.empty(), sdk::Errc::kInvalidConfig, "--algorithm: no pruner in '",
                options.algorithm, "'");
    options.algorithm = pruners.front();
    options.alternatives.assign(pruners.begin() + 1, pruners.end());
  }
  const std::string algorithms = host::search_algorithms_text(options);
  options.op_types = split_commas(op_types);
  LITHE_CHECK(!options.op_types.empty(), sdk::Errc::kInvalidConfig,
              "--op-types: no module type in '", op_types, "'");
  options.layers = split_commas(layers);
  options.flops_mode = host::parse_flops_mode(flops_mode, "--flops-mode");
  if (!input_shape.empty()) {
    options.latency.input_shape = parse_input_shape(input_shape);
  }
  LITHE_CHECK(eval_samples >= 0, sdk::Errc::kInvalidConfig, "--eval-samples must be >= 0, got ",
              eval_samples);
  LITHE_CHECK(epochs >= 0, sdk::Errc::kInvalidConfig, "--epochs must be >= 0, got ", epochs);
  const bool floor_given = given.count("metric-floor") != 0;
  LITHE_CHECK(!floor_given || (std::isfinite(metric_floor) && metric_floor >= 0 &&
                               metric_floor <= 1),
              sdk::Errc::kInvalidConfig, "--metric-floor is a top-1 accuracy in [0, 1], got ",
              metric_floor);
  LITHE_CHECK(!nlohmann::json::parse(options.algorithm_options_json, nullptr, false)
                   .is_discarded(),
              sdk::Errc::kInvalidConfig, "--options is not valid JSON: '",
              options.algorithm_options_json, "'");
  const bool trains = auto_compressing || options.trial_epochs > 0 || epochs > 0 ||
                      options.recalibrate_bn_batches > 0;
  const std::vector<host::NamedPath> quantized_outputs =
      check_search_quantization(quantization, given, output_path);
  for (const std::string& name : training_option_names()) {
    if (name == "data" || name == "test-data" || name == "seed") {
      continue;  // the data is evaluated on, and the seed drives the search
    }
    LITHE_CHECK(trains || quantization.epochs > 0 || given.count(name) == 0 ||
                    given[name].defaulted(),
                sdk::Errc::kInvalidConfig, "--", name,
                " has no effect without --trial-epochs, --recalibrate-bn, --epochs or "
                "--quantize-epochs");
  }
  if (epochs > 0) {
    host::TrainOptions final_tune = options.train;
    final_tune.epochs = epochs;
    host::validate_train_options(final_tune);
  }
  if (state_path.empty()) {
    state_path = output_path + ".search-state.json";
  }
  {
    host::SearchOptions shape_free = options;  // the data decides the default input shape
    if (shape_free.latency.input_shape.empty()) {
      shape_free.latency.input_shape = {1};
    }
    host::check_search_options(shape_free);
    if (auto_compressing) {
      host::AutoCompressOptions checked = auto_compress;
      checked.search = shape_free;
      host::check_auto_compress_options(checked);
    }
  }
  LITHE_CHECK(std::isfinite(sensitivity_threshold) && sensitivity_threshold >= 0,
              sdk::Errc::kInvalidConfig, "--sensitivity-threshold must be >= 0, got ",
              sensitivity_threshold);
  LITHE_CHECK(!sensitivity_path.empty() || given["sensitivity-threshold"].defaulted(),
              sdk::Errc::kInvalidConfig,
              "--sensitivity-threshold has no effect without --sensitivity");
  LITHE_CHECK(sensitivity_path.empty() ||
                  (!auto_compressing && (options.strategy == host::SearchStrategy::kRandom ||
                               options.strategy == host::SearchStrategy::kAnnealing)),
              sdk::Errc::kInvalidConfig, "--sensitivity is for --strategy random or annealing, "
              "not ", strategy);
  std::vector<host::NamedPath> outputs = {
      {"--output", output_path}, {"--state", state_path}, {"--report", report_path}};
  outputs.insert(outputs.end(), quantized_outputs.begin(), quantized_outputs.end());
  if (auto_compressing) {
    const std::vector<host::NamedPath> models =
        auto_compress_round_outputs(state_path, auto_compress.rounds);
    outputs.insert(outputs.end(), models.begin(), models.end());
  }
  host::check_output_paths({{"--model", model_path},
                            {"--sensitivity", sensitivity_path},
                            {"--data", data},
                            {"--test-data", test_path},
                            {"--teacher", teacher_path},
                            {"--quantize", quantization.config_path}},
                           outputs);
  host::StagedFile output(output_path, "--output");  // checks the directories before any work
  std::optional<host::StagedFile> report;
  if (!report_path.empty()) {
    report.emplace(report_path, "--report");
  }
  { host::StagedFile state_check(state_path, "--state"); }
  for (const host::NamedPath& named : quantized_outputs) {
    if (!named.path.empty()) {
      host::StagedFile check(named.path, named.role);
    }
  }

  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader);
  check_search_quantizer(quantization, registry);
  const torch::jit::Module dense = host::load_torchscript_module(model_path);
  const std::unique_ptr<host::Model> dense_model = host::make_torchscript_model(dense);
  const std::unique_ptr<host::Model> teacher = load_teacher(teacher_path, given, options.train);
  host::Dataset test = host::load_test_dataset(data, test_path);
  LITHE_CHECK(test.size() > 0, sdk::Errc::kInvalidConfig, "--data '", data,
              "' is a file: give the data to evaluate on with --test-data (or a directory with "
              "a test split)");
  host::check_dataset_fits_model(*dense_model, test);
  host::Dataset train_data;
  if (trains) {
    train_data = host::load_dataset(data, "train");
    host::check_dataset_fits_model(*dense_model, train_data);
  }
  const host::Dataset trial_test =
      host::first_samples(test, eval_samples > 0 ? eval_samples : -1);
  if (options.latency.input_shape.empty()) {
    options.latency.input_shape = test.images.sizes().vec();
    options.latency.input_shape[0] = 1;
  }
  options.seed = options.train.seed;
  if (!sensitivity_path.empty()) {
    // Each searched layer's share: the largest sparsity it tolerates within the threshold of
    // the dense model's accuracy on the trials' data (the table does not hold the dense one).
    const host::SensitivityResult table =
        host::read_sensitivity_csv(host::read_file(sensitivity_path), sensitivity_path);
    const double dense_accuracy =
        host::evaluate(*dense_model, trial_test, options.train.eval_batch_size).accuracy;
    double largest = 0;
    std::string tolerated;
    for (const std::string& layer : host::searched_layers(dense, options)) {
      const auto row = std::find_if(table.rows.begin(), table.rows.end(),
                                    [&](const host::SensitivityRow& r) { return r.layer == layer; });
      LITHE_CHECK(row != table.rows.end(), sdk::Errc::kInvalidConfig, sensitivity_path,
                  ": no row for the searched layer '", layer,
                  "' (analyse the same layers: --op-types, --layers)");
      const double t = host::tolerated_sparsity(*row, dense_accuracy, sensitivity_threshold);
      largest = std::max(largest, t);
      options.start_direction.push_back(std::max(t, 1e-6));
      tolerated += (tolerated.empty() ? "" : ", ") + layer + " " + host::shortest_decimal(t);
    }
    LITHE_CHECK(largest > 0, sdk::Errc::kInvalidConfig, sensitivity_path,
                ": no searched layer keeps the accuracy within --sensitivity-threshold ",
                sensitivity_threshold, " of the dense model's ", dense_accuracy,
                " at any sparsity of the table");
    std::fprintf(stderr, "search: tolerated within %g of %.4f: %s\n", sensitivity_threshold,
                 dense_accuracy, tolerated.c_str());
  }
  options.fill_budget = !no_fill;
  if (!latency_in_process) {
    options.latency_probe = fresh_process_latency_probe(
        model_path, options.latency.input_shape, options.latency.runs, options.latency.warmup,
        at::get_num_threads());
  }
  const host::SearchData search_data{&trial_test, trains ? &train_data : nullptr};

  std::string data_description = (test_path.empty() ? data : test_path) + " (" +
                                 std::to_string(trial_test.size()) + " test samples)";
  if (trains) {
    data_description += ", trained on " + data + " (" + std::to_string(train_data.size()) + ")";
  }
  if (!teacher_path.empty()) {
    data_description += ", teacher " + host::content_digest(host::read_file(teacher_path));
  }
  const std::string model_digest = host::content_digest(host::read_file(model_path));

  // The chosen model: the final fine-tune, the floor, the staged output, the quantization
  // (from the staged file: a failing quantization leaves every output untouched), the commit.
  std::optional<host::CompressionRequest> quantize_request;
  std::optional<host::CompressionResult> quantized;
  const auto finish = [&](torch::jit::Module chosen, const std::string& what) {
    const std::unique_ptr<host::Model> chosen_model = host::make_torchscript_model(chosen);
    if (epochs > 0) {
      host::TrainOptions tune = options.train;
      tune.epochs = epochs;
      (void)host::train(*chosen_model, train_data, nullptr, tune);
    }
    chosen_model->train(false);
    const host::EvalResult accuracy =
        host::evaluate(*chosen_model, test, options.train.eval_batch_size);
    LITHE_CHECK(!floor_given || accuracy.accuracy >= metric_floor, sdk::Errc::kInvalidConfig,
                what, " reaches accuracy ", accuracy.accuracy, " on ", accuracy.samples,
                " test samples, below --metric-floor ", metric_floor,
                "; no model written (try more --trials, --trial-epochs or --epochs, or a "
                "larger budget)");
    output.write(chosen_model->serialize());
    if (!quantization.config_path.empty()) {
      quantize_request = search_quantization_request(
          quantization, output.temp_path().string(), data, test_path, options.train);
      quantized = in_flags(search_quantization_flags(),
                           [&] { return host::run_compression(*quantize_request, registry); });
    }
    output.commit();
    return accuracy;
  };
  // The last lines of the text output: accuracy, what was written, the quantization.
  const auto print_summary = [&](const host::EvalResult& accuracy, double dense_accuracy) {
    std::printf("  accuracy %.4f on %lld test samples (dense %.4f on %lld)\n",
                accuracy.accuracy, static_cast<long long>(accuracy.samples), dense_accuracy,
                static_cast<long long>(trial_test.size()));
    std::printf("wrote %s\n", output_path.c_str());
    if (report) {
      std::printf("wrote %s\n", report_path.c_str());
    }
    if (quantized) {
      std::printf("\nthe best model quantized by %s:\n", quantization.config.algorithm.c_str());
      print_compress_result(*quantize_request, *quantized, "", false);
    }
  };

  if (auto_compressing) {
    const auto start = std::chrono::steady_clock::now();
    const host::AutoCompressResult result = run_search_auto_compress(
        dense, registry, auto_compress, search_data, state_path,
        host::auto_compress_fingerprint(auto_compress, model_digest, data_description));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (report) {
      report->write(host::auto_compress_html(result, {model_path, algorithms, options.budget,
                                                      strategy, seconds}));
      report->commit();
    }
    const host::EvalResult final_accuracy = finish(
        result.model, "the model of round " + std::to_string(result.rounds.size()));
    const host::AutoCompressRound& last = result.rounds.back();
    if (json_out) {
      json out;
      out["model"] = model_path;
      out["algorithm"] = algorithms;
      out["budget"] = options.budget.describe();
      out["strategy"] = strategy;
      out["dense"] = use_json(result.dense, result.dense);
      out["dense"]["accuracy"] = result.dense_accuracy;
      out["rounds"] = auto_compress_rounds_json(result);
      out["best"] = {{"round", result.rounds.size()},
                     {"use", use_json(last.use, result.dense)},
                     {"accuracy", final_accuracy.accuracy},
                     {"test_samples", final_accuracy.samples}};
      if (quantized) {
        out["quantized"] = compress_result_json(*quantize_request, *quantized);
      }
      out["output"] = output_path;
      out["state"] = state_path;
      out["seconds"] = seconds;
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("auto_compress: %zu rounds\n", result.rounds.size());
    for (size_t r = 0; r < result.rounds.size(); ++r) {
      const host::AutoCompressRound& round = result.rounds[r];
      std::printf("  round %zu (%s): FLOPs %.4fx, params %.4fx, latency %.4fx, accuracy %.4f\n",
                  r + 1, round.budget.describe().c_str(),
                  round.use.ratio(host::ResourceKind::kFlops, result.dense),
                  round.use.ratio(host::ResourceKind::kParams, result.dense),
                  round.use.ratio(host::ResourceKind::kLatency, result.dense), round.accuracy);
    }
    print_summary(final_accuracy, result.dense_accuracy);
    return 0;
  }
  const json fingerprint = host::search_fingerprint(options, model_digest, data_description);
  std::optional<host::SearchResult> resumed;
  std::error_code ec;
  if (fs::exists(state_path, ec)) {
    resumed = host::read_search_state(host::read_file(state_path), state_path, fingerprint);
    std::fprintf(stderr, "search: resuming from %s: %zu trials done\n", state_path.c_str(),
                 resumed->trials.size());
  }

  const auto start = std::chrono::steady_clock::now();
  const size_t resumed_trials = resumed ? resumed->trials.size() : 0;
  const host::ResourceKind kind = options.budget.kind;
  const auto on_progress = [&](const host::SearchResult& so_far) {
    host::write_file_atomic(state_path, host::search_state_json(so_far, fingerprint));
    if (so_far.trials.empty()) {
      std::fprintf(stderr,
                   "search: dense model %lld FLOPs, %lld parameters, %.3f ms, accuracy %.4f; "
                   "budget %s; %lld trials\n",
                   static_cast<long long>(so_far.dense.flops),
                   static_cast<long long>(so_far.dense.params), so_far.dense.latency_ms,
                   so_far.dense_accuracy, options.budget.describe().c_str(),
                   static_cast<long long>(options.trials));
      return;
    }
    if (so_far.trials.size() <= resumed_trials) {
      return;
    }
    const host::SearchTrial& t = so_far.trials.back();
    std::optional<size_t> best;  // the most accurate trial within the budget so far
    for (size_t i = 0; i < so_far.trials.size(); ++i) {
      const host::SearchTrial& c = so_far.trials[i];
      if (c.feasible && c.accuracy && (!best || *c.accuracy > *so_far.trials[*best].accuracy)) {
        best = i;
      }
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double done = static_cast<double>(so_far.trials.size() - resumed_trials);
    const double left = elapsed / done * (static_cast<double>(options.trials) -
                                          static_cast<double>(so_far.trials.size()));
    // FLOPs beside latency, or the budget's resource beside latency.
    const host::ResourceKind shown =
        kind == host::ResourceKind::kLatency ? host::ResourceKind::kFlops : kind;
    const std::string accuracy = t.accuracy ? std::to_string(*t.accuracy).substr(0, 6) : "-";
    const std::string best_text =
        best ? std::to_string(*so_far.trials[*best].accuracy).substr(0, 6) + " (trial " +
                   std::to_string(*best) + ")"
             : "none";
    std::fprintf(stderr,
                 "search: [%zu/%lld] trial %lld (%s) %s %.4fx, latency %.4fx, accuracy %s%s | "
                 "best within budget %s | %s, ~%s left\n",
                 so_far.trials.size(), static_cast<long long>(options.trials),
                 static_cast<long long>(t.index), host::trial_label(t, !options.alternatives.empty()).c_str(),
                 host::resource_kind_name(shown), t.use.ratio(shown, so_far.dense),
                 t.use.ratio(host::ResourceKind::kLatency, so_far.dense), accuracy.c_str(),
                 t.feasible ? "" : " (over budget)", best_text.c_str(),
                 duration(t.seconds).c_str(), duration(left).c_str());
  };
  const host::SearchResult result = host::run_budget_search(
      dense, registry, options, search_data, resumed ? &*resumed : nullptr, on_progress);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (report) {
    report->write(host::search_html(result, {model_path, algorithms, options.budget,
                                             strategy, seconds}));
    report->commit();
  }
  bool shrank = false;  // whether any candidate lost a channel
  for (const host::SearchTrial& t : result.trials) {
    shrank = shrank || t.use.params < result.dense.params;
  }
  LITHE_CHECK(result.best.has_value(), sdk::Errc::kInvalidConfig, "no trial of ",
              result.trials.size(), " fits ", options.budget.describe(),
              " with --max-sparsity ", options.max_sparsity,
              shrank ? std::string()
                     : std::string("; no candidate lost a single channel: '") + algorithms +
                           "' must zero whole filters for speedup to remove them (a filter "
                           "pruner such as l1_filter; fine-grained and data-driven pruners do "
                           "not, here)",
              " (nothing written but the state", report ? " and the report" : "", ")");
  const host::SearchTrial& best = result.trials[*result.best];

  // The best model again (pruning, speedup and trial fine-tuning are deterministic).
  const host::EvalResult final_accuracy =
      finish(host::build_search_candidate(dense, registry, options, result.layers,
                                          best.sparsities, search_data, best.algorithm),
             "the best model (trial " + std::to_string(best.index) + ")");

  if (json_out) {
    json out;
    out["model"] = model_path;
    out["algorithm"] = algorithms;
    out["budget"] = options.budget.describe();
    out["strategy"] = strategy;
    out["layers"] = result.layers;
    out["dense"] = use_json(result.dense, result.dense);
    out["dense"]["accuracy"] = result.dense_accuracy;
    out["trials"] = json::array();
    for (const host::SearchTrial& t : result.trials) {
      json trial = {{"index", t.index}, {"origin", t.origin},
                    {"algorithm", t.algorithm},
                    {"feasible", t.feasible},
                    {"sparsities", t.sparsities}, {"use", use_json(t.use, result.dense)}};
      trial["accuracy"] = t.accuracy ? json(*t.accuracy) : json(nullptr);
      out["trials"].push_back(std::move(trial));
    }
    out["best"] = {{"trial", best.index},
                   {"sparsities", best.sparsities},
                   {"use", use_json(best.use, result.dense)},
                   {"trial_accuracy", *best.accuracy},
                   {"accuracy", final_accuracy.accuracy},
                   {"test_samples", final_accuracy.samples}};
    out["pareto_front"] = host::pareto_front(result, kind);
    if (quantized) {
      out["quantized"] = compress_result_json(*quantize_request, *quantized);
    }
    out["output"] = output_path;
    out["state"] = state_path;
    out["seconds"] = seconds;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("best: trial %lld (%s), sparsities", static_cast<long long>(best.index),
              host::trial_label(best, !options.alternatives.empty()).c_str());
  for (size_t i = 0; i < result.layers.size(); ++i) {
    std::printf(" %s=%.4f", result.layers[i].c_str(), best.sparsities[i]);
  }
  std::printf("\n  FLOPs %.4fx, params %.4fx, latency %.4fx of the dense model (%.3f ms vs "
              "%.3f ms)\n",
              best.use.ratio(host::ResourceKind::kFlops, result.dense),
              best.use.ratio(host::ResourceKind::kParams, result.dense),
              best.use.ratio(host::ResourceKind::kLatency, result.dense), best.use.latency_ms,
              best.use.dense_latency_ms);
  print_summary(final_accuracy, result.dense_accuracy);
  return 0;
}

}  // namespace lithe::cli
