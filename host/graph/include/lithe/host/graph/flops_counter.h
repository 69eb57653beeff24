#pragma once
/// \file
/// Counting a TorchScript model's FLOPs and parameters per layer with NNI's count_flops_params
/// conventions (reference §4.3), from one forward on a zero input. Lithe departure 4: counting
/// never changes the model (NNI deletes the pruner's mask buffers), and masked depthwise and
/// grouped convolutions are counted correctly (NNI counts them as 0 FLOPs).

#include <cstdint>
#include <string>
#include <vector>

#include "lithe/host/io/mask_file.h"

namespace torch::jit {
struct Module;
}

namespace lithe::host {

/// Which modules are counted (exact class, as NNI's `type(m) in ops`; subclasses are not).
enum class FlopsMode {
  /// Conv1d/2d/3d and Linear; their bias adds no FLOPs.
  kDefault,
  /// kDefault plus ConvTranspose1d/2d/3d, BatchNorm1d/2d/3d, LeakyReLU (never ReLU),
  /// AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d, Upsample, UpsamplingBilinear2d,
  /// UpsamplingNearest2d; a convolution's or Linear's bias adds one FLOP per output value.
  kFull,
  /// Not NNI's: every op of the forward (functional ones included: attention's matrix products,
  /// a squeeze-and-excitation gate, residual adds) by the op table's FLOPs rule of each
  /// (ops::op_flops), one row per op call with FLOPs, named by the module it runs in and typed
  /// by the op ("aten::matmul"). Counted on the whole input (batch included); a convolution or
  /// Linear counts its bias (one per output value), and its row's parameters are its weight's
  /// and bias's. The total parameters are every parameter of the model, each once.
  kOps,
};

/// One call of a counted module.
struct LayerFlops {
  std::string name;     ///< dotted module name, e.g. "layer1.conv1" (never NNI's "….module")
  std::string op_type;  ///< class name, e.g. "Conv2d"
  std::vector<int64_t> input_shape;   ///< the call's first tensor input, batch included
  std::vector<int64_t> output_shape;  ///< the call's tensor output, batch included
  std::vector<int64_t> weight_shape;  ///< empty when the module has no weight (pools, ...)
  int64_t flops = 0;
  int64_t params = 0;  ///< every parameter of the module (weight and bias), masks ignored
};

struct FlopsReport {
  /// In the order the calls return (NNI's forward-hook order: the forward's order for leaf
  /// modules); a module called twice appears twice, with the shapes and FLOPs of each call.
  std::vector<LayerFlops> layers;
  int64_t total_flops = 0;   ///< sum over every call
  int64_t total_params = 0;  ///< sum over distinct module names (a module called twice once)
  /// kOps: the ops the table has no rule for, or that run inside a branch or loop the fixed
  /// input shape does not decide, as "aten::sort (2 calls)"; they are counted as 0.
  std::vector<std::string> uncounted;
};

/// Counts `module`'s FLOPs and parameters on one forward of zeros of shape `input_shape`
/// (NNI's tuple-of-ints input; batch included). The forward runs in evaluation mode under
/// no_grad; every submodule's training flag is restored afterwards and no parameter, buffer or
/// attribute is changed, whatever happens (departure 4).
///
/// Formulas (NNI v2.0; batch not included for convolutions and Linear):
///  - convolution: cout·prod(out_spatial)·prod(kernel)·cin / groups (+ cout·prod(out_spatial)
///    for a bias in kFull); Linear: out·in (+ out for a bias in kFull);
///  - BatchNorm: 2·numel(input); LeakyReLU: numel(input); AvgPool: numel(output);
///    AdaptiveAvgPool: (prod(in_spatial / out_spatial, floored) + 1)·numel(output);
///    Upsample: numel(output) × {linear 5, bilinear 11, bicubic 259, trilinear 31, else 0}.
/// Masks (NNI's mask.pth layout, `masks` named by module): a masked convolution or Linear
/// counts only the output channels its weight mask keeps,
/// cout = floor(mask.sum() / (weight.numel() / out_channels)), i.e. for a convolution
/// mask.sum() // (weight.size(1)·prod(kernel)) with weight.size(1) = in_channels / groups,
/// which is NNI's rule for groups = 1 and correct for depthwise and grouped ones (NNI divides
/// by in_channels and gets 0 there); for Linear mask.sum() // in_features. Parameters are not
/// reduced by masks (as NNI). Masks of modules that are not counted are checked, not used.
///
/// Throws sdk::Error: kInvalidConfig for an empty shape or a size < 1; kShapeMismatch naming
/// `masks_source`, the layer and both shapes when a mask's weight or bias shape differs from
/// the module's; kInvalidModel naming `masks_source` and the layer when a mask names no module
/// or a module without a weight; kShapeMismatch when the forward fails on the input;
/// kUnsupported naming the layer when a counted module runs inside control flow (if/loop) of
/// an enclosing forward, so its call cannot be measured.
FlopsReport count_flops(const torch::jit::Module& module, const std::vector<int64_t>& input_shape,
                        FlopsMode mode, const NamedMasks* masks = nullptr,
                        const std::string& masks_source = "masks");

/// "default" or "full".
const char* flops_mode_name(FlopsMode mode);
/// "default" -> kDefault, "full" -> kFull, "ops" -> kOps; sdk::Error(kInvalidConfig) naming
/// `option` and the value otherwise.
FlopsMode parse_flops_mode(const std::string& value, const std::string& option = "--mode");

/// The report as a text table with the columns Index, Name, Type, Input, Output, Weight shape,
/// FLOPs, #Params (shapes as 1x3x32x32, "-" for no weight), followed by the lines
/// "FLOPs total: N" and "#Params total: N" (and "Not counted: ..." when ops were not).
std::string format_flops_table(const FlopsReport& report);

/// The report as JSON: {"mode": ..., "layers": [{"name", "type", "input_shape", "output_shape",
/// "weight_shape", "flops", "params"}], "total_flops": N, "total_params": N}, plus
/// "uncounted": [...] in kOps mode.
std::string flops_report_json(const FlopsReport& report, FlopsMode mode);

}  // namespace lithe::host
