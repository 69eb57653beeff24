// The inlined forward graph with module-call scopes, and the tensors its values take. Scopes come
// from the InlinedCallStack that jit::Inline records on every node it copies: each entry of a call
// through `self.<child>` carries the child's attribute name and class, which is all that is
// needed to rebuild dotted module names (calls to the module's own methods are marked "SELF").
#include "lithe/host/graph/graph_trace.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/scope.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/graph/constant_folding.h"
#include "lithe/sdk/error.h"

namespace lithe::host::graph_trace {

namespace jit = torch::jit;

bool holds_tensors(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) {
    return true;
  }
  const auto contained = type->containedTypes();
  return std::any_of(contained.begin(), contained.end(),
                     [](const c10::TypePtr& t) { return holds_tensors(t); });
}

std::string interpreter_message(const std::exception& error) {
  std::string text = error.what();
  // libtorch 2.x's interpreter appends the failing op's C++ backtrace ("Exception raised from
  // ... frame #0: ...") after the message; nothing from there on is for the user.
  if (const size_t backtrace = text.find("\nException raised from "); backtrace != std::string::npos) {
    text.erase(backtrace);
  }
  while (!text.empty() && text.back() == '\n') {
    text.pop_back();
  }
  // The interpreter's errors end with the message after a traceback; libtorch's own (c10::Error)
  // start with it and go on with a C++ backtrace.
  const bool traceback = text.find("Traceback of TorchScript") != std::string::npos ||
                         text.find("failed in the TorchScript interpreter") != std::string::npos;
  const size_t newline = traceback ? text.rfind('\n') : text.find('\n');
  if (newline == std::string::npos) {
    return text;
  }
  return traceback ? text.substr(newline + 1) : text.substr(0, newline);
}

std::shared_ptr<jit::Graph> inline_forward(const jit::Module& module) {
  const c10::optional<jit::Method> forward = module.find_method("forward");
  LITHE_CHECK(forward.has_value(), sdk::Errc::kUnsupported, "the model (",
              module.type()->name() ? module.type()->name()->qualifiedName() : "a module",
              ") has no forward method");
  // A copy: inlining must not touch the module's own (possibly already executed) graph.
  std::shared_ptr<jit::Graph> graph = jit::toGraphFunction(forward->function()).graph()->copy();
  try {
    jit::Inline(*graph);
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kUnsupported,
                     std::string("cannot inline the model's forward: ") +
                         e.what_without_backtrace());
  }
  for (const jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::CallMethod) {
      continue;
    }
    const c10::TypePtr receiver = node->input(0)->type();
    const auto cls = receiver->cast<c10::ClassType>();
    LITHE_CHECK(!(cls && cls->is_module()) && receiver->kind() != c10::TypeKind::InterfaceType,
                sdk::Errc::kUnsupported, "the model's forward calls method '",
                node->s(c10::attr::name), "' of ", receiver->str(),
                " through an interface, so the layers it runs cannot be seen");
  }
  try {
    constant_folding::fold_module_attributes(module, graph);
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kUnsupported,
                     std::string("cannot fold the constant attributes of the model's forward: ") +
                         e.what_without_backtrace());
  }
  return graph;
}

namespace {

// The attribute path from a module of class `parent` to the child a call entry names `name`
// (of class `child`): "name" when it is a direct child; "container.name" when the parent
// reached it through a container it never called (`for block in self.blocks: block(x)` records
// only the list index); empty when not exactly one such path exists.
std::string child_path(const c10::ClassTypePtr& parent, const std::string& name,
                       const c10::ClassTypePtr& child) {
  if (!parent) {
    return name;
  }
  if (parent->hasAttribute(name)) {
    return name;
  }
  std::string found;
  for (size_t i = 0; i < parent->numAttributes(); ++i) {
    const auto container = parent->getAttribute(i)->cast<c10::ClassType>();
    if (!container || !container->is_module() || !container->hasAttribute(name)) {
      continue;
    }
    const auto held = container->getAttribute(name)->cast<c10::ClassType>();
    if (held && child && held != child) {
      continue;
    }
    if (!found.empty()) {
      return std::string();  // two containers hold such a child: ambiguous
    }
    found = parent->getAttributeName(i) + "." + name;
  }
  return found;
}

}  // namespace

