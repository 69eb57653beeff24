// Replays of NNI's search pruners that score candidates with an evaluator
// (SimulatedAnnealingPruner, NetAdaptPruner). The case records the evaluator's batch, every
// candidate's metric in order (the search's whole path) and the final masks; a random search
// also NumPy's seed (the plugin's `seed` option: it draws NumPy's numbers), one that fine-tunes
// candidates its trainer (`trainer`: NNI's optimizer, fresh for every call when
// `optimizer_per_call`, over the recorded batches). The session's evaluator computes NNI's
// metric on the recorded batch. Checked: the same number of candidates with the same metrics
// in the same order, then the final masks (exact) and the pruned output.
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "conformance_case.h"

namespace lithe::host::conformance_detail {

Verdict replay_evaluator_search(const CaseContext& c, const PluginRegistry& registry,
                                const std::string& algorithm) {
  if (c.config.value("metric", "") != "negative_cross_entropy") {
    unsupported("the case's metric '" + c.config.value("metric", "") +
                "' is not negative_cross_entropy");
  }
  json options = c.config.value("kwargs", json::object());
  options.erase("experiment_data_dir");  // NNI's output folder: Lithe logs instead
  if (c.config.contains("seed")) {
    options["seed"] = c.config.at("seed");
  }
  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  const auto weights_before = snapshot_weights(*model);
  PruningSession session(*model, registry,
                         make_compression_config(algorithm, c.config.at("config_list").dump(),
                                                 options.dump(),
                                                 (c.case_dir / "config.json").string()));
  if (c.config.contains("trainer")) {
    const json& trainer = c.config.at("trainer");
    if (trainer.value("loss", "") != "cross_entropy" ||
        !trainer.value("optimizer_per_call", false)) {
      unsupported("the case's trainer is not a fresh optimizer per call with cross_entropy");
    }
    session.set_fine_tuner([&, trainer](int64_t epochs) {
      const std::unique_ptr<torch::optim::Optimizer> optimizer =
          case_optimizer(trainer, model->parameters());
      model->train(trainer.value("mode", "train") == "train");
      const int64_t batches = trainer.at("batches_per_epoch").get<int64_t>();
      for (int64_t e = 0; e < epochs; ++e) {
        for (int64_t s = 0; s < batches; ++s) {
          optimizer->zero_grad();
          const std::string index = "." + std::to_string(s);
          torch::nn::functional::cross_entropy(
              model->forward(tensor(c, trainer.at("batch").get<std::string>() + index)),
              tensor(c, trainer.at("labels").get<std::string>() + index))
              .backward();
          session.optimizer_step(*optimizer);
        }
      }
    });
  }
  std::vector<double> metrics;
  session.set_evaluator([&] {
    model->train(false);
    at::NoGradGuard no_grad;
    const double metric =
        -torch::nn::functional::cross_entropy(model->forward(tensor(c, "batch.0")),
                                              tensor(c, "labels.0"))
             .item<double>();
    metrics.push_back(metric);
    return metric;
  });
  session.compress();

  const json& results = c.summary.at("results");
  const std::vector<double> history = results.at("history").get<std::vector<double>>();
  for (size_t k = 0; k < std::min(history.size(), metrics.size()); ++k) {
    std::string detail;
    if (!close_enough(at::tensor(metrics[k], at::kDouble), at::tensor(history[k], at::kDouble),
                      &detail)) {
      fail("candidate " + std::to_string(k + 1) + ": Lithe's metric differs from NNI's (the "
           "search took another path): " + detail);
    }
  }
  if (metrics.size() != history.size()) {
    fail("Lithe evaluated " + std::to_string(metrics.size()) + " candidates, NNI " +
         std::to_string(history.size()));
  }
  const std::string deviation =
      final_masks_deviation(c, session.masks(), weights_before, /*global_k=*/false);
  if (!deviation.empty()) {
    return {Outcome::kDeviation, deviation};
  }
  if (c.tensors.count("output") != 0) {
    model->train(false);
    at::NoGradGuard no_grad;
    std::string detail;
    if (!close_enough(model->forward(tensor(c, "input")), tensor(c, "output"), &detail)) {
      fail("output of the pruned model differs from NNI: " + detail);
    }
  }
  return {Outcome::kPass, std::to_string(metrics.size()) + " candidates on NNI's path, " +
                              std::to_string(session.masks().size()) + " layers match NNI"};
}

}  // namespace lithe::host::conformance_detail
