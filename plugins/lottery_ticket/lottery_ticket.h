#pragma once
// Lottery Ticket pruning (NNI's LotteryTicketPruner). Declared for unit tests, which link this
// plugin's object library and register it into their own registry.

#include <lithe/sdk/registry.h>

#include <cstdint>

namespace lithe::plugins::lottery_ticket {

/// Sparsity of pruning round `round` (0-based) for a final `sparsity` reached after
/// `prune_iterations` rounds: max(1 − ((1 − sparsity)^(1/prune_iterations))^round, 0), exactly
/// NNI's formula (round 0 → 0, round prune_iterations → sparsity up to rounding).
double round_sparsity(double sparsity, int64_t prune_iterations, int64_t round);

/// Registers pruner "lottery_ticket" (it prunes with the registered masker "level").
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::lottery_ticket
