// Lithe 1.3's README embedding example, as a 1.3 user wrote it: the 1.3 calls, unchanged. Kept
// as it was on purpose; do not modernise the calls. Only the includes moved: the 1.3 header
// names (lithe/host/compressor.h, ...) were kept for one minor version and are gone; these are
// the area headers that replaced them.
// usage: embed_1_3 MODEL LEVEL_CONFIG OUT_DIR [--train]
//   prunes MODEL with LEVEL_CONFIG and writes OUT_DIR/pruned.pt and OUT_DIR/mask.pth;
//   --train also runs the 1.3 training and quantization part (needs Fashion-MNIST data).
#include <lithe/host/io/file_io.h>
#include <lithe/host/io/mask_file.h>
#include <lithe/host/model/apply_compression_results.h>
#include <lithe/host/runtime/plugin_loader.h>
#include <lithe/host/session/compression_config.h>
#include <lithe/host/session/pruning_session.h>
#include <lithe/host/session/quantization_session.h>
#include <lithe/host/train/dataset.h>
#include <lithe/host/train/trainer.h>

#include <cstdio>
#include <exception>
#include <string>

namespace {

void train_and_quantize(lithe::host::Model& model, lithe::host::PluginRegistry& registry,
                        lithe::host::PruningSession& session, const std::string& qat_config) {
  auto train = lithe::host::load_mnist_directory(lithe::host::kDefaultDataDir, "train");
  auto test = lithe::host::load_mnist_directory(lithe::host::kDefaultDataDir, "test");
  lithe::host::train(model, train, &test, lithe::host::TrainOptions{}, &session);
  lithe::host::QuantizationSession qsession(model, registry,
                                            lithe::host::read_compression_config(qat_config));
  qsession.compress();
  lithe::host::train(model, train, &test, lithe::host::TrainOptions{}, &qsession);
  std::string calibration = qsession.calibration_json();
  std::printf("calibration: %zu bytes\n", calibration.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL LEVEL_CONFIG OUT_DIR [--train]\n", argv[0]);
    return 2;
  }
  try {
    lithe::host::PluginRegistry registry;
    lithe::host::PluginLoader loader(registry);
    loader.load_search_path({});

    auto model = lithe::host::load_torchscript_model(argv[1]);
    lithe::host::PruningSession session(*model, registry,
                                        lithe::host::read_compression_config(argv[2]));
    session.compress();
    const std::string out_dir = argv[3];
    model->save(out_dir + "/pruned.pt");
    lithe::host::save_masks(session.masks(), out_dir + "/mask.pth");
    std::printf("1.3 program: pruned %zu layers\n", session.masks().size());
    if (argc > 4 && std::string(argv[4]) == "--train") {
      train_and_quantize(*model, registry, session, out_dir + "/qat.json");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed_1_3: %s\n", e.what());
    return 1;
  }
  return 0;
}
