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

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "channel_flow.h"

namespace lithe::host::speedup_detail {

/// A deep copy of `module` (own tensors and class types). Modules named in `changing` (dotted
/// names) and their ancestors get a class type of their own; the other instances share copied
/// types as the original shares its types. Throws sdk::Error(kUnsupported) for modules it
/// cannot copy (forward hooks, module interfaces).
torch::jit::Module clone_module(const torch::jit::Module& module,
                                const std::set<std::string>& changing = {});

/// Replaces tensor attribute `name` by change(old) (contiguous, own storage, the old one's
/// requires_grad and parameter/buffer role); nothing when the module has no such tensor.
void set_tensor(torch::jit::Module& module, const std::string& name,
                const std::function<at::Tensor(const at::Tensor&)>& change);

/// Sets int `name`: a class constant (torch.nn keeps sizes in __constants__) or an int attribute.
void set_int(torch::jit::Module& module, const std::string& name, int64_t value);

/// Int `name`: a class constant or an int attribute (the two places set_int writes).
int64_t int_constant_or_attr(const torch::jit::Module& module, const std::string& name);

/// Defines `helper` (a method named `helper_name`, TorchScript source compiled for `module`'s
/// class type) and moves its graph into `module`'s forward, whose body it replaces; the helper
/// is removed again. The helper must take forward's arguments, with the same types, so that
/// callers of the module stay as they are. `module`'s type must be its own (clone_module with
/// it in `changing`). Throws sdk::Error(kInternal) naming the first argument that differs.
void replace_forward(torch::jit::Module& module, const std::string& helper,
                     const std::string& helper_name);

/// Every `placeholder` in `text` replaced by `literal` (a rebuilt forward's source with the
/// layer's constants and signature written in).
void substitute(std::string& text, const std::string& placeholder, const std::string& literal);

/// Whether `module`'s method `method` exists and takes an argument named `argument` (stock
/// forwards gained arguments across torch releases: MultiheadAttention's is_causal).
bool method_takes(const torch::jit::Module& module, const std::string& method,
                  const std::string& argument);

/// 0, 1, ..., n - 1.
std::vector<int64_t> all(int64_t n);

/// Gives every changed layer of `plan` its smaller tensors and constants, in place. `module`
/// must come from clone_module with every changed layer of `plan` in `changing`. Returns what
/// changed, in plan order.
std::vector<ShrunkLayer> shrink_layers(torch::jit::Module& module, const ChannelPlan& plan);

}  // namespace lithe::host::speedup_detail
