#pragma once
// NNI's LinearPruner schedule (v2.6+ iterative pruning). Declared for unit tests, which link this
// plugin's object library and register it into their own registry.

#include <lithe/sdk/registry.h>

namespace lithe::plugins::linear {

/// Registers pruner "linear".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::linear
