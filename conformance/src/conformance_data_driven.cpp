// Replays of NNI's data-driven filter pruner cases. Activation pruners (APoZ, mean activation):
// compress() finds no statistics yet and changes nothing; the model then runs eval-mode
// forwards over the recorded batches; the next mask update prunes. TaylorFO: SGD with lr 0 over
// the recorded batches (cross-entropy, backward, optimizer step); the masks appear at the step
// after the statistics_batch_num-th, as NNI's recorded timeline says. Dependency-aware variants
// are checked against departure 5 where they differ from NNI.
#include <torch/torch.h>

#include <string>

#include "conformance_case.h"
#include "lithe/sdk/error.h"

namespace lithe::host::conformance_detail {
namespace {

int64_t total_zeros(const PruningSession& session) {
  int64_t zeros = 0;
  for (const auto& [name, masks] : session.masks()) {
    zeros += count_zeros(masks.weight);
  }
  return zeros;
}

// batch.0, batch.1, ... as recorded.
int64_t batch_count(const CaseContext& c) {
  int64_t n = 0;
  while (c.tensors.count("batch." + std::to_string(n)) != 0) {
    ++n;
  }
  if (n == 0) {
    fail("the case records no statistics batch (batch.0)");
  }
  return n;
}

void replay_activation_statistics(const CaseContext& c, Model& model, PruningSession& session) {
  session.compress();
  if (total_zeros(session) != 0) {
    fail("compress() pruned before any activation was observed (NNI: masks stay all ones)");
  }
  model.train(false);
  {
    at::NoGradGuard no_grad;
    const int64_t batches = batch_count(c);
    for (int64_t i = 0; i < batches; ++i) {
      model.forward(tensor(c, "batch." + std::to_string(i)));
    }
  }
  session.update_masks();
}

void replay_taylor_steps(const CaseContext& c, Model& model, PruningSession& session) {
  session.compress();
  auto params = model.parameters();
  torch::optim::SGD optimizer(params, torch::optim::SGDOptions(0.0));
  const json& timeline = c.summary.at("results").at("timeline");
  const int64_t steps = batch_count(c);
  for (int64_t s = 0; s < steps; ++s) {
    optimizer.zero_grad();
    const at::Tensor logits = model.forward(tensor(c, "batch." + std::to_string(s)));
    torch::nn::functional::cross_entropy(logits, tensor(c, "labels." + std::to_string(s)))
        .backward();
    session.optimizer_step(optimizer);
    // timeline[0] is compress(); timeline[s + 1] the state after step s + 1.
    const json& event = timeline.at(static_cast<size_t>(s) + 1);
    int64_t nni_zeros = 0;
    for (const json& z : event.at("masks_zeros")) {
      nni_zeros += z.get<int64_t>();
    }
    const bool nni_pruned = nni_zeros > 0;
    if ((total_zeros(session) > 0) != nni_pruned) {
      fail("after optimizer step " + std::to_string(s + 1) + " Lithe " +
           (nni_pruned ? "has not pruned yet" : "already pruned") + "; NNI's masks " +
           (nni_pruned ? "appear" : "do not appear yet") + " at this step");
    }
  }
}

}  // namespace

Verdict replay_data_driven(const CaseContext& c, const PluginRegistry& registry,
                           const std::string& algorithm, bool gradients) {
  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  const auto weights_before = snapshot_weights(*model);
  PruningSession session(*model, registry, case_compression_config(c, algorithm));
  if (gradients) {
    replay_taylor_steps(c, *model, session);
  } else {
    replay_activation_statistics(c, *model, session);
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
  return {Outcome::kPass, std::to_string(session.masks().size()) + " layers match NNI"};
}

}  // namespace lithe::host::conformance_detail
