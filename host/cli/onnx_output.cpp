#include "onnx_output.h"

#include <cstdio>

#include "input_shape.h"
#include "lithe/sdk/error.h"

namespace lithe::cli {

void check_onnx_request(const OnnxRequest& request) {
  LITHE_CHECK(request.wanted() == !request.input_shape.empty(), sdk::Errc::kInvalidConfig,
              request.wanted() ? "--onnx needs --input-shape (the exported input's static shape, "
                                 "batch first, e.g. 1,1,28,28)"
                               : "--input-shape has no effect without --onnx");
  if (!request.wanted()) {
    return;
  }
  host::check_onnx_export_options({parse_input_shape(request.input_shape), request.opset},
                                  "--onnx-opset");
}

void print_onnx_summary(const std::string& path, int64_t opset, const std::string& input_shape,
                        const host::OnnxExportSummary& summary) {
  std::string qdq;
  if (summary.quantized_weights + summary.quantized_activations > 0) {
    qdq = "; QDQ: " + std::to_string(summary.quantized_weights) + " weights, " +
          std::to_string(summary.quantized_activations) + " activations";
  }
  std::printf("wrote %s (opset %lld, input %s, %lld nodes%s; checked by the ONNX checker)\n",
              path.c_str(), static_cast<long long>(opset), input_shape.c_str(),
              static_cast<long long>(summary.nodes), qdq.c_str());
  if (!summary.not_quantized_yet.empty()) {
    std::string list;
    for (const std::string& item : summary.not_quantized_yet) {
      list += (list.empty() ? "" : ", ") + item;
    }
    std::printf("note: exported unquantized, as they run, because they have no range yet "
                "(calibrate or train first): %s\n",
                list.c_str());
  }
}

nlohmann::ordered_json onnx_summary_json(const std::string& path, int64_t opset,
                                         const host::OnnxExportSummary& summary) {
  return {{"path", path},
          {"opset", opset},
          {"nodes", summary.nodes},
          {"quantized_weights", summary.quantized_weights},
          {"quantized_activations", summary.quantized_activations},
          {"not_quantized_yet", summary.not_quantized_yet}};
}

}  // namespace lithe::cli
