#pragma once
// Internal to speedup: removing whole heads of the attentions torchvision writes out itself over
// windows of tokens: Swin's shifted-window attention (ShiftedWindowAttention and
// ShiftedWindowAttentionV2) and MaxViT's (RelativePositionalMultiHeadAttention, over window and
// grid partitions).
//
// Such a layer projects its input with one Linear (Swin's `qkv`, MaxViT's `to_qkv`) whose rows
// are the q, k and v parts of num_heads heads of head_dim rows each, adds a per-head relative
// position bias (a table column per head; in Swin v2 a row per head of `cpb_mlp`'s last Linear,
// and a per-head logit scale), and mixes the heads back with a Linear (`proj`, `merge`). A head
// whose value rows (weight and bias) are zero adds nothing to the output: it goes with its q, k
// and v rows, the output projection's columns that read it, and its bias and scale entries.
// torchvision's forwards take the merged width (and Swin's the head width) from the input width,
// which is no longer true with fewer heads, so a layer that loses heads gets a forward of its
// own: the same attention over num_heads × head_dim inner channels, calling the layer's own
// position-bias method.

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

#include "attention_heads.h"
#include "channel_flow.h"
#include "lithe/host/speedup/speedup.h"

namespace lithe::host::speedup_detail {

/// One class of window attention: its members and what its rebuilt forward is.
struct WindowAttentionKind {
  std::string type;      ///< class name
  std::string qkv;       ///< the fused q, k, v Linear
  std::string proj;      ///< the output projection (Linear)
  std::string heads;     ///< the int attribute holding the head count
  std::string table;     ///< a bias table parameter [positions, heads], or ""
  std::string bias_mlp;  ///< a Linear with one output row per head, or ""
  std::string scale;     ///< a parameter [heads, 1, 1], or ""
  /// The graph ops of its forward at which the channel plan keeps the projection's zero rows.
  std::vector<std::string> plan_places;
  enum class Forward { kSwin, kSwinCosine, kPartition } forward = Forward::kSwin;
};

/// The heads one window attention keeps.
struct WindowHeadPlan {
  HeadPlan heads;                           ///< module, num_heads, head_dim and the heads kept
  const WindowAttentionKind* kind = nullptr;  ///< its class (static storage)
};

/// The window attention layers of `masked` (masks multiplied in, eval mode) with heads whose
/// value rows are zero, and that can lose them: the fused projection has a bias, and the channel
/// plan changes none of the projections and the position MLP. A layer with such heads that
/// cannot lose them is added to `blocked` with the reason. The plan's own entries for the heads
/// that go (the projection's zero rows, kept where the forward splits them into heads) are taken
/// out of `blocked`, or reduced to the zero rows that stay.
std::vector<WindowHeadPlan> plan_window_heads(const torch::jit::Module& masked,
                                              const ChannelPlan& plan,
                                              std::vector<SpeedupBlock>& blocked);

/// The modules remove_window_heads changes (for clone_module's `changing`).
std::vector<std::string> window_head_modules(const WindowHeadPlan& plan);

/// Gives each planned layer of `module` (from clone_module with window_head_modules of every
/// plan in `changing`) its smaller tensors, num_heads and the forward over the kept heads.
/// Returns the changed Linear layers: the fused projection (rows), the output projection
/// (columns), and in Swin v2 cpb_mlp's last Linear (rows).
std::vector<ShrunkLayer> remove_window_heads(torch::jit::Module& module,
                                             const std::vector<WindowHeadPlan>& plans);

}  // namespace lithe::host::speedup_detail
