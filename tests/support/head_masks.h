#pragma once
// Masks that silence whole attention heads of fused q, k, v projections, for the speedup and
// ONNX Runtime tests of head removal.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/io/mask_file.h"
#include "lithe/sdk/layer.h"

namespace lithe::test {

/// Masks of a fused q, k, v Linear [3·heads·head_dim, embed] with bias that zero every q, k and v
/// row of head `head`, weight and bias.
inline sdk::Masks silenced_head(int64_t heads, int64_t head_dim, int64_t embed, int64_t head) {
  sdk::Masks m;
  m.weight = at::ones({3 * heads * head_dim, embed});
  m.bias = at::ones({3 * heads * head_dim});
  m.weight.view({3, heads, -1}).select(1, head).zero_();
  m.bias->view({3, heads, -1}).select(1, head).zero_();
  return m;
}

/// silenced_head for each of `layers`, all of the same shape.
inline host::NamedMasks silenced_heads(const std::vector<std::string>& layers, int64_t heads,
                                       int64_t head_dim, int64_t embed, int64_t head) {
  host::NamedMasks masks;
  for (const std::string& layer : layers) {
    masks.emplace_back(layer, silenced_head(heads, head_dim, embed, head));
  }
  return masks;
}

}  // namespace lithe::test
