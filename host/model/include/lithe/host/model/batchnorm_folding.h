#pragma once
/// \file
/// BatchNorm folding for TorchScript models: a BatchNorm2d that only normalizes the output of
/// the convolution called just before it is merged into that convolution's weight and bias
/// (evaluation form: w·γ/√(var+ε), (b − mean)·γ/√(var+ε) + β) and its call is removed from the
/// forward. Quantizing the result puts the output grid where the int8 kernel writes it (after
/// the normalization), so `quantized::conv2d` computes the whole conv + BatchNorm (+ ReLU).

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

namespace lithe::host {

struct FoldedBatchNorm {
  std::string convolution;  ///< dotted module name
  std::string batchnorm;    ///< dotted module name; its module stays, never called
};

/// A BatchNorm2d call that was not folded, and why (the reason names the rule).
struct UnfoldedBatchNorm {
  std::string batchnorm;
  std::string reason;
};

struct BatchNormFolding {
  std::vector<FoldedBatchNorm> folded;
  std::vector<UnfoldedBatchNorm> kept;
};

/// Folds, in place, every BatchNorm2d (torch.nn's, with running statistics) whose forward call
/// reads the output of a Conv2d (torch.nn's, or a class that adds nothing) called in the same
/// method of the same module, where nothing else reads that output. A module class's forward is
/// shared by all its instances, so a pattern is folded only when it can be folded in every
/// instance (each its own convolution, called once). Weights change from float32 to their
/// folded values computed in float64; a convolution without a bias gets one. The model computes
/// the same in evaluation mode (up to float32 rounding); in training mode the BatchNorm no
/// longer normalizes by batch statistics (fold after training, or train folded).
BatchNormFolding fold_batchnorms(torch::jit::Module& model);

}  // namespace lithe::host
