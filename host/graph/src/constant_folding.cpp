// Folds constant module attributes and tensor ranks into an inlined forward graph. Both passes
// only replace reads by constants and then let TorchScript's own constant propagation inline the
// branches whose condition became constant (and dead-code elimination drop what they fed), so
// every node that survives is a node of the original graph, with its inlined call stack (the
// module scopes the analyses read) intact.
#include "lithe/host/graph/constant_folding.h"
#include "lithe/host/graph/op_table.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace lithe::host::constant_folding {

namespace jit = torch::jit;

namespace {

void collect_assigned(const jit::Block* block, std::unordered_set<std::string>& names) {
  for (const jit::Node* node : block->nodes()) {
    if (node->kind() == c10::prim::SetAttr) {
      names.insert(node->s(c10::attr::name));
    }
    for (const jit::Block* sub : node->blocks()) {
      collect_assigned(sub, names);
    }
  }
}

bool foldable_scalar(const c10::IValue& value) {
  return value.isBool() || value.isInt() || value.isDouble() || value.isString() ||
         value.isNone();
}

// Scalars, and lists and tuples of them (torchvision's Permute keeps its dims as a List[int]).
bool foldable(const c10::IValue& value) {
  if (value.isIntList() || value.isDoubleList() || value.isBoolList()) {
    return true;
  }
  if (value.isTuple()) {
    const auto& elements = value.toTupleRef().elements();
    return std::all_of(elements.begin(), elements.end(), foldable_scalar);
  }
  return foldable_scalar(value);
}

// Whether a use may change the list it reads (append, setitem, a call that takes it): then the
// attribute is not a constant of the graph.
bool written(const jit::Value* value) {
  for (const jit::Use& use : value->uses()) {
    const c10::FunctionSchema* schema = use.user->maybeSchema();
    if (schema == nullptr) {
      if (use.user->kind() != c10::prim::ListUnpack && use.user->kind() != c10::prim::TupleUnpack &&
          use.user->kind() != c10::prim::TupleIndex) {
        return true;
      }
      continue;
    }
    const auto& arguments = schema->arguments();
    if (use.offset >= arguments.size() ||
        (arguments[use.offset].alias_info() != nullptr &&
         arguments[use.offset].alias_info()->isWrite())) {
      return true;
    }
  }
  return false;
}

class AttributeFolder {
 public:
  AttributeFolder(const jit::Module& module, jit::Graph& graph) : graph_(graph) {
    collect_assigned(graph.block(), assigned_);
    collect_changed(graph.block());
    objects_.emplace(graph.inputs().at(0), module._ivalue());
  }

  size_t fold(jit::Block* block) {
    size_t folded = 0;
    for (auto it = block->nodes().begin(); it != block->nodes().end(); ++it) {
      jit::Node* node = *it;
      for (jit::Block* sub : node->blocks()) {
        folded += fold(sub);
      }
      if (node->kind() != c10::prim::GetAttr) {
        continue;
      }
      const auto owner = objects_.find(node->input());
      const std::string& name = node->s(c10::attr::name);
      if (owner == objects_.end() || !owner->second->type()->hasAttribute(name)) {
        continue;
      }
      if (assigned_.count(name) != 0 || changed_.count(name) != 0) {
        continue;  // assigned or changed in place somewhere in forward: not a constant
      }
      const c10::IValue value = owner->second->getAttr(name);
      if (value.isObject()) {
        objects_.emplace(node->output(), value.toObject());
        continue;
      }
      if (value.isGenericDict() && assigned_.count(name) == 0) {
        folded += fold_dict_reads(node->output(), value.toGenericDict());
        continue;
      }
      if (!foldable(value) || assigned_.count(name) != 0 ||
          (value.isList() && written(node->output()))) {
        continue;
      }
      jit::WithInsertPoint here(node);
      jit::Value* constant = graph_.insertConstant(value);
      node->output()->replaceAllUsesWith(constant);
      ++folded;
    }
    return folded;
  }

 private:
  // `key in self.d` and `self.d[key]` with a constant key on a dict attribute nothing assigns
  // (torchvision's IntermediateLayerGetter: `if name in self.return_layers`). Only reads are
  // folded; any other use leaves the dict alone.
  size_t fold_dict_reads(jit::Value* dict_value, const c10::impl::GenericDict& dict) {
    static const c10::Symbol contains = c10::Symbol::fromQualString("aten::__contains__");
    static const c10::Symbol getitem = c10::Symbol::fromQualString("aten::__getitem__");
    std::vector<jit::Node*> readers;
    for (const jit::Use& use : dict_value->uses()) {
      if (use.offset != 0 || (use.user->kind() != contains && use.user->kind() != getitem)) {
        return 0;  // passed on, iterated or changed: not a constant of the graph
      }
      readers.push_back(use.user);
    }
    size_t folded = 0;
    for (jit::Node* reader : readers) {
      const c10::optional<c10::IValue> key = jit::toIValue(reader->input(1));
      if (!key) {
        continue;
      }
      c10::IValue result;
      const auto found = dict.find(*key);
      if (reader->kind() == contains) {
        result = c10::IValue(found != dict.end());
      } else if (found != dict.end() && foldable(found->value())) {
        result = found->value();
      } else {
        continue;
      }
      jit::WithInsertPoint here(reader);
      reader->output()->replaceAllUsesWith(graph_.insertConstant(result));
      ++folded;
    }
    return folded;
  }

