// NNI golden-case replay. One-shot pruning cases (compress(), optional export_model and
// apply_compression_results) and expected-error cases are replayed; schedules, data-driven
// pruners, quantizers, FLOPs and speedup cases report UNSUPPORTED until their replay exists.
#include "lithe/host/conformance.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "lithe/host/compressor.h"
#include "lithe/host/export.h"
#include "lithe/host/model.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/pruner.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Outcome = CaseResult::Outcome;

// Raised inside a case to end it with a verdict.
struct Verdict {
  Outcome outcome;
  std::string reason;
};

[[noreturn]] void fail(const std::string& reason) { throw Verdict{Outcome::kFail, reason}; }
[[noreturn]] void unsupported(const std::string& reason) {
  throw Verdict{Outcome::kUnsupported, reason};
}

std::map<std::string, at::Tensor> load_tensor_dict(const fs::path& file) {
  const std::string bytes = read_file(file);
  const c10::IValue value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  LITHE_CHECK(value.isGenericDict(), sdk::Errc::kInvalidModel, "'", file.string(),
              "' must hold a dict of tensors, got ", value.tagKind());
  std::map<std::string, at::Tensor> out;
  for (const auto& item : value.toGenericDict()) {
    if (item.key().isString() && item.value().isTensor()) {
      out[item.key().toStringRef()] = item.value().toTensor();
    }
  }
  return out;
}

fs::path resolve_model_file(const fs::path& golden_dir, const fs::path& case_dir,
                            const std::string& relative) {
  for (const fs::path& base : {golden_dir.parent_path(), golden_dir, case_dir}) {
    std::error_code ec;
    if (fs::is_regular_file(base / relative, ec)) {
      return base / relative;
    }
  }
  fail("model file '" + relative + "' not found next to " + golden_dir.string());
}

// Copies `state` (and `init.<param>` overrides) into the module's parameters and buffers.
void load_state(torch::jit::Module& module, const std::map<std::string, at::Tensor>& state,
                const std::string& prefix) {
  std::map<std::string, at::Tensor> targets;
  for (const auto& p : module.named_parameters()) {
    targets[p.name] = p.value;
  }
  for (const auto& b : module.named_buffers()) {
    targets[b.name] = b.value;
  }
  at::NoGradGuard no_grad;
  for (const auto& [key, value] : state) {
    if (key.rfind(prefix, 0) != 0) {
      continue;
    }
    const std::string name = key.substr(prefix.size());
    const auto it = targets.find(name);
    if (it == targets.end()) {
      fail("state entry '" + key + "' names no parameter or buffer of the model");
    }
    if (it->second.sizes() != value.sizes()) {
      fail("state entry '" + key + "' has another shape than the model's tensor");
    }
    it->second.copy_(value);
  }
}

bool close_enough(const at::Tensor& actual, const at::Tensor& expected, std::string* detail) {
  if (actual.sizes() != expected.sizes()) {
    *detail = "shape " + c10::str(actual.sizes()) + " vs expected " + c10::str(expected.sizes());
    return false;
  }
  const at::Tensor a = actual.to(at::kDouble);
  const at::Tensor b = expected.to(at::kDouble);
  const at::Tensor excess = (a - b).abs() - 1e-5 * b.abs().clamp_min(1.0);
  const double worst = excess.max().item<double>();
  if (worst > 0) {
    *detail = "max |diff| " + std::to_string((a - b).abs().max().item<double>());
    return false;
  }
  return true;
}

int64_t count_zeros(const at::Tensor& t) { return t.eq(0).sum().item<int64_t>(); }

// A layer's prunable units as booleans "pruned", with the scores they were ranked by: single
// weights scored by |w| (unstructured pruners), or whole filters/channels scored by NNI's own
// per-filter statistic when the case records one (`stat.<layer>`).
struct UnitView {
  at::Tensor lithe_pruned;
  at::Tensor nni_pruned;
  at::Tensor scores;
};

