#pragma once
// The ONNX options of `lithe compress` (--onnx, --input-shape, --onnx-opset) and the report
// line it and `lithe export-onnx` print for an ONNX file.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lithe/host/export/onnx_export.h"

namespace lithe::cli {

/// --onnx, --input-shape and --onnx-opset of `lithe compress`.
struct OnnxRequest {
  std::string path;         ///< "" = no ONNX file
  std::string input_shape;  ///< as given, e.g. "1,1,28,28"
  int64_t opset = 13;
  bool wanted() const { return !path.empty(); }
};

/// Checks before any work: --onnx and --input-shape come together, the shape parses and the
/// opset is in 13..17 (the ONNX file's path follows the verb's check_output_paths).
/// sdk::Error(kInvalidConfig) naming the option and the value.
void check_onnx_request(const OnnxRequest& request);

/// "wrote M.onnx (opset 13, input 1,3,32,32, 14 nodes; QDQ: 5 weights, 5 activations;
/// checked by the ONNX checker)", then a note naming quantized types exported unquantized.
void print_onnx_summary(const std::string& path, int64_t opset, const std::string& input_shape,
                        const host::OnnxExportSummary& summary);

/// The same, for --json summaries.
nlohmann::ordered_json onnx_summary_json(const std::string& path, int64_t opset,
                                         const host::OnnxExportSummary& summary);

}  // namespace lithe::cli
