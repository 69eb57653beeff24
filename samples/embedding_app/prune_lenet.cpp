// Prunes a TorchScript model's Conv2d and Linear weights to a sparsity with Lithe's level pruner,
// the way an application embeds Lithe: plugins found with no settings (the loader looks beside
// the liblithe_host it runs with), the config given in code, the result checked and saved.
//
// usage: prune_lenet MODEL.pt OUTPUT.pt [SPARSITY=0.8]
// Exit status 0 when every selected layer has exactly int(n * sparsity) zero weights.
#include <lithe/host/model/model.h>
#include <lithe/host/runtime/plugin_loader.h>
#include <lithe/host/session/compression_config.h>
#include <lithe/host/session/pruning_session.h>
#include <lithe/sdk/error.h>

#include <cstdint>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: prune_lenet MODEL.pt OUTPUT.pt [SPARSITY=0.8]\n";
    return 2;
  }
  try {
    const double sparsity = argc > 3 ? std::stod(argv[3]) : 0.8;
    lithe::host::PluginRegistry registry;
    lithe::host::PluginLoader loader(registry);
    loader.load_search_path({});
    for (const auto& report : loader.reports()) {
      std::cout << (report.message.empty() ? "loaded " : "FAILED ") << report.path.string()
                << (report.message.empty() ? "" : ": " + report.message) << "\n";
    }

    auto model = lithe::host::load_torchscript_model(argv[1]);
    lithe::host::PruningSession session(
        *model, registry,
        lithe::host::make_compression_config(
            "level", R"([{"sparsity": )" + std::to_string(sparsity) +
                         R"(, "op_types": ["Conv2d", "Linear"]}])"));
    session.compress();

    bool exact = true;
    int64_t zeros = 0;
    int64_t total = 0;
    for (const auto& layer : session.report()) {
      const auto expected =
          static_cast<int64_t>(static_cast<double>(layer.weight_numel) * sparsity);
      std::cout << layer.name << " " << layer.op_type << " " << layer.weight_zeros << " of "
                << layer.weight_numel << " weights pruned (expected " << expected << ")\n";
      exact = exact && layer.weight_zeros == expected;
      zeros += layer.weight_zeros;
      total += layer.weight_numel;
    }
    model->save(argv[2]);
    std::cout << "sparsity " << static_cast<double>(zeros) / static_cast<double>(total) << " ("
              << zeros << " of " << total << "), written to " << argv[2] << "\n";
    return exact ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "prune_lenet: " << e.what() << "\n";
    return 1;
  }
}