UnitView unit_view(const at::Tensor& lithe_mask, const at::Tensor& nni_mask,
                   const at::Tensor& weight_before, const at::Tensor* stat) {
  UnitView v;
  if (stat != nullptr && stat->numel() == lithe_mask.size(0) && lithe_mask.dim() > 1) {
    const int64_t units = stat->numel();
    v.lithe_pruned = lithe_mask.reshape({units, -1}).eq(0).all(1);
    v.nni_pruned = nni_mask.reshape({units, -1}).eq(0).all(1);
    v.scores = stat->flatten().to(at::kDouble);
  } else {
    v.lithe_pruned = lithe_mask.flatten().eq(0);
    v.nni_pruned = nni_mask.flatten().eq(0);
    v.scores = weight_before.abs().flatten().to(at::kDouble);
  }
  return v;
}

// Lithe's rule (departure 1): exactly k units pruned (k < 0: not checked here), and no pruned
// unit scores higher than a kept one.
bool follows_exact_k(const UnitView& v, int64_t k, std::string* detail) {
  const int64_t pruned = v.lithe_pruned.sum().item<int64_t>();
  if (k >= 0 && pruned != k) {
    *detail = std::to_string(pruned) + " units pruned instead of exactly k=" + std::to_string(k);
    return false;
  }
  if (pruned == 0 || pruned == v.lithe_pruned.numel()) {
    return true;
  }
  const double pruned_max = v.scores.masked_select(v.lithe_pruned).max().item<double>();
  const double kept_min = v.scores.masked_select(v.lithe_pruned.logical_not()).min().item<double>();
  if (pruned_max > kept_min) {
    *detail = "a pruned unit's score (" + std::to_string(pruned_max) + ") exceeds a kept one (" +
              std::to_string(kept_min) + ")";
    return false;
  }
  return true;
}

// NNI pruned Lithe's units plus units tied with NNI's threshold (N2 over-pruning).
bool explained_by_tie_overpruning(const UnitView& v) {
  if (v.lithe_pruned.logical_and(v.nni_pruned.logical_not()).any().item<bool>()) {
    return false;  // Lithe pruned something NNI kept
  }
  const at::Tensor extra = v.nni_pruned.logical_and(v.lithe_pruned.logical_not());
  if (!extra.any().item<bool>()) {
    return false;
  }
  const double threshold = v.scores.masked_select(v.nni_pruned).max().item<double>();
  return v.scores.masked_select(extra).eq(threshold).all().item<bool>();
}

// Copies of every weight, to check rules against what the pruner saw.
std::map<std::string, at::Tensor> snapshot_weights(const Model& model) {
  std::map<std::string, at::Tensor> out;
  for (const ModuleRecord& m : model.modules()) {
    if (m.weight.has_value()) {
      out[m.name] = m.weight->detach().clone();
    }
  }
  return out;
}

struct CaseContext {
  fs::path golden_dir;
  fs::path case_dir;
  json config;
  json summary;
  std::map<std::string, at::Tensor> tensors;
};

torch::jit::Module load_case_model(const CaseContext& c) {
  const json& files = c.config.at("model_files");
  const fs::path script =
      resolve_model_file(c.golden_dir, c.case_dir, files.at("torchscript").get<std::string>());
  torch::jit::Module module = torch::jit::load(script.string());
  if (files.contains("state") && files["state"].is_string()) {
    const fs::path state =
        resolve_model_file(c.golden_dir, c.case_dir, files["state"].get<std::string>());
    load_state(module, load_tensor_dict(state), "");
  }
  load_state(module, c.tensors, "init.");
  module.eval();
  return module;
}

const at::Tensor& tensor(const CaseContext& c, const std::string& key) {
  const auto it = c.tensors.find(key);
  if (it == c.tensors.end()) {
    fail("golden tensor '" + key + "' missing from tensors.pt");
  }
  return it->second;
}