  // Attribute names read through any GetAttr whose value the graph changes in place (append,
  // d[k] = v): every read of such a name stays, whichever GetAttr it goes through.
  void collect_changed(const jit::Block* block) {
    for (const jit::Node* node : block->nodes()) {
      for (const jit::Block* sub : node->blocks()) {
        collect_changed(sub);
      }
      if (node->kind() != c10::prim::GetAttr) {
        continue;
      }
      const c10::TypeKind type = node->output()->type()->kind();
      if ((type == c10::TypeKind::ListType || type == c10::TypeKind::DictType) &&
          written(node->output())) {
        changed_.insert(node->s(c10::attr::name));
      }
    }
  }

  jit::Graph& graph_;
  std::unordered_set<std::string> assigned_;
  std::unordered_set<std::string> changed_;
  std::unordered_map<const jit::Value*, c10::intrusive_ptr<c10::ivalue::Object>> objects_;
};

void propagate(std::shared_ptr<jit::Graph> graph) {
  // Custom classes (packed quantized weights) are never run: packing is not ours to fold.
  jit::ConstantPropagation(graph, /*ignore_custom_classes=*/true);
  jit::EliminateDeadCode(graph);
}

// x's rank when `node` reads it: aten::dim(x), or aten::len(aten::size(x)).
const at::Tensor* ranked_tensor(const jit::Node* node, const graph_trace::ValueTensors& values) {
  static const c10::Symbol dim = c10::Symbol::fromQualString("aten::dim");
  static const c10::Symbol len = c10::Symbol::fromQualString("aten::len");
  static const c10::Symbol size = c10::Symbol::fromQualString("aten::size");
  const jit::Value* tensor = nullptr;
  if (node->kind() == dim && node->inputs().size() == 1) {
    tensor = node->input(0);
  } else if (node->kind() == len && node->inputs().size() == 1 &&
             node->input(0)->node()->kind() == size &&
             node->input(0)->node()->inputs().size() == 1) {
    tensor = node->input(0)->node()->input(0);
  }
  if (tensor == nullptr) {
    return nullptr;
  }
  const auto found = values.find(tensor);
  return found != values.end() && found->second.defined() ? &found->second : nullptr;
}

size_t fold_ranks(jit::Graph& graph, jit::Block* block, const graph_trace::ValueTensors& values) {
  size_t folded = 0;
  for (jit::Node* node : block->nodes()) {
    for (jit::Block* sub : node->blocks()) {
      folded += fold_ranks(graph, sub, values);
    }
    if (const at::Tensor* tensor = ranked_tensor(node, values)) {
      jit::WithInsertPoint here(node);
      node->output()->replaceAllUsesWith(
          graph.insertConstant(static_cast<int64_t>(tensor->dim())));
      ++folded;
    }
  }
  return folded;
}

// Whether a value is decided by the input's shape alone (fold_shape_conditions' rule).
class ShapeDecided {
 public:
  bool operator()(const jit::Value* v) {
    if (const auto it = memo_.find(v); it != memo_.end()) {
      return it->second;
    }
    memo_[v] = false;  // a cycle (a loop-carried value) is not decided
    const bool decided = compute(v) && (v->type()->kind() != c10::TypeKind::ListType ||
                                        writes_decided(v));
    memo_[v] = decided;
    return decided;
  }

 private:
  static bool is_tensor(const jit::Value* v) {
    return v->type()->kind() == c10::TypeKind::TensorType ||
           v->type()->kind() == c10::TypeKind::OptionalType;
  }

