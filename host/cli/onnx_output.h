#pragma once
// The ONNX file the verbs write: `lithe compress --onnx` (the compressed model exported as it
// was saved, QDQ for quantizers) and the report line `lithe export-onnx` prints too.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lithe/host/export/onnx_export.h"
#include "lithe/host/io/staged_file.h"

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

/// Throws the error export_saved_model would, writing nothing: the check `lithe compress` runs
/// before any training.
void check_exportable(const std::filesystem::path& saved_model, const OnnxRequest& request);

/// Exports the TorchScript model saved at `saved_model` (what the verb just wrote, so the ONNX
/// file is exactly that model) into `onnx_file` (written, not committed).
host::OnnxExportSummary export_saved_model(const std::filesystem::path& saved_model,
                                           const OnnxRequest& request,
                                           host::StagedFile& onnx_file);

/// "wrote M.onnx (opset 13, input 1,3,32,32, 14 nodes; QDQ: 5 weights, 5 activations;
/// checked by the ONNX checker)", then a note naming quantized types exported unquantized.
void print_onnx_summary(const std::string& path, int64_t opset, const std::string& input_shape,
                        const host::OnnxExportSummary& summary);

/// The same, for --json summaries.
nlohmann::ordered_json onnx_summary_json(const std::string& path, int64_t opset,
                                         const host::OnnxExportSummary& summary);

}  // namespace lithe::cli
