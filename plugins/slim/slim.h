#pragma once
// Network slimming (NNI's SlimPruner): one global threshold over the BatchNorm2d scaling factors
// of all selected layers. Declared for unit tests, which link this plugin's object library and
// register it into their own registry.

#include <lithe/sdk/registry.h>

namespace lithe::plugins::slim {

/// Registers pruner "slim".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::slim
