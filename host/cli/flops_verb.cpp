// `lithe flops`: per-layer FLOPs and parameters of a TorchScript model (NNI count_flops_params).
#include <torch/script.h>

#include <iostream>
#include <string>
#include <vector>

#include "input_shape.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/model/model.h"
#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/io/threads.h"
#include "lithe/sdk/error.h"
#include "verbs.h"

namespace lithe::cli {

int run_flops(const std::vector<std::string>& args) {
  std::string model_path;
  std::string input_shape;
  std::string masks_path;
  std::string mode_name = "default";
  bool json = false;
  int threads = 0;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model file")
      ("input-shape", po::value(&input_shape)->required(),
       "shape of the zero input, batch first, e.g. 1,3,32,32 (NNI's tuple of ints)")
      ("masks", po::value(&masks_path),
       "mask file in NNI's mask.pth layout: masked convolutions and Linear layers count only "
       "the output channels they keep (the model is not changed)")
      ("mode", po::value(&mode_name)->default_value(mode_name),
       "default: Conv1d/2d/3d and Linear; full: also ConvTranspose, BatchNorm, LeakyReLU, "
       "AvgPool, AdaptiveAvgPool, Upsample, and bias FLOPs (both NNI's count_flops_params); "
       "ops: every op of the forward by Lithe's op table, functional ones included (attention "
       "products, gates, adds), one row per op call, batch included")
      ("json", po::bool_switch(&json), "print the layers and totals as JSON")
      ("threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)");
  if (!parse_verb_args("flops",
                       "--model M.pt --input-shape 1,3,32,32 [--masks MASKS.pth] "
                       "[--mode default|full|ops] [--json]",
                       args, desc)) {
    return 0;
  }
  // Every option is checked before the model is loaded.
  const std::vector<int64_t> shape = parse_input_shape(input_shape);
  const host::FlopsMode mode = host::parse_flops_mode(mode_name, "--mode");
  host::configure_threads(threads);
  const torch::jit::Module module = host::load_torchscript_module(model_path);
  host::NamedMasks masks;
  if (!masks_path.empty()) {
    masks = host::load_masks(masks_path);
  }
  const host::FlopsReport report = host::count_flops(
      module, shape, mode, masks_path.empty() ? nullptr : &masks, "--masks '" + masks_path + "'");
  if (json) {
    std::cout << host::flops_report_json(report, mode) << "\n";
  } else {
    std::cout << host::format_flops_table(report);
  }
  return 0;
}

}  // namespace lithe::cli
