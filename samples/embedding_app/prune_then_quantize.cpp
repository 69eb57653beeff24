// An application that trains with its own loop and uses Lithe for the compression only: AGP
// prunes LeNet's Conv2d and Linear weights to 80% over three epochs, then quantization-aware
// training (QAT, 8-bit weights and outputs) fine-tunes the pruned model with its masks kept,
// and the result is saved. Plugins are found with no settings (beside the liblithe_host the
// program runs with); the configs are written in code.
//
// The loop follows Lithe's own-loop contract (README "Your own training loop"):
//   per epoch:  session.update_epoch(epoch)
//   per batch:  forward, loss.backward(), session.optimizer_step(optimizer), session.step()
//   at the end: session.end_of_data()
//
// usage: prune_then_quantize MODEL.pt OUTPUT.pt [--misuse optimizer-step|no-update-epoch]
//   --misuse shows what happens when the contract is broken: the optimizer stepped directly
//   (optimizer.step() instead of session.optimizer_step) or update_epoch never called. Both
//   are reported and the program exits 1; without the checks they would end at sparsity 0.
// Exit status 0 when every layer has exactly int(n * 0.8) zero weights after both phases.
//
// The data are synthetic so that the sample runs anywhere: 28x28 images whose label is the
// larger of ten fixed random projections. Replace make_data() with your own loader.
#include <lithe/host/model/model.h>
#include <lithe/host/runtime/plugin_loader.h>
#include <lithe/host/session/compression_config.h>
#include <lithe/host/session/pruning_session.h>
#include <lithe/host/session/quantization_session.h>
#include <lithe/sdk/error.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>

