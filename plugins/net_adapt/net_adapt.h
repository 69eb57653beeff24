#pragma once
// NNI's NetAdaptPruner (v2.0). Declared for unit tests, which link this plugin's object library
// and register it into their own registry.

#include <lithe/sdk/registry.h>

namespace lithe::plugins::net_adapt {

/// Registers pruner "net_adapt".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::net_adapt
