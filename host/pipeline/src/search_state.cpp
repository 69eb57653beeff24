#include "lithe/host/pipeline/search_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "lithe/host/io/json_document.h"
#include "state_reader.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;
using detail::read_use;
using detail::Reader;
using detail::use_json;

constexpr const char* kSearchStateFormat = "lithe-search-state";
constexpr int kSearchStateVersion = 1;

}  // namespace

std::string content_digest(const std::string& bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

json search_fingerprint(const SearchOptions& options, const std::string& model_digest,
                        const std::string& data_description) {
  json train = nullptr;
  if (options.trial_epochs > 0 || options.recalibrate_bn_batches > 0) {
    const TrainOptions& t = options.train;
    train = {{"batch_size", t.batch_size}, {"optimizer", t.optimizer},
             {"lr", t.lr},                 {"momentum", t.momentum},
             {"weight_decay", t.weight_decay}, {"lr_step", t.lr_step},
             {"lr_gamma", t.lr_gamma}};
  }
  json fingerprint = {{"model", model_digest},
                      {"data", data_description},
                      {"algorithm", options.algorithm},
                      {"options", options.algorithm_options_json},
                      {"op_types", options.op_types},
                      {"layers", options.layers},
                      {"budget", options.budget.describe()},
                      {"strategy", search_strategy_name(options.strategy)},
                      {"seed", options.seed},
                      {"max_sparsity", options.max_sparsity},
                      {"perturbation", options.perturbation},
                      {"start_temperature", options.start_temperature},
                      {"cool_down_rate", options.cool_down_rate},
                      {"netadapt_step", options.netadapt_step},
                      {"start_direction", options.start_direction},
                      {"amc_warmup", options.amc_warmup},
                      {"amc_noise", options.amc_noise},
                      {"amc_noise_decay", options.amc_noise_decay},
                      {"bisection_steps", options.bisection_steps},
                      {"flops_mode", options.flops_mode == FlopsMode::kOps ? "ops"
                                                               : flops_mode_name(options.flops_mode)},
                      {"input_shape", options.latency.input_shape},
                      {"latency_runs", options.latency.runs},
                      {"latency_warmup", options.latency.warmup},
                      {"trial_epochs", options.trial_epochs},
                      {"recalibrate_bn", options.recalibrate_bn_batches},
                      {"eval_batch_size", options.train.eval_batch_size},
                      {"train", train}};
  if (options.strategy == SearchStrategy::kNetAdapt) {
    // Earlier states made one candidate per layer where the layers of a coupled set now make one
    fingerprint["netadapt_units"] = "coupled layers together";
  }
  if (options.fill_budget) {  // states written before the fill existed made trials without it
    fingerprint["fill_budget"] = true;
  }
  if (!options.alternatives.empty()) {  // absent otherwise: earlier states stay resumable
    fingerprint["alternatives"] = options.alternatives;
  }
  return fingerprint;
}

std::string search_state_json(const SearchResult& result, const json& fingerprint) {
  json out;
  out["format"] = kSearchStateFormat;
  out["version"] = kSearchStateVersion;
  out["search"] = fingerprint;
  out["layers"] = result.layers;
  out["dense"] = use_json(result.dense);
  out["dense"]["accuracy"] = result.dense_accuracy;
  out["trials"] = json::array();
  for (const SearchTrial& t : result.trials) {
    json trial = {{"index", t.index},          {"origin", t.origin},
                  {"direction", t.direction},  {"scale", t.scale},
                  {"sparsities", t.sparsities}, {"feasible", t.feasible},
                  {"use", use_json(t.use)}};
    trial["accuracy"] = t.accuracy.has_value() ? json(*t.accuracy) : json(nullptr);
    trial["seconds"] = t.seconds;
    if (!t.algorithm.empty()) {
      trial["algorithm"] = t.algorithm;
    }
    out["trials"].push_back(std::move(trial));
  }
  return out.dump(1) + "\n";
}

SearchResult read_search_state(const std::string& text, const std::string& source,
                               const json& expected) {
  const json doc = parse_json_document(text, source);
  const Reader r(source);
  detail::check_state_header(r, doc, kSearchStateFormat, kSearchStateVersion,
                             "not a lithe search state file", expected, source);
  SearchResult result;
  const json& layers = r.member(doc, "", "layers");
  if (!layers.is_array() || layers.empty()) {
    r.fail("/layers", "must be a non-empty array of layer names", layers);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i].is_string()) {
      r.fail("/layers/" + std::to_string(i), "must be a layer name", layers[i]);
    }
    result.layers.push_back(layers[i].get<std::string>());
  }
  const json& dense = r.member(doc, "", "dense");
  result.dense = read_use(r, dense, "/dense");
  result.dense_accuracy = r.number(r.member(dense, "/dense", "accuracy"), "/dense/accuracy");
  const json& trials = r.member(doc, "", "trials");
  if (!trials.is_array()) {
    r.fail("/trials", "must be an array", trials);
  }
  const size_t n = result.layers.size();
  for (size_t i = 0; i < trials.size(); ++i) {
    const std::string path = "/trials/" + std::to_string(i);
    const json& t = trials[i];
    SearchTrial trial;
    trial.index = r.count(r.member(t, path, "index"), path + "/index");
    if (trial.index != static_cast<int64_t>(i)) {
      r.fail(path + "/index", "must be " + std::to_string(i) + " (trials in order)",
             t["index"]);
    }
    const json& origin = r.member(t, path, "origin");
    if (origin != "uniform" && origin != "sensitivity" && origin != "random" &&
        origin != "annealing" && origin != "netadapt" && origin != "amc") {
      r.fail(path + "/origin",
             "must be \"uniform\", \"sensitivity\", \"random\", \"annealing\", "
             "\"netadapt\" or \"amc\"",
             origin);
    }
    trial.origin = origin.get<std::string>();
    if (t.contains("algorithm")) {  // absent in states written before alternatives existed
      const json& algorithm = t["algorithm"];
      const json pruners = expected.value("alternatives", json::array());
      const bool known = algorithm.is_string() &&
                         (algorithm == expected["algorithm"] ||
                          std::find(pruners.begin(), pruners.end(), algorithm) != pruners.end());
      if (!known) {
        r.fail(path + "/algorithm", "must be the search's pruner or one of its alternatives",
               algorithm);
      }
      trial.algorithm = algorithm.get<std::string>();
    }
    const json& direction = r.member(t, path, "direction");
    if (trial.origin == "netadapt") {  // NetAdapt prunes one layer further: no direction
      if (direction != json::array()) {
        r.fail(path + "/direction", "must be [] for a netadapt trial", direction);
      }
    } else {
      trial.direction = r.numbers(direction, path + "/direction", n, 0.05, 1, false);
    }
    trial.scale = r.non_negative(r.member(t, path, "scale"), path + "/scale");
    trial.sparsities =
        r.numbers(r.member(t, path, "sparsities"), path + "/sparsities", n, 0, 1, true);
    trial.feasible = r.boolean(r.member(t, path, "feasible"), path + "/feasible");
    trial.use = read_use(r, r.member(t, path, "use"), path + "/use");
    const json& accuracy = r.member(t, path, "accuracy");
    if (!accuracy.is_null()) {
      trial.accuracy = r.number(accuracy, path + "/accuracy");
    }
    if (trial.feasible && !trial.accuracy.has_value()) {
      r.fail(path + "/accuracy", "must be a number for a feasible trial", accuracy);
    }
    if (!trial.feasible && trial.accuracy.has_value() && trial.origin != "netadapt") {
      r.fail(path + "/accuracy", "must be null for an infeasible " + trial.origin + " trial",
             accuracy);
    }
    trial.seconds = r.non_negative(r.member(t, path, "seconds"), path + "/seconds");
    result.trials.push_back(std::move(trial));
  }
  return result;
}

}  // namespace lithe::host