namespace {

constexpr double kSparsity = 0.8;
constexpr int64_t kBatch = 32;

std::pair<at::Tensor, at::Tensor> make_data(int64_t samples) {
  torch::manual_seed(0);
  const at::Tensor images = torch::randn({samples, 1, 28, 28});
  const at::Tensor projection = torch::randn({28 * 28, 10});
  const at::Tensor labels = images.reshape({samples, -1}).matmul(projection).argmax(1);
  return {images, labels};
}

enum class Misuse { kNone, kOptimizerStep, kNoUpdateEpoch };

// One epoch of the application's own loop. `session` is the compression session of the
// phase; `keep_masks`, when given, re-applies the pruning masks after each step (QAT phase).
template <class Session>
double train_epoch(lithe::host::Model& model, Session& session, torch::optim::SGD& optimizer,
                   const at::Tensor& images, const at::Tensor& labels, Misuse misuse,
                   lithe::host::PruningSession* keep_masks = nullptr) {
  model.train(true);
  double loss_sum = 0;
  for (int64_t start = 0; start < images.size(0); start += kBatch) {
    const int64_t n = std::min(kBatch, images.size(0) - start);
    optimizer.zero_grad();
    const at::Tensor loss = torch::nn::functional::cross_entropy(
        model.forward(images.narrow(0, start, n)), labels.narrow(0, start, n));
    loss.backward();
    if (misuse == Misuse::kOptimizerStep) {
      optimizer.step();  // wrong: the session cannot update or re-apply its masks
    } else {
      session.optimizer_step(optimizer);
    }
    if (keep_masks != nullptr) {
      keep_masks->apply_masks();  // pruned weights stay exactly zero while QAT trains
    }
    session.step();
    loss_sum += loss.item<double>() * static_cast<double>(n);
  }
  return loss_sum / static_cast<double>(images.size(0));
}

// Counts the zeros of the live weights (not of the masks) of every layer the session prunes.
bool exact_sparsity(const lithe::host::Model& model, const lithe::host::PruningSession& session,
                    const char* phase) {
  bool exact = true;
  int64_t zeros = 0;
  int64_t total = 0;
  for (const auto& layer : session.report()) {
    for (const auto& module : model.modules()) {
      if (module.name != layer.name || !module.weight) {
        continue;
      }
      const int64_t numel = module.weight->numel();
      const int64_t now = module.weight->eq(0).sum().item<int64_t>();
      const auto expected = static_cast<int64_t>(static_cast<double>(numel) * kSparsity);
      std::cout << phase << ": " << layer.name << " " << now << " of " << numel
                << " weights are zero (expected " << expected << ")\n";
      exact = exact && now == expected;
      zeros += now;
      total += numel;
    }
  }
  std::cout << phase << ": sparsity " << static_cast<double>(zeros) / static_cast<double>(total)
            << " (" << zeros << " of " << total << ")\n";
  return exact && total > 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::cerr << "usage: prune_then_quantize MODEL.pt OUTPUT.pt "
                 "[--misuse optimizer-step|no-update-epoch]\n";
    return 2;
  }
  Misuse misuse = Misuse::kNone;
  if (argc == 5) {
    const std::string flag = argv[3];
    const std::string what = argv[4];
    if (flag != "--misuse" || (what != "optimizer-step" && what != "no-update-epoch")) {
      std::cerr << "prune_then_quantize: unknown argument '" << flag << " " << what << "'\n";
      return 2;
    }
    misuse = what == "optimizer-step" ? Misuse::kOptimizerStep : Misuse::kNoUpdateEpoch;
  }
  try {
    torch::set_num_threads(1);  // small model: threads would cost more than they give
    lithe::host::PluginRegistry registry;
    lithe::host::PluginLoader loader(registry);
    loader.load_search_path({});
    for (const auto& report : loader.reports()) {
      std::cout << (report.message.empty() ? "loaded " : "FAILED ") << report.path.string()
                << (report.message.empty() ? "" : ": " + report.message) << "\n";
    }
    const auto [images, labels] = make_data(512);
    auto model = lithe::host::load_torchscript_model(argv[1]);

    // Phase 1: AGP from 0 to 80% over epochs 0..3 (masks change at the start of each epoch).
    lithe::host::PruningSession pruning(
        *model, registry,
        lithe::host::make_compression_config(
            "agp",
            R"([{"initial_sparsity": 0.0, "final_sparsity": 0.8, "start_epoch": 0,
                 "end_epoch": 3, "frequency": 1, "op_types": ["Conv2d", "Linear"]}])",
            R"({"pruning_algorithm": "level"})"));
    pruning.compress();
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    for (int64_t epoch = 0; epoch < 4; ++epoch) {
      if (misuse != Misuse::kNoUpdateEpoch) {
        pruning.update_epoch(epoch);
      }
      const double loss = train_epoch(*model, pruning, optimizer, images, labels, misuse);
      std::cout << "prune epoch " << epoch << " loss " << loss << "\n";
    }
    pruning.end_of_data();
    bool exact = exact_sparsity(*model, pruning, "pruned");

    // Phase 2: QAT on the pruned model; the pruning session stays alive to keep its masks.
    lithe::host::QuantizationSession quantization(
        *model, registry,
        lithe::host::make_compression_config(
            "qat", R"([{"quant_types": ["weight", "output"],
                        "quant_bits": {"weight": 8, "output": 8},
                        "op_types": ["Conv2d", "Linear"]}])"));
    quantization.compress();
    torch::optim::SGD qat_optimizer(model->parameters(), torch::optim::SGDOptions(0.005));
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      quantization.update_epoch(epoch);
      const double loss =
          train_epoch(*model, quantization, qat_optimizer, images, labels, misuse, &pruning);
      std::cout << "qat epoch " << epoch << " loss " << loss << "\n";
    }
    quantization.end_of_data();
    pruning.accept_weight_changes();  // QAT stepped the weights; the masks were kept by hand
    exact = exact_sparsity(*model, pruning, "quantized") && exact;

    quantization.store_state_in_model();
    model->save(argv[2]);
    std::cout << "written to " << argv[2] << " (" << quantization.report().size()
              << " quantized layers)\n";
    return exact ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "prune_then_quantize: " << e.what() << "\n";
    return 1;
  }
}
