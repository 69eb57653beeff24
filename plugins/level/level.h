#pragma once
// Level pruning (NNI's LevelPruner). Declared for unit tests, which link this plugin's object
// library and register it into their own registry.

#include <lithe/sdk/registry.h>

namespace lithe::plugins::level {

/// Registers masker "level" and pruner "level".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::level
