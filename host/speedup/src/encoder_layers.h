#pragma once
// Internal to speedup: nn.TransformerEncoderLayer written as the module calls it is made of.
//
// In evaluation with grad off, a stock encoder layer runs one fused kernel,
// aten::_transformer_encoder_layer_fwd, that reads its submodules' weights directly: its
// linear1 / linear2 / self_attn are never called, so neither channel flow (feed-forward
// channels) nor head removal (which replaces self_attn's forward) can reach them, and the kernel
// requires full-width tensors. Speedup therefore first gives each such layer the forward of its
// own non-fused path: self_attn called with need_weights=False (which still runs nn.
// MultiheadAttention's inference kernel), norm1 / norm2, and the feed-forward block through
// linear1, the activation and linear2, with its dropouts. The layer computes the same function;
// the smaller model keeps that forward.

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

namespace lithe::host::speedup_detail {

/// Dotted names of the nn.TransformerEncoderLayer modules of `module` whose forward calls the
/// fused kernel and can be written as its non-fused path with the same function: the stock
/// forward's signature and _sa_block / _ff_block methods, and an activation the kernel computes
/// alike (ReLU or exact GELU; tanh-approximated GELU differs between torch's two paths, so such
/// a layer stays fused, and speedup keeps what only its kernel reads).
std::vector<std::string> fused_encoder_layers(const torch::jit::Module& module);

/// Replaces the forward of each layer named in `layers` (from fused_encoder_layers; `module` from
/// clone_module with every one of them in `changing`) by its non-fused path.
void unfuse_encoder_layers(torch::jit::Module& module, const std::vector<std::string>& layers);

}  // namespace lithe::host::speedup_detail