std::vector<Scope> scopes_of(const jit::Node* node) {
  std::vector<Scope> scopes;
  const c10::optional<jit::InlinedCallStackPtr> stack = node->callstack();
  if (!stack) {
    return scopes;
  }
  const jit::Graph* graph = node->owningGraph();
  c10::ClassTypePtr parent =
      graph->inputs().empty() ? nullptr : graph->inputs().at(0)->type()->cast<c10::ClassType>();
  std::string path;
  std::string call;
  for (const jit::InlinedCallStackEntry& entry : (*stack)->vec()) {
    const c10::optional<jit::ModuleInstanceInfo>& info = std::get<2>(entry);
    // The call site: its source (two files may share offsets) and its range.
    const jit::SourceRange& range = std::get<1>(entry);
    call += std::to_string(reinterpret_cast<uintptr_t>(range.source().get())) + ":" +
            std::to_string(range.start()) + "-" + std::to_string(range.end()) + ";";
    if (!info || info->instance_name() == "SELF") {
      continue;  // a function, or the module calling its own method
    }
    const c10::ClassTypePtr type = info->class_type();
    std::string step = child_path(parent, info->instance_name(), type);
    if (step.empty()) {
      step = info->instance_name();  // not resolvable from the types: the recorded name
    }
    parent = type;
    path = path.empty() ? step : path + "." + step;
    scopes.push_back({path, type && type->name() ? type->name()->name() : std::string(),
                      type && type->name() ? type->name()->qualifiedName() : std::string(),
                      path + "@" + call});
  }
  return scopes;
}

std::optional<Scope> innermost_scope(const jit::Node* node) {
  std::vector<Scope> scopes = scopes_of(node);
  if (scopes.empty()) {
    return std::nullopt;
  }
  return std::move(scopes.back());
}

std::optional<std::string> module_path(const jit::Value* value) {
  const jit::Graph* graph = value->owningGraph();
  if (!graph->inputs().empty() && value == graph->inputs().at(0)) {
    return std::string();
  }
  const jit::Node* node = value->node();
  const auto cls = value->type()->cast<c10::ClassType>();
  if (node->kind() != c10::prim::GetAttr || !cls || !cls->is_module()) {
    return std::nullopt;
  }
  std::optional<std::string> parent = module_path(node->input());
  if (!parent) {
    return std::nullopt;
  }
  const std::string& atom = node->s(c10::attr::name);
  return parent->empty() ? atom : *parent + "." + atom;
}

ValueTensors run_and_capture(const jit::Module& module, const std::shared_ptr<jit::Graph>& graph,
                             const at::Tensor& input, ValueScalars* scalars) {
  // Run a copy whose single output is a tuple of every top-level tensor value; then map the
  // copy's values back to `graph`'s by position (copy() keeps node and value order).
  std::shared_ptr<jit::Graph> probe = graph->copy();
  std::vector<const jit::Value*> originals;
  std::vector<jit::Value*> captured;
  const auto collect = [&](const jit::Value* original, jit::Value* copy) {
    const c10::TypeKind kind = copy->type()->kind();
    if (kind == c10::TypeKind::TensorType ||
        (scalars != nullptr && (kind == c10::TypeKind::BoolType ||
                                kind == c10::TypeKind::IntType ||
                                kind == c10::TypeKind::FloatType))) {
      originals.push_back(original);
      captured.push_back(copy);
    }
  };
  for (size_t i = 0; i < graph->inputs().size(); ++i) {
    collect(graph->inputs()[i], probe->inputs()[i]);
  }
  auto original_node = graph->nodes().begin();
  auto probe_node = probe->nodes().begin();
  for (; original_node != graph->nodes().end(); ++original_node, ++probe_node) {
    LITHE_INTERNAL_ASSERT(probe_node != probe->nodes().end() &&
                          original_node->kind() == probe_node->kind());
    for (size_t i = 0; i < original_node->outputs().size(); ++i) {
      collect(original_node->outputs()[i], probe_node->outputs()[i]);
    }
  }
  while (!probe->outputs().empty()) {
    probe->eraseOutput(probe->outputs().size() - 1);
  }
  jit::Node* tuple = probe->createTuple(captured);
  probe->appendNode(tuple);
  probe->registerOutput(tuple->output());

  jit::GraphFunction function("lithe_capture", probe, nullptr);
  c10::IValue result;
  try {
    at::NoGradGuard no_grad;
    std::vector<c10::IValue> stack = {module._ivalue(), input};
    // The forward's own schema fills defaults of further arguments and rejects a forward that
    // needs more than one input.
    try {
      module.get_method("forward").function().getSchema().checkAndNormalizeInputs(stack);
    } catch (const c10::Error& e) {
      throw sdk::Error(sdk::Errc::kUnsupported,
                       std::string("Lithe runs the model's forward on one input tensor: ") +
                           e.what_without_backtrace());
    }
    function.run(stack);
    LITHE_INTERNAL_ASSERT(stack.size() == 1);
    result = std::move(stack.front());
  } catch (const sdk::Error&) {
    throw;  // already says what and where (a forward of more than one input)
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kShapeMismatch,
                     std::string("the model's forward failed on an input of shape ") +
                         c10::str(input.sizes()) + ": " + e.what_without_backtrace());
  } catch (const std::runtime_error& e) {  // the interpreter's JITException
    throw sdk::Error(sdk::Errc::kShapeMismatch,
                     std::string("the model's forward failed on an input of shape ") +
                         c10::str(input.sizes()) + ": " + interpreter_message(e));
  }
  const auto& elements = result.toTupleRef().elements();
  LITHE_INTERNAL_ASSERT(elements.size() == originals.size());
  ValueTensors out;
  for (size_t i = 0; i < originals.size(); ++i) {
    if (elements[i].isTensor()) {
      out.emplace(originals[i], elements[i].toTensor());
    } else if (scalars != nullptr &&
               (elements[i].isBool() || elements[i].isInt() || elements[i].isDouble())) {
      (*scalars)[originals[i]] = elements[i];
    }
  }
  return out;
}