CompressionConfig case_compression_config(const CaseContext& c, const std::string& algorithm) {
  CompressionConfig config;
  config.algorithm = algorithm;
  config.config_list_json = c.config.at("config_list").dump();
  config.options_json = c.config.value("kwargs", json::object()).dump();
  config.source = (c.case_dir / "config.json").string();
  return config;
}

bool procedure_mentions(const json& config, const std::string& text) {
  for (const json& line : config.value("procedure", json::array())) {
    if (line.is_string() && line.get<std::string>().find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Expected-error cases: NNI raises; Lithe must reject too, except where a departure makes
// Lithe accept the config (then Lithe's own rule is checked).
Verdict replay_expected_error(const CaseContext& c, const PluginRegistry& registry,
                              const std::string& algorithm) {
  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  const std::map<std::string, at::Tensor> weights_before = snapshot_weights(*model);
  std::string error;
  std::unique_ptr<PruningSession> session;
  try {
    session = std::make_unique<PruningSession>(*model, registry, case_compression_config(c, algorithm));
    session->compress();
  } catch (const sdk::Error& e) {
    error = e.what();
  }
  const std::string nni_message = c.summary.at("results").value("message", "");
  if (!error.empty()) {
    return {Outcome::kPass, "rejected: " + error};
  }
  // Departure 2: `exclude` is honoured by every pruner; NNI's Level/Slim schemas reject it.
  bool has_exclude = false;
  for (const json& entry : c.config.at("config_list")) {
    has_exclude = has_exclude || (entry.is_object() && entry.contains("exclude"));
  }
  if (!has_exclude) {
    fail("NNI rejects this config (" + nni_message.substr(0, 120) + ") but Lithe accepted it");
  }
  const ResolvedConfig resolved =
      resolve_config_list(c.config.at("config_list").dump(), "/config_list", *model);
  std::map<std::string, bool> excluded;
  for (const ModuleRecord& m : model->modules()) {
    excluded[m.name] = false;
  }
  for (const ConfigEntry& entry : resolved.entries) {
    if (entry.exclude) {
      for (const std::string& name : entry.op_names) {
        excluded[name] = true;
      }
    }
  }
  int checked = 0;
  for (const auto& [name, masks] : session->masks()) {
    if (excluded[name]) {
      fail("layer '" + name + "' is excluded but was pruned");
    }
    ++checked;
  }
  for (const auto& [name, is_excluded] : excluded) {
    if (is_excluded) {
      const ModuleRecord* record = model->find_module(name);
      if (record != nullptr && record->weight.has_value() &&
          !record->weight->equal(weights_before.at(name))) {
        fail("excluded layer '" + name + "' was changed by compression");
      }
    }
  }
  return {Outcome::kDeviation,
          "departure 2: NNI v2.0 rejects 'exclude' here; Lithe honours it (" +
              std::to_string(checked) + " layers pruned, excluded layers untouched)"};
}

Verdict replay_one_shot(const CaseContext& c, const PluginRegistry& registry,
                        const std::string& algorithm) {
  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  const std::map<std::string, at::Tensor> weights_before = snapshot_weights(*model);
  PruningSession session(*model, registry, case_compression_config(c, algorithm));
  session.compress();

  const json& expected_masks = c.summary.at("results").at("masks");
  std::map<std::string, sdk::Masks> ours;
  for (const auto& [name, m] : session.masks()) {
    ours[name] = m;
  }
  for (const auto& [name, m] : ours) {
    if (!expected_masks.contains(name)) {
      fail("Lithe pruned layer '" + name + "', which NNI did not select");
    }
  }
  std::vector<std::string> deviations;
  const bool global_k = algorithm == "slim";
  for (const auto& item : expected_masks.items()) {
    const std::string& name = item.key();
    const auto it = ours.find(name);
    if (it == ours.end()) {
      fail("NNI pruned layer '" + name + "', which Lithe did not select");
    }
    const at::Tensor& nni_weight = tensor(c, item.value().at("weight").get<std::string>());
    const at::Tensor& lithe_weight = it->second.weight;
    if (!lithe_weight.equal(nni_weight.to(lithe_weight.dtype()))) {
      const json& layer_config = item.value().at("config");
      const double sparsity = layer_config.value("sparsity", -1.0);
      const auto stat = c.tensors.find("stat." + name);
      const UnitView units =
          unit_view(lithe_weight, nni_weight.to(lithe_weight.dtype()), weights_before.at(name),
                    stat == c.tensors.end() ? nullptr : &stat->second);
      // Slim ranks channels of all layers together: its exact k is global (checked below).
      const int64_t k = global_k ? -1 : sdk::prune_count(units.lithe_pruned.numel(), sparsity);
      std::string detail;
      if (sparsity >= 0 && follows_exact_k(units, k, &detail) &&
          explained_by_tie_overpruning(units)) {
        const int64_t lithe_units = units.lithe_pruned.sum().item<int64_t>();
        deviations.push_back(name + " (NNI pruned " +
                             std::to_string(units.nni_pruned.sum().item<int64_t>()) + " of " +
                             std::to_string(units.lithe_pruned.numel()) + ", Lithe " +
                             std::to_string(lithe_units) + ")");
        continue;
      }
      const int64_t differing = lithe_weight.ne(nni_weight).sum().item<int64_t>();
      fail("layer '" + name + "': weight mask differs from NNI in " + std::to_string(differing) +
           " positions (NNI " + std::to_string(count_zeros(nni_weight)) + " zeros, Lithe " +
           std::to_string(count_zeros(lithe_weight)) + ")" +
           (detail.empty() ? "" : "; Lithe rule: " + detail));
    }
    const json& bias_key = item.value().at("bias");
    if (bias_key.is_string()) {
      if (!it->second.bias.has_value()) {
        fail("layer '" + name + "': NNI has a bias mask, Lithe none");
      }
      if (!it->second.bias->equal(tensor(c, bias_key.get<std::string>()))) {
        fail("layer '" + name + "': bias mask differs from NNI");
      }
    } else if (it->second.bias.has_value()) {
      fail("layer '" + name + "': Lithe has a bias mask, NNI none");
    }
  }

  if (global_k && !deviations.empty()) {
    // Exactly k = int(total * config_list[0].sparsity) channels over all selected layers.
    int64_t total = 0;
    int64_t pruned = 0;
    for (const auto& [name, m] : ours) {
      total += m.weight.numel();
      pruned += m.weight.eq(0).sum().item<int64_t>();
    }
    const double first_sparsity = c.config.at("config_list").at(0).value("sparsity", 0.0);
    const int64_t k = sdk::prune_count(total, first_sparsity);
    if (pruned != k) {
      fail("Lithe pruned " + std::to_string(pruned) + " of " + std::to_string(total) +
           " channels; its global rule requires exactly k=" + std::to_string(k));
    }
  }

  std::string detail;
  model->train(false);
  if (deviations.empty() && c.tensors.count("output") != 0) {
    at::NoGradGuard no_grad;
    const at::Tensor output = model->forward(tensor(c, "input"));
    if (!close_enough(output, tensor(c, "output"), &detail)) {
      fail("output of the pruned model differs from NNI: " + detail);
    }
  }

  // export_model: weights x masks and NNI's mask.pth layout.
  for (const auto& [key, value] : c.tensors) {
    if (key.rfind("exported.", 0) != 0) {
      continue;
    }
    const std::string param = key.substr(std::string("exported.").size());
    const size_t dot = param.rfind('.');
    const ModuleRecord* record = model->find_module(param.substr(0, dot));
    const std::string field = param.substr(dot + 1);
    if (record == nullptr || (field != "weight" && field != "bias") ||
        (field == "weight" && !record->weight) || (field == "bias" && !record->bias)) {
      continue;  // not a compressed layer's tensor; nothing Lithe changes
    }
    const at::Tensor& mine = field == "weight" ? *record->weight : *record->bias;
    if (deviations.empty() && !mine.equal(value)) {
      fail("exported tensor '" + param + "' differs from NNI's model.pth");
    }
  }
  const fs::path nni_mask_file = c.case_dir / "mask.pth";
  std::error_code ec;
  if (fs::is_regular_file(nni_mask_file, ec)) {
    const NamedMasks nni_masks = load_masks(nni_mask_file);
    const NamedMasks round_trip =
        deserialize_masks(serialize_masks(session.masks()), "<lithe masks>");
    if (nni_masks.size() != round_trip.size()) {
      fail("mask file: NNI has " + std::to_string(nni_masks.size()) + " layers, Lithe " +
           std::to_string(round_trip.size()));
    }
    for (size_t i = 0; i < nni_masks.size(); ++i) {
      const auto& [name, nni] = nni_masks[i];
      const auto match = std::find_if(round_trip.begin(), round_trip.end(),
                                      [&](const auto& entry) { return entry.first == name; });
      if (match == round_trip.end()) {
        fail("mask file: layer '" + name + "' missing from Lithe's masks");
      }
      if (nni.bias.has_value() != match->second.bias.has_value()) {
        fail("mask file: layer '" + name + "': bias None in one file but not the other");
      }
      if (deviations.empty() && !nni.weight.equal(match->second.weight)) {
        fail("mask file: layer '" + name + "': weight mask differs");
      }
      if (nni.bias.has_value() && !nni.bias->equal(*match->second.bias)) {
        fail("mask file: layer '" + name + "': bias mask differs");
      }
    }
    if (c.tensors.count("output_apply_compression_results") != 0) {
      torch::jit::Module fresh_module = load_case_model(c);
      auto fresh = make_torchscript_model(fresh_module);
      apply_compression_results(*fresh, nni_mask_file);
      fresh->train(false);
      at::NoGradGuard no_grad;
      const at::Tensor output = fresh->forward(tensor(c, "input"));
      if (!close_enough(output, tensor(c, "output_apply_compression_results"), &detail)) {
        fail("apply_compression_results output differs from NNI: " + detail);
      }
    }
  }

  if (!deviations.empty()) {
    std::string list;
    for (const std::string& d : deviations) {
      list += (list.empty() ? "" : ", ") + d;
    }
    return {Outcome::kDeviation,
            "departure 1: NNI over-prunes weights tied at its threshold; Lithe prunes exactly k "
            "with ties broken by index: " + list};
  }
  return {Outcome::kPass, std::to_string(ours.size()) + " layers match NNI"};
}

Verdict replay_case(const CaseContext& c, const PluginRegistry& registry) {
  if (c.config.contains("api") && !c.config["api"].is_null()) {
    const std::string api = c.config["api"].is_string() ? c.config["api"].get<std::string>()
                                                        : c.config["api"].dump();
    if (api.find("export") == std::string::npos && api.find("apply") == std::string::npos) {
      unsupported("NNI API '" + api + "' has no Lithe replay yet");
    }
  }
  const std::string nni_algorithm = c.config.value("algorithm", "");
  const std::string algorithm = lithe_algorithm_for(nni_algorithm);
  if (algorithm.empty()) {
    unsupported("NNI algorithm '" + nni_algorithm + "' has no Lithe counterpart yet");
  }
  if (registry.find(AlgorithmKind::kPruner, algorithm) == nullptr) {
    unsupported("no loaded plugin provides pruner '" + algorithm + "' (for " + nni_algorithm + ")");
  }
  if (procedure_mentions(c.config, "must raise")) {
    return replay_expected_error(c, registry, algorithm);
  }
  const bool one_shot = procedure_mentions(c.config, ".compress()") &&
                        !procedure_mentions(c.config, "update_epoch") &&
                        !procedure_mentions(c.config, "optimizer") &&
                        !procedure_mentions(c.config, "statistics") &&
                        !procedure_mentions(c.config, "dummy_input");
  if (!one_shot) {
    unsupported("the replay of this procedure (schedules, data, dependency analysis) is not "
                "implemented yet");
  }
  return replay_one_shot(c, registry, algorithm);
}

}  // namespace

const char* outcome_name(CaseResult::Outcome outcome) {
  switch (outcome) {
    case Outcome::kPass: return "PASS";
    case Outcome::kDeviation: return "DEVIATION";
    case Outcome::kFail: return "FAIL";
    case Outcome::kUnsupported: return "UNSUPPORTED";
  }
  return "FAIL";
}

std::string lithe_algorithm_for(const std::string& nni_algorithm) {
  static const std::map<std::string, std::string> names = {
      {"LevelPruner", "level"},
      {"L1FilterPruner", "l1_filter"},
      {"L2FilterPruner", "l2_filter"},
      {"FPGMPruner", "fpgm"},
      {"SlimPruner", "slim"},
      {"TaylorFOWeightFilterPruner", "taylor_fo"},
      {"ActivationAPoZRankFilterPruner", "apoz"},
      {"ActivationMeanRankFilterPruner", "mean_activation"},
      {"AGPPruner", "agp"},
      {"LotteryTicketPruner", "lottery_ticket"},
  };
  const auto it = names.find(nni_algorithm);
  return it == names.end() ? std::string() : it->second;
}

ConformanceSummary run_conformance(const fs::path& golden_dir, const PluginRegistry& registry,
                                   const std::string& filter,
                                   const std::function<void(const CaseResult&)>& on_case) {
  std::error_code ec;
  LITHE_CHECK(fs::is_directory(golden_dir, ec), sdk::Errc::kIo, "golden folder '",
              golden_dir.string(), "' does not exist or is not a directory");
  std::vector<fs::path> case_dirs;
  if (fs::is_regular_file(golden_dir / "config.json", ec)) {
    case_dirs.push_back(golden_dir);
  } else {
    for (const auto& item : fs::directory_iterator(golden_dir, ec)) {
      if (item.is_directory() && fs::is_regular_file(item.path() / "config.json")) {
        case_dirs.push_back(item.path());
      }
    }
  }
  std::sort(case_dirs.begin(), case_dirs.end());
  LITHE_CHECK(!case_dirs.empty(), sdk::Errc::kIo, "golden folder '", golden_dir.string(),
              "' holds no case (no config.json in it or its subfolders)");
  const fs::path root =
      case_dirs.size() == 1 && case_dirs[0] == golden_dir ? golden_dir.parent_path() : golden_dir;

  ConformanceSummary summary;
  for (const fs::path& case_dir : case_dirs) {
    const std::string name = case_dir.filename().string();
    if (!filter.empty() && name.find(filter) == std::string::npos) {
      continue;
    }
    CaseResult result;
    result.name = name;
    try {
      CaseContext c;
      c.golden_dir = root;
      c.case_dir = case_dir;
      c.config = json::parse(read_file(case_dir / "config.json"));
      c.summary = json::parse(read_file(case_dir / "summary.json"));
      const json tensors_file = c.config.value("tensors_file", json());
      if (tensors_file.is_string()) {
        c.tensors = load_tensor_dict(case_dir / tensors_file.get<std::string>());
      }
      const Verdict verdict = replay_case(c, registry);
      result.outcome = verdict.outcome;
      result.reason = verdict.reason;
    } catch (const Verdict& verdict) {
      result.outcome = verdict.outcome;
      result.reason = verdict.reason;
    } catch (const std::exception& e) {
      const std::string message = e.what();
      result.outcome = Outcome::kFail;
      result.reason = message.substr(0, message.find('\n'));
    }
    switch (result.outcome) {
      case Outcome::kPass: ++summary.passed; break;
      case Outcome::kDeviation: ++summary.passed; ++summary.deviations; break;
      case Outcome::kFail: ++summary.failed; break;
      case Outcome::kUnsupported: ++summary.skipped; break;
    }
    summary.cases.push_back(result);
    if (on_case) {
      on_case(result);
    }
  }
  return summary;
}

}  // namespace lithe::host
