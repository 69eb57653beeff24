#pragma once
// Internal to speedup: removing whole heads of nn.MultiheadAttention layers.
//
// A head whose value rows (weight and bias of its part of in_proj) are zero adds nothing to the
// attention's output, whatever its queries and keys: its softmax weights multiply zeros. Such a
// head goes with its query, key and value rows and the output projection's columns that read it.
// Stock nn.MultiheadAttention cannot hold fewer heads than embed_dim / head_dim (its kernels
// assume q, k and v as wide as the input), so a layer that loses heads gets a forward of its own,
// the same attention written in plain ops over num_heads × head_dim inner channels; the module
// keeps its class name, attributes and call signature, and the model stays plain TorchScript.

#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "channel_flow.h"
#include "lithe/host/speedup/speedup.h"

namespace lithe::host::speedup_detail {

/// The heads one nn.MultiheadAttention keeps.
struct HeadPlan {
  std::string module;  ///< dotted name
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  std::vector<int64_t> keep;  ///< heads kept, ascending (at least one)
};

/// Rows of the heads `keep` in each of the q, k and v parts of a fused projection
/// [3·num_heads·head_dim, E]: the q rows of every kept head, then the k rows, then the v rows.
std::vector<int64_t> head_rows(int64_t num_heads, int64_t head_dim,
                               const std::vector<int64_t>& keep);

/// The heads of a fused projection `weight` [3·num_heads·head_dim, E] (and its `bias`, if
/// defined) whose value rows are not all zero, ascending: the others add nothing to the output.
std::vector<int64_t> heads_with_values(const at::Tensor& weight, const at::Tensor& bias,
                                       int64_t num_heads);

/// Columns of the heads `keep` in the output projection [E, num_heads·head_dim].
std::vector<int64_t> head_columns(int64_t head_dim, const std::vector<int64_t>& keep);

/// The attention layers of `masked` (masks multiplied in, eval mode) that can lose heads: every
/// call runs the inference kernel without an attention mask and with need_weights=False (the
/// forward below supports only that), the layer is not part of `plan`, and some head's value
/// rows are zero. A layer with zero heads that cannot lose them is added to `blocked` with the
/// reason.
std::vector<HeadPlan> plan_heads(const torch::jit::Module& masked, const ChannelPlan& plan,
                                 std::vector<SpeedupBlock>& blocked);

/// Gives each planned layer of `module` (from clone_module with every planned layer and its
/// out_proj in `changing`) its smaller tensors, num_heads and the forward over the kept heads.
/// Returns the changed layers: each attention (in_proj rows kept) and its out_proj (columns).
std::vector<ShrunkLayer> remove_heads(torch::jit::Module& module,
                                      const std::vector<HeadPlan>& plans);

}  // namespace lithe::host::speedup_detail
