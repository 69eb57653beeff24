#pragma once
// Internal to speedup: how the layers sit in the channel spaces, and the plan made from them
// once the spaces are settled (what each layer keeps of its inputs and outputs).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "channel_flow.h"
#include "channel_spaces.h"

namespace lithe::host::speedup_detail {

/// One module's place in the spaces (a module called twice has one place: its calls' spaces
/// are joined).
struct LayerUse {
  LayerKind kind;
  std::string op_type;
  int in_space = -1;
  int out_space = -1;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t groups = 1;
};

/// The plan for the layers in `order` (the order the graph first calls them) from their uses and
/// the settled `spaces`, with every block that kept zero channels.
ChannelPlan make_plan(const std::vector<std::string>& order,
                      const std::map<std::string, LayerUse>& uses, ChannelSpaces& spaces);

}  // namespace lithe::host::speedup_detail
