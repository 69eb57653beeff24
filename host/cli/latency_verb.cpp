// `lithe latency`: the measured latency of TorchScript models on this machine, timed
// alternately in one loop so that a change of machine load hits each alike; with --baseline,
// each model's ratio to it. What `lithe search --latency-budget` checks against, in a process of
// its own.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "input_shape.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/model/model.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/sdk/error.h"
#include "verbs.h"

namespace lithe::cli {

int run_latency(const std::vector<std::string>& args) {
  std::vector<std::string> models;
  std::string baseline;
  std::string shape_text;
  int runs = 100;
  int warmup = 10;
  bool json_out = false;
  CommonOptions common;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&models)->required()->composing(),
       "TorchScript model to time (repeatable)")
      ("baseline", po::value(&baseline),
       "also time this model, and give every model's ratio to it (e.g. the dense model)")
      ("input-shape", po::value(&shape_text)->required(),
       "the input (zeros), batch first, e.g. 16,1,28,28")
      ("runs", po::value(&runs)->default_value(runs),
       "timed rounds; each times one forward of every model, in alternating order")
      ("warmup", po::value(&warmup)->default_value(warmup), "untimed forwards of each model first")
      ("json", po::bool_switch(&json_out), "print the medians as JSON");
  add_common_options(desc, common);
  if (!parse_verb_args("latency",
                       "--model A.pt [--model B.pt ...] [--baseline DENSE.pt] --input-shape "
                       "16,1,28,28 [--runs 100] [--json]",
                       args, desc)) {
    return 0;
  }
  const std::vector<int64_t> shape = parse_input_shape(shape_text);
  LITHE_CHECK(runs >= 1 && runs <= 1000000, sdk::Errc::kInvalidConfig,
              "--runs must be in [1, 1000000], got ", runs);
  LITHE_CHECK(warmup >= 0 && warmup <= 1000000, sdk::Errc::kInvalidConfig,
              "--warmup must be in [0, 1000000], got ", warmup);
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader, /*warn_failed_plugins=*/false);
  std::vector<std::string> paths = models;
  if (!baseline.empty()) {
    paths.insert(paths.begin(), baseline);
  }
  std::vector<torch::jit::Module> loaded;
  for (const std::string& path : paths) {
    loaded.push_back(host::load_torchscript_module(path));
  }
  std::vector<torch::jit::Module*> timed;
  for (torch::jit::Module& m : loaded) {
    timed.push_back(&m);
  }
  const at::Tensor input = at::zeros(shape);
  std::vector<double> medians;
  try {
    medians = host::median_latencies(timed, input, warmup, runs);
  } catch (const sdk::Error&) {
    throw;
  } catch (const std::exception& e) {  // the forward's own error (torch::jit, c10)
    throw sdk::Error(sdk::Errc::kShapeMismatch, "the models' forward failed on an input of shape " +
                                                    shape_text + ": " +
                                                    host::graph_trace::interpreter_message(e));
  }
  const double base = baseline.empty() ? 0 : medians.front();
  if (json_out) {
    nlohmann::ordered_json out;
    out["input_shape"] = shape;
    out["runs"] = runs;
    out["threads"] = at::get_num_threads();
    if (!baseline.empty()) {
      out["baseline"] = {{"model", baseline}, {"ms", base}};
    }
    out["models"] = nlohmann::ordered_json::array();
    for (size_t i = baseline.empty() ? 0 : 1; i < paths.size(); ++i) {
      nlohmann::ordered_json m = {{"model", paths[i]}, {"ms", medians[i]}};
      if (!baseline.empty()) {
        m["ratio"] = medians[i] / base;
      }
      out["models"].push_back(std::move(m));
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("median of %d alternating rounds, input %s, %d threads\n", runs, shape_text.c_str(),
              at::get_num_threads());
  for (size_t i = 0; i < paths.size(); ++i) {
    const bool is_base = !baseline.empty() && i == 0;
    std::printf("%10.4f ms  %s%s", medians[i], paths[i].c_str(), is_base ? "  (baseline)" : "");
    if (!baseline.empty() && !is_base) {
      std::printf("  %.4fx", medians[i] / base);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace lithe::cli
