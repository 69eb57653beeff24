// The plan: each layer keeps the channels its spaces keep. BatchNorm and depthwise convolutions
// have one space for both sides.
#include "channel_plan.h"

#include <utility>

namespace lithe::host::speedup_detail {

ChannelPlan make_plan(const std::vector<std::string>& order,
                      const std::map<std::string, LayerUse>& uses, ChannelSpaces& spaces) {
  ChannelPlan out;
  for (const std::string& module : order) {
    const LayerUse& use = uses.at(module);
    const bool one_space = use.kind == LayerKind::kBatchNorm ||
                           use.kind == LayerKind::kDepthwiseConv;
    LayerPlan p{use.kind, use.op_type, use.in_channels, use.out_channels, use.groups, {}, {}};
    if (use.in_space >= 0 && !one_space) {
      p.keep_in = spaces.kept(use.in_space);
    }
    if (use.out_space >= 0) {
      p.keep_out = spaces.kept(use.out_space);
    }
    if (one_space) {
      p.keep_in = p.keep_out;
    }
    out.layers.emplace(module, std::move(p));
    out.layer_order.push_back(module);
  }
  out.blocked = spaces.costly_blocks();
  return out;
}

}  // namespace lithe::host::speedup_detail
