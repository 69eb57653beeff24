#pragma once
// ADMM pruning (NNI v2.0's ADMMPruner). Declared for unit tests, which link this plugin's object
// library and register it into their own registry.

#include <lithe/sdk/registry.h>

namespace lithe::plugins::admm {

/// Registers pruner "admm".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::admm
