#pragma once
// Internal to the host: a module's forward cut in two at one layer, for evaluations repeated
// while only that layer's parameters change (sensitivity analysis: one layer, many masks, the
// same data). The part that does not depend on the layer runs once per input; each evaluation
// runs the rest.
//
// The cut is made on the inlined forward graph by dependence, not by position: a node belongs
// to the suffix when it reads the layer's attributes or a value the suffix computes, or may read
// memory the suffix writes in place, or (once the layer's first read is passed) writes in place
// or has side effects at all. Everything else is the prefix. The values the prefix hands over
// are the boundary; those the suffix writes in place are cloned before each run, so one cached
// prefix result serves any number of suffix runs.
//
// A cut after the layer (CutAt::kLayerOutput) moves the layer's one convolution or linear op
// into the prefix and hands its output over: for masks that zero whole output channels (filter
// pruning), each evaluation then replaces those channels of the kept output and runs only what
// follows, without recomputing the layer at all (the first layer included, which a cut before
// it cannot help: it reads only the input).

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lithe/host/graph/cut_at.h"

namespace lithe::host {

struct ForwardCutGraphs {
  /// (self, the forward's inputs...) -> a tuple of the boundary values.
  std::shared_ptr<torch::jit::Graph> prefix;
  /// (self, the boundary values...) -> what forward returns.
  std::shared_ptr<torch::jit::Graph> suffix;
  /// Per boundary value: whether the suffix writes to it in place (a tensor; clone it before
  /// each suffix run).
  std::vector<bool> written;
  /// CutAt::kLayerOutput: where the boundary holds the layer op's output.
  std::optional<LayerOutputSlot> layer_output;
};

/// Cuts `module`'s forward at submodule `layer` (dotted name). nullopt, with the reason in
/// `*why_not`, when the forward never reads the layer, assigns module attributes
/// (`prim::SetAttr`), still calls methods after inlining, writes in place to a boundary value
/// that is not a tensor or that may alias another boundary value, or when the layer is read
/// before anything else happens (nothing to cache). `module`'s parameters are read when the
/// graphs run (the module is passed as `self`), so changing the layer's weights in place between
/// suffix runs is what the cut is for; changing any other parameter invalidates prefix results.
/// CutAt::kLayerOutput also needs the layer's weights read by exactly one op, aten::conv1d/2d/3d
/// or aten::linear, taking them as (weight, bias or None); otherwise nullopt with the reason.
/// The layer's weights are then read by the prefix only: a prefix result holds the layer's
/// output for the weights the layer had when the prefix ran.
std::optional<ForwardCutGraphs> cut_forward_graph(const torch::jit::Module& module,
                                                  const std::string& layer,
                                                  std::string* why_not,
                                                  CutAt at = CutAt::kLayerInput);

}  // namespace lithe::host
