#pragma once
// Internal to speedup: rebuilding TorchScript layers with fewer channels.
//
// Scripted modules of equal configuration share one class type, and a class type carries the
// layer's constants (in_channels, groups, ...) and its compiled methods. Shrinking one of two
// identical depthwise convolutions therefore needs its own type: the model is first copied with
// a fresh class type for every module instance, then each planned layer gets its smaller tensors,
// its constants and (for depthwise) the groups constant in its graph.

#include <torch/csrc/jit/api/module.h>

#include <map>
#include <string>

#include "channel_flow.h"

namespace lithe::host::speedup_detail {

/// A deep copy of `module` (own tensors) in which no two module instances share a class type.
/// Throws sdk::Error(kUnsupported) for modules it cannot copy (forward hooks).
torch::jit::Module clone_with_unique_types(const torch::jit::Module& module);

/// Gives every changed layer of `plan` its smaller tensors and constants, in place. `module`
/// must come from clone_with_unique_types. Returns what changed, in plan order.
std::vector<ShrunkLayer> shrink_layers(torch::jit::Module& module, const ChannelPlan& plan);

}  // namespace lithe::host::speedup_detail
