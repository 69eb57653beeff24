// `lithe sensitivity`: NNI's SensitivityAnalysis from the command line (host::run_sensitivity,
// the job embedders call). Each analysed layer alone is pruned to each sparsity of a list by a
// registered pruner and the model's top-1 accuracy on the test data is measured; a table (or
// JSON) on stdout, NNI's CSV layout in a file.
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comma_list.h"
#include "field_flags.h"
#include "lithe/host/io/number_text.h"
#include "lithe/host/jobs/sensitivity_job.h"
#include "lithe/host/train/dataset.h"
#include "lithe/sdk/error.h"
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

void print_json(const std::string& model_path, const host::SensitivityRequest& r,
                const host::SensitivityReport& out) {
  nlohmann::ordered_json json;
  json["model"] = model_path;
  json["algorithm"] = r.analysis.algorithm;
  json["metric"] = "top-1 accuracy";
  json["samples"] = out.samples;
  json["original"] = out.analysis.original;
  json["sparsities"] = out.analysis.sparsities;
  json["evaluations"] = out.analysis.evaluations;
  json["seconds"] = out.seconds;  // the analysis alone: not loading the model and the data
  json["layers"] = nlohmann::ordered_json::array();
  for (const host::SensitivityRow& row : out.analysis.rows) {
    nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
    for (const auto& [sparsity, value] : row.metrics) {
      std::ostringstream key;
      key << sparsity;
      metrics[key.str()] = value;
    }
    json["layers"].push_back({{"name", row.layer}, {"metrics", metrics}});
  }
  if (r.allocation) {
    json["allocation"] = nlohmann::ordered_json::array();
    for (const host::LayerAllocation& a : out.allocation) {
      json["allocation"].push_back({{"name", a.layer}, {"weights", a.weights},
                                    {"tolerated", a.tolerated}, {"sparsity", a.sparsity}});
    }
  }
  std::cout << json.dump(2) << "\n";
}

void print_table(const std::string& model_path, const host::SensitivityRequest& r,
                 const host::SensitivityReport& out) {
  std::printf("top-1 accuracy of %s on %lld samples: %.4f; %s on one layer at a time\n",
              model_path.c_str(), static_cast<long long>(out.samples), out.analysis.original,
              r.analysis.algorithm.c_str());
  std::printf("%-24s", "layer \\ sparsity");
  for (const double s : out.analysis.sparsities) {
    std::printf(" %7.2f", s);
  }
  std::printf("\n");
  for (const host::SensitivityRow& row : out.analysis.rows) {
    std::printf("%-24s", row.layer.c_str());
    for (const auto& [sparsity, value] : row.metrics) {
      std::printf(" %7.4f", value);
    }
    std::printf("\n");
  }
  for (const host::Output* o : {&r.csv, &r.report}) {
    if (o->wanted()) {
      std::printf("wrote %s\n", o->file.c_str());
    }
  }
  if (r.allocation) {
    const host::AllocationOptions& a = *r.allocation;
    std::printf("\nallocation for overall sparsity %.4f (drop threshold %g, at most %g per "
                "layer):\n%-24s %10s %10s %10s\n",
                a.target, a.threshold, a.max_sparsity, "layer", "weights", "tolerated",
                "sparsity");
    for (const host::LayerAllocation& l : out.allocation) {
      std::printf("%-24s %10lld %10.2f %10.4f\n", l.layer.c_str(),
                  static_cast<long long>(l.weights), l.tolerated, l.sparsity);
    }
    if (r.allocation_config.wanted()) {
      std::printf("wrote %s\n", r.allocation_config.file.c_str());
    }
  }
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
  bool json = false;
  host::SensitivityRequest r;
  CommonOptions common;
  po::variables_map given;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model")
      ("algorithm", po::value(&r.analysis.algorithm)->required(),
       "a registered pruner, run on one layer at a time (e.g. l1_filter, level, fpgm)")
      ("options", po::value(&r.analysis.algorithm_options_json)->default_value("{}"),
       "the pruner's \"options\" object, JSON")
      ("data", po::value(&data)->default_value(data),
       "MNIST-layout directory (its test split is used) or tensor file")
      ("test-data", po::value(&test_path), "tensor file or directory to evaluate on instead")
      ("eval-samples", po::value(&r.eval_samples)->default_value(0),
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
  r.analysis.sparsities = parse_sparsities(sparsities);
  r.analysis.op_types = split_commas(op_types);
  LITHE_CHECK(!r.analysis.op_types.empty(), sdk::Errc::kInvalidConfig,
              "--op-types: no module type in '", op_types, "'");
  r.analysis.layers = split_commas(layers);
  parse_early_stop(early_stop, r.analysis);
  const bool allocate = given.count("target-sparsity") != 0;
  LITHE_CHECK(allocate || config_out_path.empty(), sdk::Errc::kInvalidConfig,
              "--write-config needs --target-sparsity (the overall sparsity to allocate)");
  for (const char* option : {"threshold", "max-sparsity"}) {
    LITHE_CHECK(allocate || given[option].defaulted(), sdk::Errc::kInvalidConfig, "--", option,
                " has no effect without --target-sparsity");
  }
  if (allocate) {
    r.allocation = allocation;
  }
  r.model = host::ModelSource::file(model_path);
  r.data_path = data;
  r.test_data_path = test_path;
  r.csv = host::Output::to_file(csv_path);
  r.report = host::Output::to_file(report_path);
  r.allocation_config = host::Output::to_file(config_out_path);
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader);
  const FlagWords flags = {
      {"model", "--model"},           {"algorithm", "--algorithm"},
      {"algorithm_options_json", "--options"}, {"data_path", "--data"},
      {"test_data_path", "--test-data"}, {"eval_samples", "--eval-samples"},
      {"sparsities", "--sparsities"}, {"op_types", "--op-types"},
      {"layers", "--layers"},         {"csv", "--csv"},
      {"report", "--report"},         {"allocation_config", "--write-config"},
      {"allocation", "--target-sparsity"}, {"target", "--target-sparsity"},
      {"threshold", "--threshold"},   {"max_sparsity", "--max-sparsity"}};
  const host::SensitivityReport out =
      in_flags(flags, [&] { return host::run_sensitivity(r, registry); });
  if (json) {
    print_json(model_path, r, out);
  } else {
    print_table(model_path, r, out);
  }
  return 0;
}

}  // namespace lithe::cli
