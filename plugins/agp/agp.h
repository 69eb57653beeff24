#pragma once
// AGP (automated gradual pruning, NNI's AGPPruner). Declared for unit tests, which link this
// plugin's object library and register it into their own registry.

#include <lithe/sdk/registry.h>

#include <string>

namespace lithe::plugins::agp {

/// The registered masker an NNI `pruning_algorithm` name refers to: NNI's short names "l1",
/// "l2" and "taylorfo" become Lithe's "l1_filter", "l2_filter" and "taylor_fo"; other names
/// are returned unchanged.
std::string masker_name_for(const std::string& pruning_algorithm);

/// Registers pruner "agp".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::agp
