#pragma once
// Internal to speedup: which channels of which layers can be removed, read from the inlined
// forward graph of a masked TorchScript model.
//
// Every activation tensor of rank >= 2 has a channel axis: dim 1, unless an op moved it (a permute
// to channel-last, a Linear over the last axis of [N, tokens, features]). Ops that keep channels
// aligned (element-wise ops, pooling, BatchNorm, depthwise convolutions, adds of equal shapes)
// put their inputs and outputs in one "channel space" (channel_spaces.h): removing channel c
// there removes it from all of those tensors at once. Convolutions and Linear start a new space
// for their output and read their input's space through their weight; flatten and channel-wise
// cat relate spaces by an index map. What each op does is the op table's (lithe/host/graph/
// op_table.h); channel_flow.cpp applies it. For each tensor the pass knows which channels are
// exactly zero (a filter whose weight and bias are zero, a BatchNorm with γ = β = 0, zero kept by
// relu, pooling, ...); a channel is removable when every layer that reads the space sees zero
// there. BatchNorm lets a zero channel through as zero (NNI's rule), although it adds
// β − μ·γ/√(σ²+ε); speedup reports that shift. Anything the pass does not understand keeps every
// channel of the spaces it touches, and says so. channel_plan.h turns the settled spaces into
// what each layer keeps.

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/api/module.h>

#include <map>
#include <string>
#include <vector>

#include "lithe/host/speedup/speedup.h"

namespace lithe::host::speedup_detail {

/// kGroupedConv: 1 < groups < channels; every group keeps the same number of inputs and of
/// outputs, so the groups count stays.
enum class LayerKind { kConv, kDepthwiseConv, kGroupedConv, kLinear, kBatchNorm };

/// What to keep of one layer; empty `keep_*` means "every channel".
struct LayerPlan {
  LayerKind kind;
  std::string op_type;
  int64_t in_channels = 0;   ///< conv / linear input size, BatchNorm / depthwise channels
  int64_t out_channels = 0;  ///< conv / linear output size (== in_channels for the others)
  int64_t groups = 1;
  std::vector<int64_t> keep_in;
  std::vector<int64_t> keep_out;
  bool changed() const;
};

struct ChannelPlan {
  std::map<std::string, LayerPlan> layers;  ///< by module name
  std::vector<std::string> layer_order;      ///< modules in the order the graph first calls them
  std::vector<SpeedupBlock> blocked;
};

/// Reads the plan from `masked` (masks already multiplied into its weights) and the masks
/// themselves (which filters are pruned). `masked` is run once on `input`; it must be in eval
/// mode. Throws sdk::Error(kUnsupported) when the graph cannot be inlined or run.
ChannelPlan plan_channels(const torch::jit::Module& masked, const NamedMasks& masks,
                          const at::Tensor& input);

}  // namespace lithe::host::speedup_detail
