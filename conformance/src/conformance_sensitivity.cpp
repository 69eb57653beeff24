// Replays of NNI's SensitivityAnalysis cases: Lithe's analyse_sensitivity with the pruner that
// declares itself NNI's class for the case's prune_type, the case's sparsities and early stop,
// and NNI's val_func (minus the mean cross-entropy on the recorded batch, eval mode). Every
// (layer, sparsity) NNI reached must be reached, no other, with the same metric (tolerance: the
// goldens used another BLAS), and the CSV's header must be NNI's.
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "conformance_case.h"
#include "lithe/host/pipeline/sensitivity_analysis.h"

namespace lithe::host::conformance_detail {
namespace {

// NNI's PRUNER_DICT (constants_pruner.py): SensitivityAnalysis's prune_type -> pruner class.
std::string nni_class_of(const std::string& prune_type) {
  static const std::map<std::string, std::string> classes = {
      {"level", "LevelPruner"},  // nni-name: NNI's prune_type vocabulary
      {"l1", "L1FilterPruner"},
      {"l2", "L2FilterPruner"},
      {"fpgm", "FPGMPruner"}};  // nni-name: NNI's prune_type vocabulary
  const auto it = classes.find(prune_type);
  if (it == classes.end()) {
    unsupported("SensitivityAnalysis prune_type '" + prune_type + "' is not one of NNI's");
  }
  return it->second;
}

SensitivityStop stop_mode(const json& kwargs) {
  const json mode = kwargs.value("early_stop_mode", json());
  if (mode.is_null()) {
    return SensitivityStop::kNone;
  }
  const std::string name = mode.get<std::string>();
  if (name == "minimize") return SensitivityStop::kMinimize;
  if (name == "maximize") return SensitivityStop::kMaximize;
  if (name == "dropped") return SensitivityStop::kDropped;
  if (name == "raised") return SensitivityStop::kRaised;
  unsupported("SensitivityAnalysis early_stop_mode '" + name + "' is not one of NNI's");
}

}  // namespace

Verdict replay_sensitivity(const CaseContext& c, const PluginRegistry& registry) {
  if (c.config.value("metric", "") != "negative_cross_entropy") {
    unsupported("the case's metric '" + c.config.value("metric", "") + "' has no replay");
  }
  const json& kwargs = c.config.at("kwargs");
  const std::string nni_class = nni_class_of(kwargs.value("prune_type", "l1"));
  const NniCounterpartEntry* entry = registry.find_nni_counterpart(nni_class);
  if (entry == nullptr) {
    unsupported("no loaded plugin declares NNI class '" + nni_class + "'");
  }
  SensitivityOptions options;
  options.algorithm = entry->counterpart.algorithm;
  if (kwargs.contains("sparsities")) {
    options.sparsities = kwargs.at("sparsities").get<std::vector<double>>();
  }
  options.stop = stop_mode(kwargs);
  options.stop_value = kwargs.value("early_stop_value", 0.0);

  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  const at::Tensor& batch = tensor(c, "batch.0");
  const at::Tensor& labels = tensor(c, "labels.0");
  const auto weights_before = snapshot_weights(*model);
  const auto metric = [&](const std::string& /*layer*/) {
    model->train(false);
    at::NoGradGuard no_grad;
    return -torch::nn::functional::cross_entropy(model->forward(batch), labels).item<double>();
  };
  const SensitivityResult ours = analyse_sensitivity(*model, registry, options, metric);

  const json& results = c.summary.at("results");
  std::string detail;
  if (!close_enough(at::tensor(ours.original, at::kDouble),
                    at::tensor(results.at("original").get<double>(), at::kDouble), &detail)) {
    fail("the original metric differs from NNI's: " + detail);
  }
  const json& nni = results.at("sensitivities");
  if (nni.size() != ours.rows.size()) {
    fail("NNI analysed " + std::to_string(nni.size()) + " layers, Lithe " +
         std::to_string(ours.rows.size()));
  }
  int64_t compared = 0;
  for (const SensitivityRow& row : ours.rows) {
    if (!nni.contains(row.layer)) {
      fail("Lithe analysed layer '" + row.layer + "', which NNI did not");
    }
    const json& theirs = nni.at(row.layer);
    if (theirs.size() != row.metrics.size()) {
      fail("layer '" + row.layer + "': NNI reached " + std::to_string(theirs.size()) +
           " sparsities (early stop), Lithe " + std::to_string(row.metrics.size()));
    }
    for (size_t i = 0; i < row.metrics.size(); ++i) {
      const double sparsity = theirs.at(i).at(0).get<double>();
      const double value = theirs.at(i).at(1).get<double>();
      if (sparsity != row.metrics[i].first) {
        fail("layer '" + row.layer + "': sparsity " + std::to_string(row.metrics[i].first) +
             " where NNI has " + std::to_string(sparsity));
      }
      if (!close_enough(at::tensor(row.metrics[i].second, at::kDouble),
                        at::tensor(value, at::kDouble), &detail)) {
        fail("layer '" + row.layer + "' at sparsity " + std::to_string(sparsity) +
             ": the metric differs from NNI's: " + detail);
      }
      ++compared;
    }
  }
  // The model is left as it came.
  for (const auto& [name, weight] : snapshot_weights(*model)) {
    if (!weight.equal(weights_before.at(name))) {
      fail("the analysis left layer '" + name + "' changed");
    }
  }
  // NNI's CSV header (the rows' numbers carry the BLAS difference, compared above).
  std::ifstream nni_csv(c.case_dir / "sensitivity.csv");
  std::string nni_header;
  if (nni_csv && std::getline(nni_csv, nni_header)) {
    if (!nni_header.empty() && nni_header.back() == '\r') {
      nni_header.pop_back();  // Python's csv module ends rows with \r\n
    }
    const std::string csv = sensitivity_csv(ours);
    const std::string header = csv.substr(0, csv.find('\n'));
    if (header != nni_header) {
      fail("CSV header '" + header + "' differs from NNI's '" + nni_header + "'");
    }
  }
  return {Outcome::kPass, std::to_string(compared) + " (layer, sparsity) metrics of " +
                              std::to_string(ours.rows.size()) + " layers match NNI"};
}

}  // namespace lithe::host::conformance_detail
