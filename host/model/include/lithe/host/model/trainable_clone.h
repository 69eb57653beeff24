#pragma once
/// \file
/// A deep copy of a TorchScript module that can be trained. torch::jit::Module::clone() copies
/// each parameter with Tensor::clone() under grad mode, so a parameter that requires grad comes
/// back as a non-leaf tensor (grad_fn CloneBackward) that no optimizer accepts ("can't optimize
/// a non-leaf Tensor").

#include <torch/script.h>

namespace lithe::host {

/// `module` deep-copied (parameters, buffers, attributes), every parameter a leaf that requires
/// grad exactly when the original's does.
torch::jit::Module trainable_clone(const torch::jit::Module& module);

}  // namespace lithe::host
