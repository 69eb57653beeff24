#pragma once
/// \file
/// Where a forward cut at one layer divides the forward (cut_forward_graph, Model::cut_forward).

#include <cstddef>
#include <cstdint>

namespace lithe::host {

/// Where the forward is cut at a layer.
enum class CutAt {
  /// Before the layer: the part after the cut runs the layer with its current weights, so any
  /// change of them is seen.
  kLayerInput,
  /// After the layer's one convolution or linear op: the part after the cut starts from the
  /// op's output as it was computed when the part before the cut ran. A change that zeroes
  /// whole output channels is then applied to that output instead of recomputing the layer.
  kLayerOutput,
};

/// A cut after the layer: where the values handed over (a tuple) hold the layer op's output,
/// and the dimension of that output's channels (1 for a convolution, -1 for a linear op; the
/// weight's dimension 0).
struct LayerOutputSlot {
  size_t index = 0;
  int64_t channel_dim = 0;
};

}  // namespace lithe::host
