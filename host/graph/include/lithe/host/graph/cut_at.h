#pragma once
/// \file
/// Where a forward cut at one layer divides the forward (cut_forward_graph, Model::cut_forward).

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

}  // namespace lithe::host
