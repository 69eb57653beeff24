#pragma once
/// \file
/// Which torch.nn convolution a TorchScript module class is. Scripting drops base classes, so a
/// subclass that adds nothing to a convolution (torchvision's video Conv3DSimple and
/// Conv3DNoTemporal) arrives as a class of its own name; its structure says what it is.

#include <ATen/core/jit_type.h>

#include <cstdint>
#include <optional>
#include <string>

namespace lithe::host {

/// "Conv1d", "Conv2d" or "Conv3d" (for `spatial` = 1, 2, 3) when `cls` is torch.nn's own class
/// of that name, or a module class that adds nothing to it: its only tensors are "weight" and
/// "bias", it holds no submodules, and it has in_channels, out_channels and groups (as
/// attributes or constants). nullopt otherwise (any other class, spatial outside 1..3). A
/// forward that does something besides the convolution is not looked at: the caller has seen
/// the convolution op consume the module's weight.
std::optional<std::string> convolution_type(const c10::ClassTypePtr& cls, int64_t spatial);

}  // namespace lithe::host
