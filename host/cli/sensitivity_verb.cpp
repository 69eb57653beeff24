// `lithe sensitivity`: NNI's SensitivityAnalysis from the command line. Each analysed layer alone
// is pruned to each sparsity of a list by a registered pruner and the model's top-1 accuracy on
// the test data is measured; a table (or JSON) on stdout, NNI's CSV layout in a file.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comma_list.h"
#include "lithe/host/io/number_text.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/io/threads.h"
#include "lithe/host/model/model.h"
#include "lithe/host/pipeline/sensitivity_allocation.h"
#include "lithe/host/pipeline/sensitivity_analysis.h"
#include "lithe/host/pipeline/sensitivity_report.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/layer_cached_evaluation.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/log.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

std::vector<double> parse_sparsities(const std::string& text) {
  std::vector<double> out;
  for (std::string item : split_commas(text)) {
    item.erase(0, item.find_first_not_of(' '));  // "0.1, 0.5" as well as "0.1,0.5"
    const std::optional<double> value = host::parse_finite_number(item);
    LITHE_CHECK(value.has_value(), sdk::Errc::kInvalidConfig, "--sparsities: '", item,
                "' is not a number (a comma-separated list such as 0.1,0.5,0.9)");
    out.push_back(*value);
  }
  LITHE_CHECK(!out.empty() || text.empty(), sdk::Errc::kInvalidConfig,
              "--sparsities: no sparsity in '", text, "'");
  return out;
}

// "dropped:0.05" -> mode and value.
void parse_early_stop(const std::string& text, host::SensitivityOptions& options) {
  if (text.empty()) {
    return;
  }
  const size_t colon = text.find(':');
  const std::string mode = text.substr(0, colon);
  const std::string value = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (mode == "minimize") {
    options.stop = host::SensitivityStop::kMinimize;
  } else if (mode == "maximize") {
    options.stop = host::SensitivityStop::kMaximize;
  } else if (mode == "dropped") {
    options.stop = host::SensitivityStop::kDropped;
  } else if (mode == "raised") {
    options.stop = host::SensitivityStop::kRaised;
  } else {
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     "--early-stop: the mode must be minimize, maximize, dropped or raised "
                     "(MODE:VALUE, e.g. dropped:0.05), got '" + text + "'");
  }
  const std::optional<double> stop_value = host::parse_finite_number(value);
  LITHE_CHECK(stop_value.has_value(), sdk::Errc::kInvalidConfig, "--early-stop: '", text,
              "' needs a number after the colon (e.g. dropped:0.05)");
  options.stop_value = *stop_value;
}

}  // namespace

