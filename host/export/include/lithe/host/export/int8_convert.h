#pragma once
/// \file
/// Native int8 conversion: a model quantized by Lithe (its `lithe_q_*` state buffers, 8-bit
/// linear grids; see lithe/sdk/quantizer.h) becomes a TorchScript model that computes with
/// libtorch's quantized CPU kernels (`quantized::conv2d`, `quantized::linear`, their `_relu`
/// fusions) on prepacked int8 weights, carrying activations as quantized tensors from one
/// quantized op to the next. The result is plain TorchScript: it loads and runs with libtorch
/// or Python's `torch.jit.load`, without Lithe.
///
/// What becomes int8: every call of a quantized `Conv2d` or `Linear` layer (torch.nn's) whose
/// weight and output are quantized and whose input is quantized (its own input grid, an int8
/// tensor arriving from a previous int8 op, or else the input range observed while the model
/// was calibrated: kObservedInputRangeBuffer, a quint8 grid over [min(lo, 0), max(hi, 0)]). Ops that are exact on quantized tensors
/// (ReLU, max pooling, flatten, view/reshape, dropout in eval) keep int8 tensors int8; any other
/// op reads a dequantized copy. A quantized layer that cannot run int8 (why is in the report)
/// runs its fake quantization in float, exactly as Lithe computed it. Modules of any other type
/// may quantize their output (config quant_types ["output"]): the value they return is
/// quantized to their grid and read as int8 from there; where it is a sum (+ ReLU) of two int8
/// tensors, as a residual block returns, `quantized::add(_relu)` writes that grid directly.
///
/// The model's numbers are those of its fake quantization, up to the quantized kernels' own
/// rounding (an activation on a rounding tie, the bias's int32 rounding): the conversion
/// certificate (`lithe convert`) measures the difference in output grid steps.

#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lithe/host/model/quantized_engine.h"

namespace lithe::host {

struct Int8ConvertOptions {
  /// The engine the weights are prepacked for; kAuto: x86 where this libtorch has it, else
  /// oneDNN when every int8 weight has zero point 0, else QNNPACK.
  QuantizedEngine engine = QuantizedEngine::kAuto;
  /// Build every quantized layer as its float fake quantization instead (the reference the
  /// certificate compares with: the model Lithe's quantizer computes, from its saved state,
  /// without a plugin; bit for bit on the same inputs).
  bool fake_quantized = false;
  /// With fake_quantized: the layers whose observed input range quantizes their input (an int8
  /// conversion's Int8ConvertReport::inputs_from_ranges), so that the reference computes what
  /// the int8 model does.
  std::vector<std::string> inputs_from_ranges;
  /// Write the model even when quantized layers must run their fake quantization in float.
  /// Default: refuse (sdk::Error kUnsupported), naming the layers and the change that makes
  /// them int8; a model called int8 is int8.
  bool allow_float_layers = false;
  /// A check before the data passes (lithe compress --convert), so that a refusal comes before
  /// the work: grids not observed yet count as present (placeholders) ...
  bool assume_grids_observed = false;
  /// ... and so do the input ranges of layers that observe them (when calibration will run).
  bool assume_input_ranges_observed = false;
};

/// One quantized layer call that runs int8.
struct Int8Layer {
  std::string name;
  std::string op_type;       ///< "Conv2d", "Linear"
  std::string kernel;        ///< "quantized::conv2d_relu", ...
  bool per_channel = false;  ///< per-output-channel weight scales
};

/// A quantized layer that runs its fake quantization in float, and why.
struct FloatLayer {
  std::string name;
  std::string reason;
};

struct Int8ConvertReport {
  QuantizedEngine engine = QuantizedEngine::kAuto;  ///< the one the model was built for
  /// Some int8 weight has a zero point other than 0 (as qint8): x86 runs those through FBGEMM,
  /// about 1.5x slower than symmetric weights on oneDNN (per_channel_symmetric weights are).
  bool asymmetric_weights = false;
  std::vector<Int8Layer> int8_layers;
  std::vector<FloatLayer> float_layers;
  /// Other int8 ops, made where a module returns a quantized sum of two int8 tensors (a residual
  /// block): "quantized::add_relu in layer1.0 (BasicBlock)", in graph order.
  std::vector<std::string> int8_ops;
  /// Ops with no quantized kernel that read an int8 tensor (a dequantize runs before them):
  /// "aten::add in layer1.0 (BasicBlock)", in graph order, one entry per op.
  std::vector<std::string> dequantized_before;
  int64_t quantize_ops = 0;    ///< float → int8 (model input, float ops' outputs)
  int64_t dequantize_ops = 0;  ///< int8 → float
  /// "<layer> <type>" of quant types configured but passing through unquantized (no range
  /// observed yet): they run in float, as in the fake-quantized model.
  std::vector<std::string> not_quantized_yet;
  /// Per output of the forward: the scale of the int8 grid it is dequantized from (its grid
  /// step), or 0 for an output computed in float.
  std::vector<double> output_scales;
  /// Layers (in graph order) whose input no int8 op makes and no configured grid quantizes, so
  /// their observed input range does (Int8ConvertOptions::inputs_from_ranges).
  std::vector<std::string> inputs_from_ranges;
};

/// The int8 model of `model` (a TorchScript model whose layers carry Lithe's quantization
/// state; `model` is not changed). Its forward has the same signature and returns float
/// tensors. Sets libtorch's quantized engine to the one chosen (reported).
/// Throws sdk::Error: kUnsupported naming the layer and rule for a quantized layer that is not
/// a Conv2d or Linear, a non-linear quantizer, grids wider than 8 bits, quantized layers that
/// would run in float without allow_float_layers (one line: the layers grouped by reason, each
/// with its fix; every message ends with "nothing was written"); kInvalidModel when no layer
/// is quantized.
torch::jit::Module convert_to_int8(const torch::jit::Module& model,
                                   const Int8ConvertOptions& options,
                                   Int8ConvertReport* report = nullptr);

/// The TorchScript archive of an int8 model built for `engine`, recording the engine (extra
/// file kQuantizedEngineRecord) so that Lithe's loader switches to it before loading.
/// sdk::Error(kIo) when the model cannot be serialised.
std::string serialize_int8_model(const torch::jit::Module& int8, QuantizedEngine engine);

}  // namespace lithe::host
