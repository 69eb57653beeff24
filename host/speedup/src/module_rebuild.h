#pragma once
// Internal to speedup: rebuilding TorchScript layers with fewer channels.
//
// Scripted modules of equal configuration share one class type, and a class type carries the
// layer's constants (in_channels, groups, ...) and its compiled methods. Shrinking one of two
// identical depthwise convolutions therefore needs its own type: the model is first copied with
// a fresh class type for every instance that changes (and its ancestors, whose attribute types
// name it), then each planned layer gets its smaller tensors, its constants and (for depthwise)
// the groups constant in its graph. Unchanged instances keep sharing types as before.

#include <torch/csrc/jit/api/module.h>

#include <map>
#include <set>
#include <string>

#include "channel_flow.h"

namespace lithe::host::speedup_detail {

/// A deep copy of `module` (own tensors and class types). Modules named in `changing` (dotted
/// names) and their ancestors get a class type of their own; the other instances share copied
/// types as the original shares its types. Throws sdk::Error(kUnsupported) for modules it
/// cannot copy (forward hooks, module interfaces).
torch::jit::Module clone_module(const torch::jit::Module& module,
                                const std::set<std::string>& changing = {});

/// Gives every changed layer of `plan` its smaller tensors and constants, in place. `module`
/// must come from clone_module with every changed layer of `plan` in `changing`. Returns what
/// changed, in plan order.
std::vector<ShrunkLayer> shrink_layers(torch::jit::Module& module, const ChannelPlan& plan);

}  // namespace lithe::host::speedup_detail
