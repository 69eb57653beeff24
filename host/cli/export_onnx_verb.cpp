// `lithe export-onnx`: a TorchScript model as an ONNX file, validated before it is written.
#include <torch/script.h>

#include <cstdio>
#include <string>
#include <vector>

#include "input_shape.h"
#include "lithe/host/model/model.h"
#include "lithe/host/export/onnx_export.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/sdk/error.h"
#include "onnx_output.h"
#include "verbs.h"

namespace lithe::cli {

int run_export_onnx(const std::vector<std::string>& args) {
  std::string model_path;
  std::string input_shape;
  std::string output_path;
  int64_t opset = 13;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model (exported in eval mode)")
      ("input-shape", po::value(&input_shape)->required(),
       "the input's static shape, batch first, e.g. 1,3,32,32")
      ("output", po::value(&output_path)->required(), "ONNX file to write")
      ("opset", po::value(&opset)->default_value(13), "ONNX opset, 13..17");
  if (!parse_verb_args("export-onnx",
                       "--model M.pt --input-shape 1,3,32,32 --output M.onnx [--opset N]", args,
                       desc)) {
    return 0;
  }
  host::check_output_paths({{"--model", model_path}}, {{"--output", output_path}});
  host::OnnxExportOptions options;
  options.input_shape = parse_input_shape(input_shape);
  options.opset = opset;
  torch::jit::Module model = host::load_torchscript_module(model_path);
  model.eval();
  host::OnnxExportSummary summary;
  host::save_onnx(model, options, output_path, &summary);
  print_onnx_summary(output_path, opset, input_shape, summary);
  return 0;
}

}  // namespace lithe::cli
