#pragma once
/// \file
/// Speedup: turns a masked TorchScript model into a physically smaller one (NNI's ModelSpeedup,
/// reference §4.1, done on the scripted graph). Channels that the masks zero are found by
/// following them through the inlined forward graph; the Conv2d, Linear and BatchNorm layers
/// that produce or consume them are rebuilt with smaller weights, and the result is a plain
/// TorchScript module (torch.nn classes, no Lithe ops) that loads in C++ and Python.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/io/mask_file.h"

namespace torch::jit {
struct Module;
}

namespace lithe::host {

/// One layer whose tensors changed shape.
struct ShrunkLayer {
  std::string module;   ///< dotted name
  std::string op_type;  ///< "Conv2d", "Linear", "BatchNorm2d", ...
  std::vector<int64_t> weight_shape_before;
  std::vector<int64_t> weight_shape_after;
  std::vector<int64_t> kept_outputs;  ///< output channels kept (original indices), all if unchanged
  std::vector<int64_t> kept_inputs;   ///< input channels kept (original indices), all if unchanged
};

/// Why some zeroed channels stay: the op or layer that needs them, and the rule.
struct SpeedupBlock {
  std::string where;   ///< module name and/or graph op, e.g. "fc1 (aten::linear)" or "model output"
  std::string reason;  ///< e.g. "the model's output keeps every channel"
  int64_t channels = 0;  ///< zeroed channels that stay because of it
};

/// A BatchNorm whose removed channels were not zero in the masked model: the masked model adds
/// β − μ·γ/√(σ²+ε) there, the smaller model has no such channel (as in NNI).
struct BatchNormShift {
  std::string module;
  int64_t channels = 0;       ///< removed channels with a non-zero shift
  double max_abs_shift = 0;   ///< largest |β − μ·γ/√(σ²+ε)| among them
};

struct SpeedupResult {
  /// The smaller model (its own tensors; eval mode). Every module has its own class type, so it
  /// can be edited or saved independently of the input.
  std::shared_ptr<torch::jit::Module> module;
  /// The masked copy of the input the smaller model was built from and checked against (the
  /// baseline for size and latency comparisons).
  std::shared_ptr<torch::jit::Module> masked;
  std::vector<ShrunkLayer> layers;  ///< in graph order
  std::vector<SpeedupBlock> blocked;
  std::vector<BatchNormShift> batchnorm_shifts;
  /// On the example input: max |smaller − masked| over the outputs, and the same against the
  /// masked model with the removed BatchNorm channels also zeroed (γ = β = 0), which isolates
  /// the BatchNorm shift: a correct speedup makes the second ~0 (float reassociation only).
  double max_abs_diff = 0;
  double max_abs_diff_without_bn_shift = 0;
  double reference_max_abs = 0;  ///< max |masked model's output|, the scale of the differences

  /// Whether the smaller model computes what the masked one computes apart from the reported
  /// BatchNorm shift: max_abs_diff_without_bn_shift <= tolerance·max(1, reference_max_abs).
  bool explained(double tolerance = 1e-4) const;
};

/// Applies `masks` (NNI mask.pth layout: weight and bias multiplied, as
/// apply_compression_results) to a copy of `model`, finds removable channels, and builds the
/// smaller model; `model` itself is never changed. `example_input` fixes the shapes (it is run
/// once through the masked and the smaller model, in eval mode, without gradients).
/// A channel is removable when every layer that reads it sees zero there (a filter whose weight
/// and bias masks are all zero, a BatchNorm whose γ and β masks are zero, through ops that keep
/// zero at zero); BatchNorm between a pruned filter and its readers is passed through (NNI's
/// rule, reported in `batchnorm_shifts`). Depthwise convolutions follow their input channels;
/// grouped ones keep every group equally wide (the lowest-index removals of each group stay
/// removed, as NNI's GroupMaskConflict). Where an op the pass does not understand, a constant
/// reshape size, or the model's input or output needs a channel, that channel stays and
/// `blocked` says where and why; everything else still shrinks. Throws sdk::Error
/// (kInvalidModel / kShapeMismatch naming the layer) for masks that do not fit the model, and
/// kUnsupported when the forward cannot be analysed at all.
/// `masks_source` names the masks in messages (the mask file's path).
SpeedupResult speedup_model(const torch::jit::Module& model, const NamedMasks& masks,
                            const at::Tensor& example_input,
                            const std::string& masks_source = "the masks");

}  // namespace lithe::host
