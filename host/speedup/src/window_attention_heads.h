#pragma once
// Internal to speedup: removing whole heads of Swin's shifted-window attention (torchvision's
// ShiftedWindowAttention and ShiftedWindowAttentionV2).
//
// Such a layer projects its input with one Linear `qkv` whose rows are the q, k and v parts of
// num_heads heads of head_dim rows each, adds a per-head relative position bias (a table column
// per head in v1; in v2 a row per head of `cpb_mlp`'s last Linear, and a per-head logit scale),
// and mixes the heads back with the Linear `proj`. A head whose value rows (weight and bias) are
// zero adds nothing to the output: it goes with its q, k and v rows, proj's columns that read it,
// and its bias and scale entries. torchvision's forward reads the head width as the input width
// divided by num_heads, which is no longer true with fewer heads, so a layer that loses heads
// gets a forward of its own: the same windowed attention over num_heads × head_dim inner channels
// (head_dim written in), calling the layer's own get_relative_position_bias().

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

#include "attention_heads.h"
#include "channel_flow.h"
#include "lithe/host/speedup/speedup.h"

namespace lithe::host::speedup_detail {

/// The heads one shifted-window attention keeps.
struct WindowHeadPlan {
  HeadPlan heads;       ///< module, num_heads, head_dim and the heads kept
  bool cosine = false;  ///< v2: cosine attention with logit_scale, bias from cpb_mlp
};

/// The shifted-window attention layers of `masked` (masks multiplied in, eval mode) with heads
/// whose value rows are zero, and that can lose them: qkv has a bias, and the channel plan
/// changes none of qkv, proj and (v2) cpb_mlp's last Linear. A layer with such heads that cannot
/// lose them is added to `blocked` with the reason. The plan's own entries for the heads that go
/// (qkv's zero rows, kept at the forward's reshape) are taken out of `blocked`, or reduced to the
/// zero rows that stay.
std::vector<WindowHeadPlan> plan_window_heads(const torch::jit::Module& masked,
                                              const ChannelPlan& plan,
                                              std::vector<SpeedupBlock>& blocked);

/// The modules remove_window_heads changes (for clone_module's `changing`).
std::vector<std::string> window_head_modules(const WindowHeadPlan& plan);

/// Gives each planned layer of `module` (from clone_module with window_head_modules of every
/// plan in `changing`) its smaller tensors, num_heads and the forward over the kept heads.
/// Returns the changed Linear layers: qkv (rows), proj (columns), and in v2 cpb_mlp's last
/// Linear (rows).
std::vector<ShrunkLayer> remove_window_heads(torch::jit::Module& module,
                                             const std::vector<WindowHeadPlan>& plans);

}  // namespace lithe::host::speedup_detail
