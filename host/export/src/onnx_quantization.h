#pragma once
// Internal to the host: the linear quantization grids a quantized TorchScript model carries in
// its `lithe_q_*` buffers (the SDK's convention in lithe/sdk/quantizer.h), for the ONNX QDQ
// export and the int8 conversion. Reads the module only; a model saved by `lithe compress` needs no plugin for it.

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "lithe/sdk/quantizer.h"

namespace lithe::host::onnx_quantization {

/// x̂ = (q − z)·s, q = round_half_even(clamp(x / s + z, quant_min, quant_max)).
struct LinearGrid {
  at::Tensor scale;       ///< float32, 1 element, or one per output channel (weights only)
  at::Tensor zero_point;  ///< float32 with integer values, as many as `scale`
  int64_t quant_min = 0;
  int64_t quant_max = 0;
  /// The ONNX storage type: int8 for a grid with negative codes, else uint8.
  bool is_signed() const { return quant_min < 0; }
  /// Whether the grid is narrower than its storage type (a Clip must bound activations).
  bool narrower_than_storage() const {
    return is_signed() ? quant_min > -128 || quant_max < 127 : quant_min > 0 || quant_max < 255;
  }
};

/// One quantized module: its algorithm and, per configured quant type, its grid or nullopt
/// while the type passes through unquantized (an empty grid in the state).
struct QuantizedLayer {
  std::string algorithm;
  std::map<sdk::QuantType, std::optional<LinearGrid>> types;
};

/// Every module of `root` carrying quantization state (a non-empty `lithe_q_identity`), by
/// dotted name. Throws sdk::Error(kUnsupported) naming the layer, the quant type and the
/// algorithm when a quantized type declares no linear grid (a non-linear quantizer), its grid
/// does not fit 8 bits, or its scale or zero point break the convention (the value seen);
/// every message starts with `failure` ("cannot export to ONNX") and ends with "nothing was
/// written".
std::map<std::string, QuantizedLayer> read_quantized_layers(
    const torch::jit::Module& root, const std::string& failure = "cannot export to ONNX");

/// The integer codes q of `weight` on `grid` (per output channel when the grid has one scale
/// per channel), as uint8 or int8: DequantizeLinear of them gives the quantizer's
/// fake-quantized weight bit for bit.
at::Tensor weight_codes(const at::Tensor& weight, const LinearGrid& grid);

}  // namespace lithe::host::onnx_quantization
