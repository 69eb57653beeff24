// Replays of NNI's pruners that train while they compress (ADMM). The case records everything
// the training depends on: the batches and labels of an epoch (the same every epoch, in order),
// NNI's optimizer and loss (config.json `trainer`). The session's fine-tuner, which the plugin
// calls from attach() (SDK 1.7 fine_tune), runs NNI's documented trainer over those batches:
// zero_grad, cross-entropy plus the session's loss terms, backward, session.optimizer_step (the
// before-step callbacks, i.e. ADMM's proximal step, then the step), with one optimizer kept
// across all calls as NNI keeps its one Adam across ADMM iterations. Then the trained weights
// (tolerance: other BLAS), the final masks (exact) and the pruned model's output are compared.
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "conformance_case.h"

namespace lithe::host::conformance_detail {
// NNI's optimizer as the case spells it; only what the recorded cases use.
std::unique_ptr<torch::optim::Optimizer> case_optimizer(const json& trainer,
                                                        std::vector<at::Tensor> params) {
  const std::string name = trainer.value("optimizer", "");
  if (name == "Adam") {
    return std::make_unique<torch::optim::Adam>(
        std::move(params), torch::optim::AdamOptions(trainer.at("lr").get<double>())
                               .weight_decay(trainer.value("weight_decay", 0.0)));
  }
  if (name == "SGD") {
    return std::make_unique<torch::optim::SGD>(
        std::move(params), torch::optim::SGDOptions(trainer.at("lr").get<double>())
                               .momentum(trainer.value("momentum", 0.0))
                               .weight_decay(trainer.value("weight_decay", 0.0)));
  }
  unsupported("the case trains with optimizer '" + name + "', which this replay does not know");
}

Verdict replay_training(const CaseContext& c, const PluginRegistry& registry,
                        const std::string& algorithm) {
  if (!c.config.contains("trainer") || !c.config["trainer"].is_object()) {
    unsupported("the case records no `trainer` (optimizer, loss, batches per epoch)");
  }
  const json& trainer = c.config["trainer"];
  if (trainer.value("loss", "") != "cross_entropy") {
    unsupported("the case's loss '" + trainer.value("loss", "") + "' is not cross_entropy");
  }
  const int64_t batches = trainer.at("batches_per_epoch").get<int64_t>();
  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  PruningSession session(*model, registry, case_compression_config(c, algorithm));
  const std::unique_ptr<torch::optim::Optimizer> optimizer =
      case_optimizer(trainer, model->parameters());
  std::map<std::string, at::Tensor> trained;  // the weights as the last fine-tune left them
  int64_t epochs_run = 0;
  session.set_fine_tuner([&](int64_t epochs) {
    model->train(trainer.value("mode", "train") == "train");
    for (int64_t e = 0; e < epochs; ++e) {
      for (int64_t s = 0; s < batches; ++s) {
        optimizer->zero_grad();
        at::Tensor loss = torch::nn::functional::cross_entropy(
            model->forward(tensor(c, "batch." + std::to_string(s))),
            tensor(c, "labels." + std::to_string(s)));
        const at::Tensor terms = session.loss_terms();
        if (terms.defined()) {
          loss = loss + terms;
        }
        loss.backward();
        session.optimizer_step(*optimizer);
      }
    }
    epochs_run += epochs;
    trained = snapshot_weights(*model);
  });
  session.compress();
  if (epochs_run == 0) {
    fail("the algorithm never asked the host to train (NNI's trainer ran)");
  }
  const json& masks = c.summary.at("results").at("masks");
  for (const auto& item : masks.items()) {
    const std::string key = "trained." + item.key();
    std::string detail;
    if (c.tensors.count(key) != 0 && trained.count(item.key()) != 0 &&
        !close_enough(trained.at(item.key()), tensor(c, key), &detail)) {
      fail("layer '" + item.key() + "': the weights after " + std::to_string(epochs_run) +
           " epochs of training differ from NNI's: " + detail);
    }
  }
  const std::string deviation =
      final_masks_deviation(c, session.masks(), trained, /*global_k=*/false);
  if (deviation.empty() && c.tensors.count("output") != 0) {
    model->train(false);
    at::NoGradGuard no_grad;
    std::string detail;
    if (!close_enough(model->forward(tensor(c, "input")), tensor(c, "output"), &detail)) {
      fail("output of the pruned model differs from NNI: " + detail);
    }
  }
  if (!deviation.empty()) {
    return {Outcome::kDeviation, deviation};
  }
  return {Outcome::kPass, std::to_string(session.masks().size()) + " layers match NNI after " +
                              std::to_string(epochs_run) + " epochs of training"};
}

}  // namespace lithe::host::conformance_detail
