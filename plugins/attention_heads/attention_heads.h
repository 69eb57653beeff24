#pragma once
// Attention-head pruning (NNI 2.5's TransformerHeadPruner, one-shot weight criteria) of
// nn.MultiheadAttention layers. Declared for unit tests, which link this plugin's object library
// and register it into their own registry.

#include <ATen/core/Tensor.h>
#include <lithe/sdk/registry.h>

#include <cstdint>

namespace lithe::plugins::attention_heads {

/// How a head is ranked (NNI's ranking_criterion "l1_weight" / "l2_weight").
enum class Criterion { kL1Weight, kL2Weight };

/// Importance of each head of a fused input projection `in_proj` [3·H·d, E] (queries, keys and
/// values stacked, as nn.MultiheadAttention's in_proj_weight) with `head_dim` = d: the norm of
/// the head's query rows plus that of its key rows plus that of its value rows (NNI's
/// L1/L2WeightHeadMasker). Returns a float32 tensor [H].
at::Tensor head_importance(const at::Tensor& in_proj, int64_t head_dim, Criterion criterion);

/// Registers masker and pruner "transformer_head" (options head_hidden_dim, ranking_criterion).
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::attention_heads