  bool compute(const jit::Value* v) {
    if (v->type()->kind() == c10::TypeKind::TensorType) {
      return false;  // its contents
    }
    const jit::Node* n = v->node();
    const c10::Symbol kind = n->kind();
    if (kind == c10::prim::Constant) {
      return true;
    }
    // An exported graph is an inference graph: no autograd, no autocast (torch's fast paths
    // for inference, nn.MultiheadAttention's among them, branch on these).
    static const c10::Symbol grad = c10::Symbol::fromQualString("aten::is_grad_enabled");
    static const c10::Symbol autocast = c10::Symbol::fromQualString("aten::is_autocast_enabled");
    if (kind == grad || kind == autocast) {
      return true;
    }
    if (kind == c10::prim::Param) {
      return block_input_decided(v);
    }
    if (kind == c10::prim::If) {
      // Decided when the condition is, and so is what each branch yields here.
      if (!(*this)(n->input(0))) {
        return false;
      }
      for (const jit::Block* b : n->blocks()) {
        if (!(*this)(b->outputs()[v->offset()])) {
          return false;
        }
      }
      return true;
    }
    if (kind == c10::prim::Loop) {
      return loop_decided(n) && (*this)(n->input(v->offset() + 2)) &&
             (*this)(n->blocks()[0]->outputs()[v->offset() + 1]);
    }
    const bool empty_container = kind == c10::prim::ListConstruct ||
                                 kind == c10::prim::TupleConstruct ||
                                 kind == c10::prim::DictConstruct;
    if (!n->blocks().empty() || n->hasSideEffects() || (n->inputs().empty() && !empty_container)) {
      return false;  // runtime state, or an op with side effects
    }
    static const c10::Symbol is = c10::Symbol::fromQualString("aten::__is__");
    static const c10::Symbol isnot = c10::Symbol::fromQualString("aten::__isnot__");
    if ((kind == is || kind == isnot) && n->inputs().size() == 2 && n->input(0) == n->input(1)) {
      return true;
    }
    // Identity of two different values is not a shape read (the branch above took the one
    // that is).
    const bool shape_query = ops::reads_only_metadata(n) && kind != is && kind != isnot;
    for (const jit::Value* input : n->inputs()) {
      if (is_tensor(input)) {
        if (!shape_query) {
          return false;
        }
      } else if (!(*this)(input)) {
        return false;
      }
    }
    return true;
  }

  // A loop whose trip count, first condition and continue condition are decided.
  bool loop_decided(const jit::Node* loop) {
    return (*this)(loop->input(0)) && (*this)(loop->input(1)) &&
           (*this)(loop->blocks()[0]->outputs()[0]);
  }

  // An input of a nested block: a graph input (never decided), a loop's counter (decided with
  // the loop) or a loop-carried value (decided when it starts decided and each iteration's
  // next value is; assumed decided while that is checked, the greatest fixed point).
  bool block_input_decided(const jit::Value* v) {
    const jit::Node* owner = v->node()->owningBlock()->owningNode();
    if (owner == nullptr || owner->kind() != c10::prim::Loop) {
      return false;
    }
    if (v->offset() == 0) {
      return (*this)(owner->input(0));
    }
    memo_[v] = true;
    return loop_decided(owner) && (*this)(owner->input(v->offset() + 1)) &&
           (*this)(owner->blocks()[0]->outputs()[v->offset()]);
  }

  // Every write into list `v` (shift_size[0] = 0) is itself decided, and so is every branch or
  // loop that holds one.
  bool writes_decided(const jit::Value* v) {
    for (const jit::Use& use : v->uses()) {
      if (!ops::writes_input(use.user, use.offset)) {
        continue;
      }
      for (const jit::Value* input : use.user->inputs()) {
        if (input != v && (is_tensor(input) || !(*this)(input))) {
          return false;
        }
      }
      for (const jit::Block* b = use.user->owningBlock(); b->owningNode() != nullptr;
           b = b->owningNode()->owningBlock()) {
        const jit::Node* owner = b->owningNode();
        const bool decided = owner->kind() == c10::prim::If     ? (*this)(owner->input(0))
                             : owner->kind() == c10::prim::Loop ? loop_decided(owner)
                                                                : false;
        if (!decided) {
          return false;
        }
      }
    }
    return true;
  }

  std::unordered_map<const jit::Value*, bool> memo_;
};

}  // namespace

size_t fold_shape_scalars(const std::shared_ptr<jit::Graph>& graph,
                          const graph_trace::ValueScalars& scalars) {
  ShapeDecided decided;
  std::vector<std::pair<jit::Value*, c10::IValue>> folds;
  for (jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::prim::Constant) {
      continue;
    }
    for (jit::Value* v : node->outputs()) {
      const auto captured = scalars.find(v);
      if (captured != scalars.end() && decided(v)) {
        folds.emplace_back(v, captured->second);
      }
    }
  }
  for (const auto& [value, constant] : folds) {
    jit::WithInsertPoint here(value->node());
    value->replaceAllUsesWith(graph->insertConstant(constant));
  }
  if (!folds.empty()) {
    propagate(graph);
  }
  return folds.size();
}

size_t fold_module_attributes(const jit::Module& module,
                              const std::shared_ptr<jit::Graph>& graph) {
  if (graph->inputs().empty()) {
    return 0;
  }
  const size_t folded = AttributeFolder(module, *graph).fold(graph->block());
  if (folded != 0) {
    propagate(graph);
  }
  return folded;
}

size_t fold_tensor_ranks(const std::shared_ptr<jit::Graph>& graph,
                         const graph_trace::ValueTensors& values) {
  const size_t folded = fold_ranks(*graph, graph->block(), values);
  if (folded != 0) {
    propagate(graph);
  }
  return folded;
}

}  // namespace lithe::host::constant_folding
