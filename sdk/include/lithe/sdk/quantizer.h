#pragma once
/// \file
/// Quantizer and QuantGrad: NNI's quantization framework (reference §1.6–1.8).
///
/// A Quantizer decides how each selected layer's input, weight and output are fake-quantized
/// and keeps per-layer state (scales, zero points, tracked ranges) as tensor attributes of the
/// layer. A QuantGrad supplies the backward of that fake quantization; its default is the
/// straight-through estimator. The SDK owns the one autograd adapter (apply_quant_grad), so no
/// plugin writes autograd code.
///
/// What the host does, per session:
///  1. validate_config for every config_list entry (after check_quant_config, which the host
///     runs first on every entry);
///  2. before attach, the state a model saved by an earlier session of the same algorithm and
///     bits carries for a layer is set back as that layer's tensor attributes, so a quantizer
///     that finds its state present continues from it (NNI's save/load flow); state of another
///     algorithm or other bits is refused with an error naming the layer;
///  3. attach once; afterwards every tensor attribute `key` of a layer is registered as buffer
///     `lithe_q_<key>` of the layer's module, the same tensor object, so saving the model saves
///     it and loading a saved state into the model restores it. Quantizers therefore create
///     their tensor attributes in attach() and later update them in place (copy_, fill_); keys
///     are identifiers (letters, digits, _), by convention prefixed by their quant type
///     ("weight_scale", "output_tracked_min");
///  4. for each type in the entry's `quant_types`: quantize_input on the module's input and
///     quantize_output on its output at every call of the module, and quantize_weight on its
///     float weight (the module computes with the result; gradients reach the float weight
///     through quant_grad()) - for TorchScript models wherever the module's own code reads
///     `self.weight`, for C++-frontend models once per model forward before it runs - through
///     apply_quant_grad unless records_autograd(). Only floating-point tensors are quantized;
///  5. update_epoch at each epoch start, step after every optimizer step.
///
/// Linear grids (the QDQ form the ONNX export emits): a quantizer whose fake quantization of
/// type T is
///     x̂ = (q − z) · s,   q = round_half_even(clamp(x / s + z, qmin, qmax))
/// (IEEE division; for z = 0 this is clamp-then-round, equal to round-then-clamp) declares it
/// with the tensor attributes `T_scale` (s > 0), `T_zero_point` (z, integer-valued; absent
/// means 0), `T_quant_min` and `T_quant_max` (float32 [1]). s and z hold one element (per
/// tensor) or, for the weight, one per output channel (dim 0). While T passes through
/// unquantized (no range observed yet, a start step not reached) the grid is empty:
/// `T_quant_max <= T_quant_min`. Quantizers that are not linear (sign, tanh transforms,
/// truncation) leave these attributes out; the export then refuses their layers by name.
///
/// Lifetime: the autograd graph of a forward holds the quantizer and layer addresses until its
/// backward has run; the host keeps both alive for its session, so backward must run while the
/// session lives.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "lithe/sdk/context.h"
#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/options.h"

namespace lithe::sdk {

/// Which tensor a quantization applies to. Values equal NNI's QuantType.
enum class QuantType : int { kInput = 0, kWeight = 1, kOutput = 2 };

/// "input", "weight" or "output" (the names used in `quant_types` and `quant_bits`).
LITHE_SDK_API const char* quant_type_name(QuantType type);

/// The backward of a fake quantization.
class LITHE_SDK_API QuantGrad {
 public:
  virtual ~QuantGrad();
  /// Gradient w.r.t. `x` (the tensor the quantizer saw: input, float weight or raw output)
  /// given `grad_output`. Must not modify `grad_output` in place (NNI's in-place masking
  /// corrupts expanded gradients, reference §6.11). Runs without autograd recording. Defaults
  /// to the straight-through estimator: `grad_output` unchanged.
  virtual at::Tensor backward(const at::Tensor& x, const at::Tensor& grad_output, QuantType type,
                              const LayerView& layer) const;
};

class Quantizer;

/// The SDK's autograd adapter: calls the quantizer's quantize_<type>(x, layer, training) with
/// gradient recording off, and on backward quantizer.quant_grad().backward(x, grad, type,
/// layer). The result has x's shape; the gradient reaches x (e.g. the float weight).
/// `quantizer` and `layer` must outlive the backward of the returned tensor's graph.
LITHE_SDK_API at::Tensor apply_quant_grad(Quantizer& quantizer, const at::Tensor& x,
                                          QuantType type, LayerView& layer, bool training);

/// A quantization algorithm. Config entries carry `quant_types` (a non-empty subset of
/// "input", "weight", "output"), `quant_bits` (an int for every type, or an object giving the
/// bits of each type in quant_types) and the algorithm's own keys.
class LITHE_SDK_API Quantizer {
 public:
  virtual ~Quantizer();
  /// Same contract as Pruner::validate_config. `quant_types`/`quant_bits` were already checked
  /// by check_quant_config; call require_quant_types to reject types the algorithm lacks.
  virtual void validate_config(const Options& entry) const = 0;
  /// (optional) Called once before the first forward: create the layers' state here (tensor
  /// attributes), keeping attributes that already exist (restored from a saved model).
  virtual void attach(CompressionContext& context);

