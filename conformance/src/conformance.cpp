// NNI golden-case runner: finds the cases, dispatches each to its replay, and replays the
// one-shot pruning cases (compress(), dependency-aware included; optional export_model and
// apply_compression_results) and the expected-error cases itself. Schedules (AGP, Lottery
// Ticket), pruners that train (ADMM), data-driven pruners, quantizers, FLOPs counting and speedup have their own files.
#include "lithe/conformance/conformance.h"
#include "lithe/host/io/json_document.h"

#include <algorithm>
#include <map>

#include "conformance_case.h"
#include "lithe/host/model/apply_compression_results.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/filter_pruning.h"
#include "lithe/sdk/pruner.h"

namespace lithe::host {
namespace {

using namespace conformance_detail;  // NOLINT(google-build-using-namespace): internal helpers

// Departure 6: Lithe's filter pruners (L1/L2, FPGM, TaylorFO) also prune Conv1d, Conv3d and
// Linear, whose filters are weight rows (NNI 2.5's L1NormPruner prunes Linear too); NNI v2.0's
// schema accepts op_types ["Conv2d"] only. Lithe's rule is checked instead: every selected layer
// is one of those types and prunes exactly int(F * sparsity) whole filters.
Verdict replay_accepted_filter_types(const CaseContext& c, const PruningSession& session,
                                     const std::string& nni_message) {
  bool filter_types = false;
  for (const json& entry : c.config.at("config_list")) {
    if (!entry.is_object() || !entry.contains("op_types") || !entry.contains("sparsity")) {
      continue;
    }
    for (const json& type : entry.at("op_types")) {
      // Any type the SDK's filter framework prunes beyond NNI v2.0's Conv2d.
      const auto& known = sdk::filter_op_types();
      filter_types = filter_types || (type.is_string() && type.get<std::string>() != "Conv2d" &&
                                      std::find(known.begin(), known.end(),
                                                type.get<std::string>()) != known.end());
    }
  }
  const std::string nni_class = c.config.value("algorithm", "");
  if (!filter_types || nni_class.find("Filter") == std::string::npos) {
    fail("NNI rejects this config (" + nni_message.substr(0, 120) + ") but Lithe accepted it");
  }
  const double sparsity = c.config.at("config_list").at(0).at("sparsity").get<double>();
  int checked = 0;
  for (const auto& [name, masks] : session.masks()) {
    const at::Tensor rows = masks.weight.reshape({masks.weight.size(0), -1});
    const int64_t filters = rows.size(0);
    const int64_t pruned = rows.eq(0).all(1).sum().item<int64_t>();
    const int64_t zeros = rows.eq(0).sum().item<int64_t>();
    if (pruned != sdk::prune_count(filters, sparsity) || zeros != pruned * rows.size(1)) {
      fail("layer '" + name + "': " + std::to_string(pruned) + " of " +
           std::to_string(filters) + " filters pruned (and " + std::to_string(zeros) +
           " zero weights), want exactly int(F * sparsity) whole filters");
    }
    ++checked;
  }
  if (checked == 0) {
    fail("Lithe accepted the config but pruned no layer");
  }
  return {Outcome::kDeviation,
          "departure 6: NNI v2.0 prunes Conv2d filters only; Lithe also prunes Linear/Conv1d/"
          "Conv3d filters (" + std::to_string(checked) +
              " layers, each exactly int(F * sparsity) whole filters)"};
}

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
    return replay_accepted_filter_types(c, *session, nni_message);
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
                        const std::string& algorithm, bool global_k) {
  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  const std::map<std::string, at::Tensor> weights_before = snapshot_weights(*model);
  PruningSession session(*model, registry, case_compression_config(c, algorithm));
  session.compress();

  const std::string deviation =
      final_masks_deviation(c, session.masks(), weights_before, global_k);
  std::string detail;
  model->train(false);
  if (deviation.empty() && c.tensors.count("output") != 0) {
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
    if (deviation.empty() && !mine.equal(value)) {
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
      if (deviation.empty() && !nni.weight.equal(match->second.weight)) {
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

  if (!deviation.empty()) {
    return {Outcome::kDeviation, deviation};
  }
  return {Outcome::kPass, std::to_string(session.masks().size()) + " layers match NNI"};
}

Verdict replay_case(const CaseContext& c, const PluginRegistry& registry) {
  if (c.config.value("algorithm", "") == "count_flops_params" ||
      c.config.value("api", json()).dump().find("count_flops_params") != std::string::npos) {
    return replay_flops(c, registry);
  }
  if (c.config.value("api", json()).dump().find("ModelSpeedup") != std::string::npos) {
    return replay_speedup(c);
  }
  if (c.config.value("api", json()) == "SensitivityAnalysis") {
    return replay_sensitivity(c, registry);
  }
  if (c.config.contains("api") && !c.config["api"].is_null()) {
    const std::string api = c.config["api"].is_string() ? c.config["api"].get<std::string>()
                                                        : c.config["api"].dump();
    if (api.find("export") == std::string::npos && api.find("apply") == std::string::npos) {
      unsupported("NNI API '" + api + "' has no Lithe replay yet");
    }
  }
  // Which algorithm reproduces the case's NNI class, and how to replay it, is declared by the
  // plugin (sdk::Registry::add_nni_counterpart): this runner knows procedures, not plugins.
  const std::string nni_class = c.config.value("algorithm", "");
  const NniCounterpartEntry* entry = registry.find_nni_counterpart(nni_class);
  if (entry == nullptr) {
    unsupported("no loaded plugin declares NNI class '" + nni_class + "'");
  }
  const std::string& algorithm = entry->counterpart.algorithm;
  const std::string& replay = entry->counterpart.replay;
  const bool quantizer = entry->kind == AlgorithmKind::kQuantizer;
  if (quantizer && replay == "eval_forwards") {
    return replay_eval_forwards(c, registry, algorithm);
  }
  if (quantizer && replay == "training_steps") {
    return replay_qat(c, registry, algorithm);
  }
  if (!quantizer && procedure_mentions(c.config, "must raise")) {
    return replay_expected_error(c, registry, algorithm);
  }
  if (!quantizer && replay == "epoch_schedule") {
    return replay_agp(c, registry, algorithm);
  }
  if (!quantizer && replay == "training_batches") {
    return replay_training(c, registry, algorithm);
  }
  if (!quantizer && replay == "evaluator_search") {
    return replay_evaluator_search(c, registry, algorithm);
  }
  if (!quantizer && replay == "rewind_rounds") {
    return replay_lottery_ticket(c, registry, algorithm);
  }
  if (!quantizer && (replay == "activation_statistics" || replay == "gradient_statistics")) {
    return replay_data_driven(c, registry, algorithm, replay == "gradient_statistics");
  }
  if (!quantizer && (replay == "one_shot" || replay == "one_shot_global")) {
    const bool one_shot = procedure_mentions(c.config, ".compress()") &&
                          !procedure_mentions(c.config, "update_epoch") &&
                          !procedure_mentions(c.config, "optimizer") &&
                          !procedure_mentions(c.config, "statistics");
    if (!one_shot) {
      unsupported("no replay for this procedure: " +
                  c.config.value("procedure", json::array()).dump().substr(0, 160));
    }
    return replay_one_shot(c, registry, algorithm, /*global_k=*/replay == "one_shot_global");
  }
  unsupported(std::string(algorithm_kind_name(entry->kind)) + " '" + algorithm +
              "' (plugin '" + entry->plugin + "') declares replay '" + replay + "' for " +
              nni_class + ", which this runner does not know");
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
      c.config = read_json_document(case_dir / "config.json");
      c.summary = read_json_document(case_dir / "summary.json");
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
