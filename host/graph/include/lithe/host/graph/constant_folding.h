#pragma once
// Internal to the host: control flow a model fixes when it is built, folded out of its inlined
// forward graph so that the analyses see the straight graph that actually runs.
//
// Scripted torchvision blocks branch on constant module attributes (`if self.use_res_connect:`,
// `if self.downsample is not None:`, stochastic depth's `if not self.training or p == 0.0:`)
// and on tensor ranks (`if input.dim() != 4: raise`, adaptive pooling's `len(input.size())`).
// Left in, every such `prim::If` looks like data-dependent control flow: the dependency analysis
// merges both arms and speedup stops at it. Tracing bakes the taken arm in; TorchScript keeps
// both. These passes do what tracing does, only where the condition is provably constant.

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstddef>
#include <memory>

#include "lithe/host/graph/graph_trace.h"

namespace lithe::host::constant_folding {

/// Replaces every `prim::GetAttr` of a bool, int, float, str or None attribute (or a list or
/// tuple of such values that nothing in the graph can change) of a submodule of `module` (reached through a chain of GetAttr from the graph's `self`) by a constant holding
/// the attribute's current value, then runs constant propagation and dead-code elimination, so
/// branches on such attributes disappear. `self.training` is folded too: the graph then describes
/// `module` in its current mode (set eval() first to analyse the deployed model). An attribute the
/// graph assigns (`prim::SetAttr` of the same name anywhere) is left alone; weights, buffers and
/// the module are never touched. `graph` must be an inlined copy of `module`'s forward. Returns
/// the number of attribute reads folded.
size_t fold_module_attributes(const torch::jit::Module& module,
                              const std::shared_ptr<torch::jit::Graph>& graph);

/// Replaces `aten::dim(x)` and `aten::len(aten::size(x))` by x's rank where x has a tensor in
/// `values` (what the graph's top-level values took on one input: run_and_capture), then runs
/// constant propagation and dead-code elimination. Only ranks are folded, never sizes: the
/// graph stays valid for any input of the same rank. Returns the number of reads folded; when it
/// is not zero the graph changed, and `values` (keyed by the old values) must be captured again.
size_t fold_tensor_ranks(const std::shared_ptr<torch::jit::Graph>& graph,
                         const graph_trace::ValueTensors& values);

/// For a graph described at one input shape only (ONNX export: its shapes are static): replaces
/// each top-level bool, int or float value that shapes alone decide by the value it took
/// (`scalars`, captured on an input of that shape), then runs constant propagation and dead-code
/// elimination, which also inlines the branches such conditions pick. A value is decided by
/// shapes when everything it is computed from is a constant, a tensor's size, rank, element
/// count, device or dtype, one value's identity with itself, or int/float/bool/list arithmetic
/// on those, through branches and loops whose own conditions are decided (a list counts with
/// every write into it). A tensor's contents, or a forward argument that is not a tensor,
/// disqualify a value; grad mode and autocast count as decided (an exported graph is an
/// inference graph: no grad, no autocast). Swin pads and shifts by sizes (`if window_size[0] >=
/// pad_H: shift_size[0] = 0`) and scales by `(C // num_heads) ** -0.5`; nn.MultiheadAttention
/// picks its fast path by grad mode and devices. The graph is then valid for inputs of that
/// shape only. Returns the number of values folded.
size_t fold_shape_scalars(const std::shared_ptr<torch::jit::Graph>& graph,
                          const graph_trace::ValueScalars& scalars);

}  // namespace lithe::host::constant_folding