  /// Fake-quantizes the float weight (`training`: the model is in training mode). Returns a
  /// new tensor of the weight's shape; must not modify `weight`. Default: throws
  /// sdk::Error(kUnsupported) (validate_config should have rejected the type).
  virtual at::Tensor quantize_weight(const at::Tensor& weight, LayerView& layer, bool training);
  /// Same, for the module's input.
  virtual at::Tensor quantize_input(const at::Tensor& input, LayerView& layer, bool training);
  /// Same, for the module's output.
  virtual at::Tensor quantize_output(const at::Tensor& output, LayerView& layer, bool training);

  /// The backward used by apply_quant_grad. Default: the straight-through estimator.
  virtual const QuantGrad& quant_grad() const;
  /// (optional) true when quantize_* build their result from differentiable ATen ops and
  /// must be called with autograd recording (LSQ's learned step size); the host then calls
  /// them directly instead of through apply_quant_grad. Defaults to false.
  virtual bool records_autograd() const;
  /// (optional) Learnable tensors the optimizer must update besides the model's parameters
  /// (LSQ's step sizes), valid after attach. Defaults to none.
  virtual std::vector<at::Tensor> parameters();

  /// (optional) Start of epoch `epoch`. Defaults to doing nothing.
  virtual void update_epoch(int64_t epoch);
  /// (optional) After each optimizer step (NNI's step_with_optimizer). Defaults to nothing.
  virtual void step();
};

/// The common rules of every quantizer config entry, checked by the host before
/// validate_config: `quant_types` is a non-empty list of distinct names among "input",
/// "weight", "output"; `quant_bits` is an integer in 1..32, or an object whose keys are exactly
/// the entry's quant_types, each an integer in 1..32. Throws sdk::Error(kInvalidConfig) naming
/// the JSON path, the rule and the value.
LITHE_SDK_API void check_quant_config(const Options& entry);

/// The entry's quant types, in the order written.
LITHE_SDK_API std::vector<QuantType> quant_types(const Options& entry);

/// Throws sdk::Error(kInvalidConfig) naming `/quant_types` of the entry, `algorithm` and the
/// supported list, unless every quant type of the entry is in `supported`.
LITHE_SDK_API void require_quant_types(const Options& entry,
                                       std::initializer_list<QuantType> supported,
                                       const std::string& algorithm);

/// The bits for `type` in `entry` (NNI's get_bits_length: the int, or the object's value).
/// Throws sdk::Error(kInvalidConfig) when the entry does not give bits for `type`.
LITHE_SDK_API int64_t quant_bits(const Options& entry, QuantType type);

/// The JSON Pointer of the bits for `type` in `entry`, for error messages:
/// "/config_list/0/quant_bits/output" for the object form, ".../quant_bits" for an integer.
LITHE_SDK_API std::string quant_bits_path(const Options& entry, QuantType type);

/// The conventional state attribute name "<type>_<field>", e.g. ("weight", "scale") ->
/// "weight_scale".
LITHE_SDK_API std::string quant_state_key(QuantType type, const std::string& field);

/// The tensor attribute `key` of `layer`, or `initial` (which is then stored) when unset;
/// for attach(): keeps a state restored from a saved model. Throws sdk::Error(kInvalidModel)
/// naming the layer and key when the existing attribute is not a tensor or differs from
/// `initial` in shape or dtype.
LITHE_SDK_API at::Tensor ensure_tensor_attribute(LayerView& layer, const std::string& key,
                                                 const at::Tensor& initial);

/// The tensor attribute `key` of `layer` (the live state tensor). Throws sdk::Error(kInternal)
/// naming the layer and key when it is unset or not a tensor (state read before attach()).
LITHE_SDK_API at::Tensor tensor_attribute(const LayerView& layer, const std::string& key);

}  // namespace lithe::sdk