Trace trace_forward(const jit::Module& module, const at::Tensor& input, InputShape shape) {
  Trace trace{inline_forward(module), {}};
  if (shape == InputShape::kFixed) {
    // A tuple built and indexed at once (MViT's `_unsqueeze(x, ...)[0]`) is the item itself:
    // the ONNX export has nothing to write for the pair. Only here: the NNI-faithful dependency
    // analysis and speedup read the graph as it is.
    jit::LowerSimpleTuples(trace.graph);
  }
  trace.values = run_and_capture(module, trace.graph, input);
  // Each fold can inline a branch whose own rank checks then reach the top level; nesting is
  // shallow in practice, the bound only guarantees an end.
  for (int round = 0; round < 16; ++round) {
    // Each captured value's graph-unique id: a value created by the fold at the address of a
    // removed one has a new id, so a stale capture can never be attached to it.
    std::unordered_map<const jit::Value*, size_t> ids;
    for (const auto& [value, tensor] : trace.values) {
      ids.emplace(value, value->unique());
    }
    size_t folded = 0;
    try {
      folded = constant_folding::fold_tensor_ranks(trace.graph, trace.values);
    } catch (const c10::Error& e) {
      throw sdk::Error(sdk::Errc::kUnsupported,
                       std::string("cannot fold the tensor ranks of the model's forward: ") +
                           e.what_without_backtrace());
    }
    if (shape == InputShape::kFixed) {
      // The scalars are captured afresh: a branch a fold inlines brings its own to the top
      // level.
      ValueScalars scalars;
      (void)run_and_capture(module, trace.graph, input, &scalars);
      try {
        folded += constant_folding::fold_shape_scalars(trace.graph, scalars);
      } catch (const c10::Error& e) {
        throw sdk::Error(sdk::Errc::kUnsupported,
                         std::string("cannot fold the shape checks of the model's forward: ") +
                             e.what_without_backtrace());
      }
    }
    if (folded == 0) {
      break;
    }
    // Folding removes nodes and moves the nodes of inlined branches up; the values that survive
    // are the same objects with the same tensors. Keep their captures (and drop the removed
    // ones: their addresses may be reused), and run again only when a moved branch made a
    // top-level tensor that was never captured (a rank check that raises makes none).
    ValueTensors kept;
    bool complete = true;
    const auto keep = [&](const jit::Value* v) {
      const auto found = trace.values.find(v);
      if (found != trace.values.end() && ids.at(v) == v->unique()) {
        kept.emplace(v, found->second);
      } else if (v->type()->kind() == c10::TypeKind::TensorType) {
        complete = false;
      }
    };
    for (const jit::Value* v : trace.graph->inputs()) {
      keep(v);
    }
    for (const jit::Node* node : trace.graph->nodes()) {
      for (const jit::Value* v : node->outputs()) {
        keep(v);
      }
    }
    trace.values = complete ? std::move(kept) : run_and_capture(module, trace.graph, input);
  }
  return trace;
}

}  // namespace lithe::host::graph_trace