int run_sensitivity(const std::vector<std::string>& args) {
  std::string model_path;
  std::string data = host::kDefaultDataDir;
  std::string test_path;
  std::string csv_path;
  std::string report_path;
  std::string config_out_path;
  host::AllocationOptions allocation;
  std::string sparsities;
  std::string op_types = "Conv2d";
  std::string layers;
  std::string early_stop;
  int64_t eval_samples = 0;
  bool json = false;
  host::SensitivityOptions options;
  CommonOptions common;
  po::variables_map given;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model")
      ("algorithm", po::value(&options.algorithm)->required(),
       "a registered pruner, run on one layer at a time (e.g. l1_filter, level, fpgm)")
      ("options", po::value(&options.algorithm_options_json)->default_value("{}"),
       "the pruner's \"options\" object, JSON")
      ("data", po::value(&data)->default_value(data),
       "MNIST-layout directory (its test split is used) or tensor file")
      ("test-data", po::value(&test_path), "tensor file or directory to evaluate on instead")
      ("eval-samples", po::value(&eval_samples)->default_value(0),
       "evaluate on the first N test samples only (0: all)")
      ("sparsities", po::value(&sparsities),
       "comma-separated, each in (0, 1), rounded to 2 decimals (default 0.1,...,0.9)")
      ("op-types", po::value(&op_types)->default_value(op_types),
       "comma-separated module types to analyse (NNI: Conv2d)")
      ("layers", po::value(&layers), "comma-separated layer names (default: every one)")
      ("early-stop", po::value(&early_stop),
       "MODE:VALUE, stop a layer's sweep when the accuracy is below VALUE (minimize), above "
       "it (maximize), more than VALUE below the original (dropped) or above it (raised)")
      ("csv", po::value(&csv_path), "write NNI's CSV layout (layername,<sparsities>) here")
      ("report", po::value(&report_path),
       "write an HTML report here: each layer's curve (inline SVG) and the table")
      ("target-sparsity", po::value(&allocation.target),
       "allocate per-layer sparsities reaching this share of the analysed layers' weights, "
       "each in proportion to the largest sparsity it tolerates (NNI's SensitivityPruner)")
      ("threshold", po::value(&allocation.threshold)->default_value(allocation.threshold),
       "with --target-sparsity: the accuracy drop a layer may cost")
      ("max-sparsity", po::value(&allocation.max_sparsity)
                           ->default_value(allocation.max_sparsity),
       "with --target-sparsity: no layer beyond it")
      ("write-config", po::value(&config_out_path),
       "with --target-sparsity: write the allocation as a config for lithe compress here")
      ("json", po::bool_switch(&json), "print the result as JSON");
  add_common_options(desc, common);
  if (!parse_verb_args("sensitivity",
                       "--model M.pt --algorithm l1_filter [--data DIR] [--sparsities "
                       "0.1,0.5,0.9] [--early-stop dropped:0.05] [--csv OUT.csv] [--report "
                       "OUT.html] [--target-sparsity S --write-config OUT.json] [--json]",
                       args, desc, nullptr, &given)) {
    return 0;
  }
  // Every argument is checked before the model or the data is read.
  options.sparsities = parse_sparsities(sparsities);
  options.op_types = split_commas(op_types);
  LITHE_CHECK(!options.op_types.empty(), sdk::Errc::kInvalidConfig,
              "--op-types: no module type in '", op_types, "'");
  options.layers = split_commas(layers);
  parse_early_stop(early_stop, options);
  LITHE_CHECK(eval_samples >= 0, sdk::Errc::kInvalidConfig,
              "--eval-samples must be >= 0, got ", eval_samples);
  LITHE_CHECK(!nlohmann::json::parse(options.algorithm_options_json, nullptr, false)
                   .is_discarded(),
              sdk::Errc::kInvalidConfig, "--options is not valid JSON: '",
              options.algorithm_options_json, "'");
  host::check_output_paths({{"--model", model_path}, {"--data", data}, {"--test-data", test_path}},
                           {{"--csv", csv_path}, {"--report", report_path},
                            {"--write-config", config_out_path}});
  std::optional<host::StagedFile> csv;
  if (!csv_path.empty()) {
    csv.emplace(csv_path, "--csv");  // checks the directory before any work
  }
  std::optional<host::StagedFile> report;
  if (!report_path.empty()) {
    report.emplace(report_path, "--report");
  }
  const bool allocate = given.count("target-sparsity") != 0;
  LITHE_CHECK(allocate || config_out_path.empty(), sdk::Errc::kInvalidConfig,
              "--write-config needs --target-sparsity (the overall sparsity to allocate)");
  for (const char* option : {"threshold", "max-sparsity"}) {
    LITHE_CHECK(allocate || given[option].defaulted(), sdk::Errc::kInvalidConfig, "--", option,
                " has no effect without --target-sparsity");
  }
  if (allocate) {
    host::check_allocation_options(allocation);  // before any work
  }
  std::optional<host::StagedFile> config_out;
  if (!config_out_path.empty()) {
    config_out.emplace(config_out_path, "--write-config");
  }
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader);
  const auto model = host::load_torchscript_model(model_path);
  host::Dataset test = host::load_test_dataset(data, test_path);
  LITHE_CHECK(test.size() > 0, sdk::Errc::kInvalidConfig, "--data '", data,
              "' is a file: give the data to evaluate on with --test-data (or a directory with "
              "a test split)");
  host::check_dataset_fits_model(*model, test);
  if (eval_samples > 0) {
    test = host::first_samples(test, eval_samples);
  }
  // Each layer's trials reuse what the forward computes before that layer.
  host::LayerCachedEvaluation evaluation(*model, test);
  const auto metric = [&](const std::string& layer) {
    const double accuracy = evaluation.evaluate(layer).accuracy;
    if (!layer.empty()) {
      LITHE_LOG(kDebug, "sensitivity: '", layer, "' evaluated: ",
                evaluation.last_mode());
    }
    return accuracy;
  };
  const auto start = std::chrono::steady_clock::now();
  const host::SensitivityResult result =
      host::analyse_sensitivity(*model, registry, options, metric);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (csv) {
    csv->write(host::sensitivity_csv(result));
  }
  if (report) {
    report->write(host::sensitivity_html(
        result, {model_path, options.algorithm, "top-1 accuracy", test.size(), seconds}));
  }
  std::vector<host::LayerAllocation> allocated;
  if (allocate) {
    std::map<std::string, int64_t> weights;
    for (const host::ModuleRecord& m : model->modules()) {
      if (m.weight.has_value()) {
        weights[m.name] = m.weight->numel();
      }
    }
    allocated = host::allocate_sparsities(result, weights, allocation);
    if (config_out) {
      nlohmann::ordered_json config;
      config["algorithm"] = options.algorithm;
      config["options"] = nlohmann::ordered_json::parse(options.algorithm_options_json);
      config["config_list"] = nlohmann::ordered_json::array();
      for (const host::LayerAllocation& a : allocated) {
        if (a.sparsity > 0) {
          config["config_list"].push_back({{"sparsity", a.sparsity}, {"op_names", {a.layer}}});
        }
      }
      config_out->write(config.dump(2) + "\n");
    }
  }
  // All staged before any replaces its target: a failing write leaves every one untouched.
  for (std::optional<host::StagedFile>* staged : {&csv, &report, &config_out}) {
    if (*staged) {
      (*staged)->commit();
    }
  }
  if (json) {
    nlohmann::ordered_json out;
    out["model"] = model_path;
    out["algorithm"] = options.algorithm;
    out["metric"] = "top-1 accuracy";
    out["samples"] = test.size();
    out["original"] = result.original;
    out["sparsities"] = result.sparsities;
    out["evaluations"] = result.evaluations;
    out["seconds"] = seconds;  // the analysis alone: not loading the model and the data
    out["layers"] = nlohmann::ordered_json::array();
    for (const host::SensitivityRow& row : result.rows) {
      nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
      for (const auto& [sparsity, value] : row.metrics) {
        std::ostringstream key;
        key << sparsity;
        metrics[key.str()] = value;
      }
      out["layers"].push_back({{"name", row.layer}, {"metrics", metrics}});
    }
    if (allocate) {
      out["allocation"] = nlohmann::ordered_json::array();
      for (const host::LayerAllocation& a : allocated) {
        out["allocation"].push_back({{"name", a.layer}, {"weights", a.weights},
                                     {"tolerated", a.tolerated}, {"sparsity", a.sparsity}});
      }
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("top-1 accuracy of %s on %lld samples: %.4f; %s on one layer at a time\n",
              model_path.c_str(), static_cast<long long>(test.size()), result.original,
              options.algorithm.c_str());
  std::printf("%-24s", "layer \\ sparsity");
  for (const double s : result.sparsities) {
    std::printf(" %7.2f", s);
  }
  std::printf("\n");
  for (const host::SensitivityRow& row : result.rows) {
    std::printf("%-24s", row.layer.c_str());
    for (const auto& [sparsity, value] : row.metrics) {
      std::printf(" %7.4f", value);
    }
    std::printf("\n");
  }
  if (csv) {
    std::printf("wrote %s\n", csv_path.c_str());
  }
  if (report) {
    std::printf("wrote %s\n", report_path.c_str());
  }
  if (allocate) {
    std::printf("\nallocation for overall sparsity %.4f (drop threshold %g, at most %g per "
                "layer):\n%-24s %10s %10s %10s\n",
                allocation.target, allocation.threshold, allocation.max_sparsity, "layer",
                "weights", "tolerated", "sparsity");
    for (const host::LayerAllocation& a : allocated) {
      std::printf("%-24s %10lld %10.2f %10.4f\n", a.layer.c_str(),
                  static_cast<long long>(a.weights), a.tolerated, a.sparsity);
    }
    if (config_out) {
      std::printf("wrote %s\n", config_out_path.c_str());
    }
  }
  return 0;
}

}  // namespace lithe::cli
