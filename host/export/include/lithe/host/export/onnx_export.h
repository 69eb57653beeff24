#pragma once
/// \file
/// ONNX export of TorchScript models without Python (NNI's export_model(onnx_path=...,
/// input_shape=...)). libtorch's C++ library has no TorchScript-to-ONNX conversion, so Lithe
/// emits the ONNX graph itself from the inlined forward graph, for the ops CNN and MLP
/// classifiers use, and validates it with the ONNX checker and strict shape inference before
/// anything is written.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace torch::jit {
struct Module;
}

namespace lithe::host {

struct OnnxExportOptions {
  std::vector<int64_t> input_shape;  ///< the model input's static shape, batch first
  int64_t opset = 13;                ///< 13..17 (what the ONNX library here validates)
  /// save_onnx: write the weights (every initializer of 1 KiB or more) to
  /// onnx_external_data_path(path), ONNX's external-data form. save_onnx does so anyway when
  /// they would not fit one ONNX file (2 GiB).
  bool external_data = false;
};

/// What an export wrote, for reports.
struct OnnxExportSummary {
  int64_t nodes = 0;
  int64_t quantized_weights = 0;      ///< written as integer codes + DequantizeLinear
  int64_t quantized_activations = 0;  ///< QuantizeLinear + DequantizeLinear pairs
  /// "<layer> <quant type>" of quantized types whose grid is still empty: they run and are
  /// exported unquantized (e.g. QAT outputs before any training or calibration batch).
  std::vector<std::string> not_quantized_yet;
};

/// The ONNX model (serialized ModelProto, IR version 8) computing `module`'s eval-mode forward on
/// a float32 input named "input" of `options.input_shape`, output(s) named "output" (then
/// "output_1", ...). Weights become initializers (masked zeros included); BatchNorm becomes
/// BatchNormalization. The ops are those of the op table (host/graph/src/ops/, README's list:
/// convolutions, Linear, attention, normalisations, activations, pooling and resampling, shape
/// and layout ops). The graph describes `options.input_shape` only: values that shape decides
/// are folded, with the branches they pick, and tensors no input reaches are written as the
/// values they took. A model whose weights exceed 2 GiB is refused (kUnsupported): save_onnx
/// writes such models with external data.
///
/// A quantized model (saved by a quantization session: `lithe_q_*` buffers) is exported in QDQ
/// form from the linear grids its quantizer declared (lithe/sdk/quantizer.h): a quantized
/// weight becomes its uint8/int8 codes and a DequantizeLinear (per tensor, or per output
/// channel on axis 0), equal to the fake-quantized weight bit for bit; a quantized input or
/// output becomes QuantizeLinear + DequantizeLinear at the module call (after a Clip when the
/// grid is narrower than 8 bits), as the fake quantization runs. A type whose grid is still
/// empty (no range observed yet) is exported unquantized, as it runs. Non-linear quantizers
/// (kUnsupported naming the layer, type and algorithm) and grids wider than 8 bits are refused.
///
/// The module is not changed (it is run once, in its current mode, to read
/// shapes). Throws sdk::Error: kUnsupported naming the op, the graph node and the module it came
/// from for anything else; kInvalidConfig for an opset outside 13..17 or an empty shape;
/// kInternal when the ONNX checker rejects the result.
std::string export_onnx(const torch::jit::Module& module, const OnnxExportOptions& options,
                        OnnxExportSummary* summary = nullptr);

/// The option checks export_onnx runs first, for callers that check before any work:
/// sdk::Error(kInvalidConfig) for an opset outside 13..17 (naming `opset_option`, the flag that
/// set it) or an empty input shape.
void check_onnx_export_options(const OnnxExportOptions& options,
                               const std::string& opset_option = "--opset");

/// export_onnx, written atomically to `path`; with options.external_data, or when the weights
/// exceed 2 GiB, the weights go to onnx_external_data_path(path) and the model refers to them
/// by that file's name (keep the two files side by side). Both files are staged and committed
/// together: a failure leaves both as they were (sdk::Error(kIo) with the OS reason).
void save_onnx(const torch::jit::Module& module, const OnnxExportOptions& options,
               const std::filesystem::path& path, OnnxExportSummary* summary = nullptr);

/// Where save_onnx puts the external data of `model_path`: "<model file name>.data" beside it.
std::filesystem::path onnx_external_data_path(const std::filesystem::path& model_path);

}  // namespace lithe::host
