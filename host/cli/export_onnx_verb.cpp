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
  bool external_data = false;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model (exported in eval mode)")
      ("input-shape", po::value(&input_shape)->required(),
       "the input's static shape, batch first, e.g. 1,3,32,32")
      ("output", po::value(&output_path)->required(), "ONNX file to write")
      ("opset", po::value(&opset)->default_value(13), "ONNX opset, 13..17")
      ("external-data", po::bool_switch(&external_data),
       "write the weights to OUTPUT.data beside the model (ONNX external data; automatic when "
       "they exceed 2 GiB)");
  if (!parse_verb_args("export-onnx",
                       "--model M.pt --input-shape 1,3,32,32 --output M.onnx [--opset N] "
                       "[--external-data]",
                       args,
                       desc)) {
    return 0;
  }
  // The data file is checked too, since a model over 2 GiB writes one without being asked.
  host::check_output_paths(
      {{"--model", model_path}},
      {{"--output", output_path},
       {"the external data file", host::onnx_external_data_path(output_path).string()}});
  host::OnnxExportOptions options;
  options.input_shape = parse_input_shape(input_shape);
  options.opset = opset;
  options.external_data = external_data;
  torch::jit::Module model = host::load_torchscript_module(model_path);
  model.eval();
  host::OnnxExportSummary summary;
  host::save_onnx(model, options, output_path, &summary);
  print_onnx_summary(output_path, opset, input_shape, summary);
  return 0;
}

}  // namespace lithe::cli
