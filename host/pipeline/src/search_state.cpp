#include "lithe/host/pipeline/search_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "lithe/host/io/json_document.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;

constexpr const char* kFormat = "lithe-search-state";
constexpr int kVersion = 1;

// Checked reads: every failure names the file, the JSON path, the rule and what was there.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& rule,
                         const json& seen) const {
    std::string shown = seen.dump();
    if (shown.size() > 80) {
      shown = shown.substr(0, 77) + "...";
    }
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     source_ + ": " + path + ": " + rule + ", got " + shown);
  }
  const json& member(const json& object, const std::string& path, const std::string& key) const {
    if (!object.is_object()) {
      fail(path, "must be an object", object);
    }
    const auto it = object.find(key);
    if (it == object.end()) {
      fail(path, "has no \"" + key + "\"", json(nullptr));
    }
    return *it;
  }
  double number(const json& value, const std::string& path) const {
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      fail(path, "must be a finite number", value);
    }
    return value.get<double>();
  }
  double non_negative(const json& value, const std::string& path) const {
    const double v = number(value, path);
    if (v < 0) {
      fail(path, "must be >= 0", value);
    }
    return v;
  }
  int64_t count(const json& value, const std::string& path) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      fail(path, "must be an integer >= 0", value);
    }
    return value.get<int64_t>();
  }
  bool boolean(const json& value, const std::string& path) const {
    if (!value.is_boolean()) {
      fail(path, "must be true or false", value);
    }
    return value.get<bool>();
  }
  std::vector<double> numbers(const json& value, const std::string& path, size_t size,
                              double lo, double hi, bool hi_open) const {
    if (!value.is_array() || value.size() != size) {
      fail(path, "must be an array of " + std::to_string(size) + " numbers (one per layer)",
           value);
    }
    std::vector<double> out;
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string at = path + "/" + std::to_string(i);
      const double v = number(value[i], at);
      if (v < lo || v > hi || (hi_open && v == hi)) {
        char range[64];
        std::snprintf(range, sizeof range, "must be in [%g, %g%s", lo, hi, hi_open ? ")" : "]");
        fail(at, range, value[i]);
      }
      out.push_back(v);
    }
    return out;
  }

 private:
  std::string source_;
};

json use_json(const ResourceUse& use) {
  return {{"flops", use.flops},
          {"params", use.params},
          {"latency_ms", use.latency_ms},
          {"dense_latency_ms", use.dense_latency_ms}};
}

ResourceUse read_use(const Reader& r, const json& object, const std::string& path) {
  ResourceUse use;
  use.flops = r.count(r.member(object, path, "flops"), path + "/flops");
  use.params = r.count(r.member(object, path, "params"), path + "/params");
  use.latency_ms = r.non_negative(r.member(object, path, "latency_ms"), path + "/latency_ms");
  use.dense_latency_ms =
      r.non_negative(r.member(object, path, "dense_latency_ms"), path + "/dense_latency_ms");
  return use;
}

// The first key whose value differs between the two objects, as "/key", with both values.
std::string first_difference(const json& stored, const json& expected, std::string* was,
                             std::string* now) {
  for (const auto& [key, value] : expected.items()) {
    const auto it = stored.find(key);
    if (it == stored.end() || *it != value) {
      *was = it == stored.end() ? "absent" : it->dump();
      *now = value.dump();
      return "/" + key;
    }
  }
  for (const auto& [key, value] : stored.items()) {
    if (expected.find(key) == expected.end()) {
      *was = value.dump();
      *now = "absent";
      return "/" + key;
    }
  }
  return "";
}

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
  if (!options.alternatives.empty()) {  // absent otherwise: earlier states stay resumable
    fingerprint["alternatives"] = options.alternatives;
  }
  return fingerprint;
}

std::string search_state_json(const SearchResult& result, const json& fingerprint) {
  json out;
  out["format"] = kFormat;
  out["version"] = kVersion;
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
  const json& format = r.member(doc, "", "format");
  if (format != kFormat) {
    r.fail("/format", std::string("must be \"") + kFormat + "\" (not a lithe search state file)",
           format);
  }
  const json& version = r.member(doc, "", "version");
  if (version != kVersion) {
    r.fail("/version", "must be " + std::to_string(kVersion) + " (written by another Lithe)",
           version);
  }
  const json& search = r.member(doc, "", "search");
  if (!search.is_object()) {
    r.fail("/search", "must be an object", search);
  }
  std::string was;
  std::string now;
  const std::string differs = first_difference(search, expected, &was, &now);
  LITHE_CHECK(differs.empty(), sdk::Errc::kInvalidConfig, source,
              ": was written by another search: /search", differs, " is ", was, " there and ",
              now, " now (give the same options and model to resume, or another --state)");
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
