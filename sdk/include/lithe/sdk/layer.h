#pragma once
/// \file
/// What an algorithm sees of one compressed layer (NNI's module wrapper): its dotted name, op
/// type, live weight and bias, resolved per-layer config, current masks and an attribute store.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "lithe/sdk/export.h"
#include "lithe/sdk/options.h"

namespace lithe::sdk {

class LayerView;

/// A layer's masks: float tensors of 0/1 with the weight's (bias's) shape and device.
/// `bias` is empty for layers without a bias. In masks returned by an algorithm, an empty
/// `bias` for a layer that has one means "keep the current bias mask" (NNI's Level pruner
/// never touches bias masks).
struct LITHE_SDK_API Masks {
  at::Tensor weight;
  std::optional<at::Tensor> bias;

  /// All-ones masks for `layer` (float32, on the weight's device); bias mask iff it has a bias.
  static Masks keep_all(const LayerView& layer);
  /// A deep copy (algorithms that edit the current masks start from one).
  Masks clone() const;
};

/// Value of a per-layer attribute (NNI's set_wrappers_attribute).
using AttributeValue = std::variant<bool, int64_t, double, std::string, at::Tensor>;

/// One layer selected for compression. Created and owned by the host; algorithms receive
/// references that stay valid while the compression session lives. Not thread-safe.
class LITHE_SDK_API LayerView {
 public:
  /// Host use: `weight`/`bias` are the model's live parameters (sharing storage with it).
  LayerView(int64_t index, std::string name, std::string op_type, at::Tensor weight,
            std::optional<at::Tensor> bias, Options config);
  ~LayerView();
  LayerView(const LayerView&) = delete;
  LayerView& operator=(const LayerView&) = delete;

  /// Position among the compressed layers, in the model's named_modules order (NNI wrapper_idx).
  int64_t index() const { return index_; }
  /// Dotted module name, e.g. "features.3" or "layer1.conv1".
  const std::string& name() const { return name_; }
  /// NNI op type: the module's class name, e.g. "Conv2d", "Linear", "BatchNorm2d".
  const std::string& op_type() const { return op_type_; }
  /// The live weight parameter. Algorithms must not modify it (the host applies masks).
  /// For a module without a `weight` that has `in_proj_weight` (op type MultiheadAttention:
  /// torch's fused query, key and value projection [3·embed_dim, embed_dim]), that tensor,
  /// with `in_proj_bias` as bias() (host 1.5 on).
  /// Undefined only for layers a quantizer selected for input/output quantization that have
  /// no weight (e.g. ReLU); pruning sessions only ever select layers with a weight.
  const at::Tensor& weight() const { return weight_; }
  /// The live bias parameter, if the layer has one.
  const std::optional<at::Tensor>& bias() const { return bias_; }
  /// The config_list entry that selected this layer ('default' already expanded).
  const Options& config() const { return config_; }
  /// Current masks (all ones until an algorithm computes some).
  const Masks& masks() const { return masks_; }
  /// Host use: replaces the current masks after validating them: the weight's (bias's) shape
  /// and device, a dense bool, integer or floating dtype, and every entry 0 or 1 (NaN and
  /// infinities are not). Throws sdk::Error naming the layer, the rule, how many entries break
  /// it and one example; the current masks are then unchanged. Stored as float32.
  void set_masks(Masks masks);

  /// Sets attribute `key` for this layer (overwrites).
  void set_attribute(const std::string& key, AttributeValue value);
  /// The attribute `key`, or nullptr when unset.
  const AttributeValue* attribute(const std::string& key) const;
  /// Every attribute key, sorted (the host saves tensor attributes of quantized layers).
  std::vector<std::string> attribute_keys() const;

 private:
  int64_t index_;
  std::string name_;
  std::string op_type_;
  at::Tensor weight_;
  std::optional<at::Tensor> bias_;
  Options config_;
  Masks masks_;
  std::map<std::string, AttributeValue> attributes_;
};

}  // namespace lithe::sdk
