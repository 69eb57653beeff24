#pragma once
// Internal to the host: a TorchScript module's forward as one inlined graph in which every node
// still knows which module call it came from, and the tensors its values take on one input.
// The FLOPs counter and the speedup pass read layers, shapes and channel flow from it.

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace lithe::host::graph_trace {

/// One module call a node sits in: the dotted module name ("layer1.conv1") and its class name
/// ("Conv2d"). The root's own forward is the scope {"", root class name}.
struct Scope {
  std::string module;
  std::string op_type;
  std::string qualified_type;  ///< e.g. "__torch__.torch.nn.modules.conv.Conv2d"
  /// Identifies this call of the module: equal for the nodes of one call, different for two
  /// calls of the same module from different places (its call sites' source positions).
  std::string call;
};

/// A copy of `module`'s forward graph with every method call inlined and the control flow its
/// attributes fix folded away (constant_folding::fold_module_attributes: the graph describes the
/// module in its current mode). The module is not changed and not run. Throws
/// sdk::Error(kUnsupported) when it has no forward or a call cannot be inlined (calls through
/// module interfaces).
std::shared_ptr<torch::jit::Graph> inline_forward(const torch::jit::Module& module);

/// The chain of module calls (outermost first, the root excluded) that `node` was inlined from,
/// e.g. {{"layer1", "BasicBlock"}, {"layer1.conv1", "Conv2d"}}; empty for the root's own ops.
/// Calls a module makes to its own methods (self._conv_forward) add no entry.
std::vector<Scope> scopes_of(const torch::jit::Node* node);

/// The innermost module call of `node`, or nullopt for the root's own ops.
std::optional<Scope> innermost_scope(const torch::jit::Node* node);

/// The dotted name of the module a value holds when it is a chain of GetAttr from the graph's
/// first input (self): "" for self, "layer1.conv1" for self.layer1.conv1; nullopt otherwise.
std::optional<std::string> module_path(const torch::jit::Value* value);

/// Whether a value of `type` is or holds tensors: a tensor, or a list, tuple, optional or dict
/// with tensors inside (what channel flow and the FLOPs counter follow; ints and strings not).
bool holds_tensors(const c10::TypePtr& type);

/// The one-line message of an error from running a model: the last line of a TorchScript
/// interpreter error (a traceback with the error itself last), the first line of anything else
/// (libtorch's c10::Error puts a backtrace after it).
std::string interpreter_message(const std::exception& error);

/// The tensors the values of `graph`'s top-level block (inputs included; not the values inside
/// If/Loop blocks) take when it runs on `module` and `input`, under no_grad. The module must be in
/// the mode the caller wants measured (eval() for shapes as deployed); it is run once as it is.
/// Ops that write in place make earlier values alias later ones: read shapes from them, and
/// contents only where no in-place op follows.
/// With `scalars`, the bool, int and float values of the top-level block are captured there too.
using ValueTensors = std::unordered_map<const torch::jit::Value*, at::Tensor>;
using ValueScalars = std::unordered_map<const torch::jit::Value*, c10::IValue>;
ValueTensors run_and_capture(const torch::jit::Module& module,
                             const std::shared_ptr<torch::jit::Graph>& graph,
                             const at::Tensor& input, ValueScalars* scalars = nullptr);

/// `module`'s forward as it runs on `input`: inline_forward's graph with the tensor ranks it reads
/// folded too (constant_folding::fold_tensor_ranks, repeated while a fold uncovers another), and
/// the tensors its top-level values take (run_and_capture). The module must be in the mode the
/// caller wants described, as for both.
/// With InputShape::kFixed (a model described for exactly `input`'s shape, as ONNX export does:
/// its shapes are static), the scalars that shapes alone decide are folded as well, and with them
/// the branches they decide (constant_folding::fold_shape_scalars), and a tuple built and then
/// unpacked or indexed by a constant is replaced by its items (torch's LowerSimpleTuples).
struct Trace {
  std::shared_ptr<torch::jit::Graph> graph;
  ValueTensors values;
};
enum class InputShape { kAny, kFixed };
Trace trace_forward(const torch::jit::Module& module, const at::Tensor& input,
                    InputShape shape = InputShape::kAny);

}  // namespace lithe::host::graph_trace
