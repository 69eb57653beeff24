#include "lithe/host/graph/forward_cut.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace lithe::host {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Calls f on n and every node nested in its blocks.
template <typename F>
void for_each_nested(Node* n, const F& f) {
  f(n);
  for (torch::jit::Block* block : n->blocks()) {
    for (Node* inner : block->nodes()) {
      for_each_nested(inner, f);
    }
  }
}

// The analysis of one graph instance (the prefix and the suffix are each made from a copy of
// the inlined forward, analysed the same way: the traversal is deterministic).
struct Cut {
  std::vector<Node*> tainted;             // top-level nodes of the suffix, in order
  std::vector<Value*> boundary;           // handed from the prefix to the suffix, in order
  std::vector<bool> written;              // per boundary value
  std::unordered_set<const Node*> in_suffix;
  std::unordered_set<const Value*> statics;  // constants, attribute reads and pure nodes of
                                             // them alone: both sides recompute them
  const Value* layer_output = nullptr;       // CutAt::kLayerOutput: the layer op's output,
  int64_t channel_dim = 0;                   // its channels' dimension
  std::optional<LayerOutputSlot> slot;       // and where the boundary holds it
};

// The dimension of `n`'s output that holds the weight's rows (output channels), when `n` is an
// op whose output channel c depends on weight row c and bias element c alone: a convolution
// that is not transposed, or a linear op. `is_attribute(value, name)` says whether a value is the
// layer's attribute `name`.
template <typename IsAttribute>
std::optional<int64_t> output_channel_dim(const Node* n, const IsAttribute& is_attribute) {
  int64_t dim = 0;
  if (n->kind() == c10::aten::conv1d || n->kind() == c10::aten::conv2d ||
      n->kind() == c10::aten::conv3d) {
    dim = 1;
  } else if (n->kind() == c10::aten::_convolution && n->inputs().size() > 6 &&
             torch::jit::constant_as<bool>(n->input(6)) == false) {  // not transposed
    dim = 1;
  } else if (n->kind() == c10::aten::linear) {
    dim = -1;
  } else {
    return std::nullopt;
  }
  const bool no_bias = n->inputs().size() > 2 &&
                       n->input(2)->type()->kind() == c10::TypeKind::NoneType;
  if (n->outputs().size() != 1 || n->inputs().size() < 3 || !is_attribute(n->input(1), "weight") ||
      !(no_bias || is_attribute(n->input(2), "bias"))) {
    return std::nullopt;
  }
  return dim;
}

std::optional<Cut> analyse(const std::shared_ptr<torch::jit::Graph>& shared,
                           const std::string& layer, CutAt at, std::string* why_not) {
  torch::jit::Graph& graph = *shared;
  const auto refuse = [&](std::string reason) -> std::optional<Cut> {
    *why_not = std::move(reason);
    return std::nullopt;
  };
  Value* self = graph.inputs().at(0);
  // Attribute paths of the GetAttr chains from self ("" is self).
  std::unordered_map<const Value*, std::string> path = {{self, ""}};
  bool reads_layer = false;
  std::optional<std::string> unsupported;
  for (Node* top : graph.nodes()) {
    for_each_nested(top, [&](Node* n) {
      if (n->kind() == c10::prim::SetAttr) {
        unsupported = "the forward assigns module attribute '" + n->s(c10::attr::name) + "'";
      } else if (n->kind() == c10::prim::CallMethod) {
        unsupported = "the forward calls method '" + n->s(c10::attr::name) + "' that inlining "
                      "left in";
      } else if (n->kind() == c10::prim::GetAttr) {
        const auto parent = path.find(n->input(0));
        if (parent != path.end()) {
          const std::string name =
              parent->second.empty() ? n->s(c10::attr::name)
                                     : parent->second + "." + n->s(c10::attr::name);
          path.emplace(n->output(), name);
          reads_layer = reads_layer || name == layer || name.rfind(layer + ".", 0) == 0;
        }
      }
    });
  }
  if (unsupported) {
    return refuse(*unsupported);
  }
  if (!reads_layer) {
    return refuse("the forward never reads module '" + layer + "'");
  }
  const auto is_layer = [&](const Value* v) {
    const auto it = path.find(v);
    return it != path.end() && (it->second == layer || it->second.rfind(layer + ".", 0) == 0);
  };
  const auto is_attribute = [&](const Value* v, const char* name) {
    const auto it = path.find(v);
    return it != path.end() && it->second == layer + "." + name;
  };

  torch::jit::AliasDb alias(shared);
  Cut cut;
  std::unordered_set<const Value*> tainted_values;
  std::vector<const Value*> written_by_suffix;
  bool started = false;
  for (Node* top : graph.nodes()) {
    // What the node (with its blocks) reads from outside itself, and whether it reads the
    // layer, writes in place or has side effects anywhere inside.
    std::vector<Value*> reads;
    bool layer_inside = false;
    bool reads_layer_value = false;  // the layer's module or one of its attributes
    bool mutates = false;
    bool side_effects = false;
    for_each_nested(top, [&](Node* n) {
      for (Value* input : n->inputs()) {
        if (input->node()->owningBlock() == graph.block()) {  // the param node's too
          reads.push_back(input);
        }
        reads_layer_value = reads_layer_value || is_layer(input);
      }
      for (const Value* output : n->outputs()) {
        layer_inside = layer_inside || is_layer(output);
      }
      mutates = mutates || alias.isMutable(n);
      side_effects = side_effects || n->hasSideEffects();
    });
    // The layer's attribute reads join the suffix without starting it: they are pure, and
    // TorchScript hoists them to the top of a forward.
    const bool attribute_read = top->kind() == c10::prim::GetAttr;
    if (at == CutAt::kLayerOutput && (layer_inside || reads_layer_value) && !attribute_read) {
      // The layer's op stays in the prefix; what reads its output starts the suffix.
      const std::optional<int64_t> dim = output_channel_dim(top, is_attribute);
      if (cut.layer_output != nullptr || !dim) {
        return refuse("module '" + layer + "' is read by " +
                      (cut.layer_output != nullptr ? std::string("more than one op")
                                                   : "'" + std::string(top->kind().toQualString()) +
                                                         "', not one convolution or linear op "
                                                         "taking its weight and bias"));
      }
      cut.layer_output = top->output();
      cut.channel_dim = *dim;
      tainted_values.insert(top->output());
      started = true;
      continue;
    }
    bool suffix = (layer_inside && at == CutAt::kLayerInput) ||
                  (started && (mutates || side_effects));
    for (size_t i = 0; !suffix && i < reads.size(); ++i) {
      suffix = tainted_values.count(reads[i]) != 0;
      for (size_t w = 0; !suffix && w < written_by_suffix.size(); ++w) {
        suffix = alias.mayAlias(reads[i], written_by_suffix[w]);
      }
    }
    if (!suffix) {
      // Constants, attribute reads and pure nodes of them alone (the int lists of a
      // convolution's stride): recomputed by the suffix rather than handed over.
      bool recomputable = top->blocks().empty() && !mutates && !side_effects;
      for (const Value* input : top->inputs()) {
        recomputable = recomputable && (input == self || cut.statics.count(input) != 0);
      }
      if (recomputable) {
        for (const Value* output : top->outputs()) {
          cut.statics.insert(output);
        }
      }
      continue;
    }
    started = started || !attribute_read;
    cut.tainted.push_back(top);
    cut.in_suffix.insert(top);
    for (const Value* output : top->outputs()) {
      tainted_values.insert(output);
    }
    for_each_nested(top, [&](Node* n) {
      for (Value* input : n->inputs()) {
        if (alias.writesToAlias(n, {input})) {
          written_by_suffix.push_back(input);
        }
      }
    });
  }

  // The boundary: values of the prefix (its nodes' outputs and the forward's inputs) that the
  // suffix or the graph's outputs read. Constants and attribute reads are recomputed instead.
  std::unordered_set<const Value*> seen;
  const auto consider = [&](Value* v) {
    // The forward's inputs (self aside: both sides get it) and the prefix nodes' outputs.
    const bool from_prefix =
        v != self && v->node()->owningBlock() == graph.block() &&
        cut.in_suffix.count(v->node()) == 0;
    if (from_prefix && cut.statics.count(v) == 0 && seen.insert(v).second) {
      cut.boundary.push_back(v);
    }
  };
  for (Node* top : cut.tainted) {
    for_each_nested(top, [&](Node* n) {
      for (Value* input : n->inputs()) {
        consider(input);
      }
    });
  }
  for (Value* output : graph.outputs()) {
    consider(output);
  }
  bool only_inputs = true;
  for (Value* b : cut.boundary) {
    only_inputs = only_inputs && b->node() == graph.param_node();
    bool written = false;
    for (const Value* w : written_by_suffix) {
      written = written || alias.mayAlias(b, w);
    }
    if (written && b->type()->kind() != c10::TypeKind::TensorType) {
      return refuse("the layer's part of the forward writes in place to '" + b->debugName() +
                    "', a " + b->type()->str() + " computed before it");
    }
    cut.written.push_back(written);
  }
  if (at == CutAt::kLayerOutput) {
    const auto found = std::find(cut.boundary.begin(), cut.boundary.end(), cut.layer_output);
    if (found == cut.boundary.end()) {
      return refuse("nothing reads the output of module '" + layer + "'");
    }
    cut.slot = LayerOutputSlot{static_cast<size_t>(found - cut.boundary.begin()),
                               cut.channel_dim};
  }
  if (only_inputs) {
    return refuse("module '" + layer + "' reads only the forward's inputs: nothing before it to "
                  "cache");
  }
  for (size_t i = 0; i < cut.boundary.size(); ++i) {
    for (size_t j = 0; j < cut.boundary.size(); ++j) {
      if (i != j && cut.written[i] && alias.mayAlias(cut.boundary[i], cut.boundary[j])) {
        return refuse("the layer's part of the forward writes in place to '" +
                      cut.boundary[i]->debugName() + "', which may share memory with '" +
                      cut.boundary[j]->debugName() + "'");
      }
    }
  }
  return cut;
}

std::shared_ptr<torch::jit::Graph> inlined_forward(const torch::jit::Module& module) {
  std::shared_ptr<torch::jit::Graph> graph = module.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  return graph;
}

// Destroys `nodes` (top-level, in graph order) from the last: each one's users come after it.
void destroy_in_reverse(const std::vector<Node*>& nodes) {
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    (*it)->destroy();
  }
}

}  // namespace

std::optional<ForwardCutGraphs> cut_forward_graph(const torch::jit::Module& module,
                                                  const std::string& layer,
                                                  std::string* why_not, CutAt at) {
  ForwardCutGraphs out;

  // The prefix: the suffix's nodes removed, the boundary returned as one tuple.
  out.prefix = inlined_forward(module);
  std::optional<Cut> cut = analyse(out.prefix, layer, at, why_not);
  if (!cut) {
    return std::nullopt;
  }
  out.written = cut->written;
  out.layer_output = cut->slot;
  while (!out.prefix->outputs().empty()) {
    out.prefix->eraseOutput(out.prefix->outputs().size() - 1);
  }
  destroy_in_reverse(cut->tainted);
  Node* tuple = out.prefix->createTuple(cut->boundary);
  out.prefix->appendNode(tuple);
  out.prefix->registerOutput(tuple->output());
  torch::jit::EliminateDeadCode(out.prefix);

  // The suffix: the boundary values become inputs; the prefix's nodes, now unused, go.
  out.suffix = inlined_forward(module);
  cut = analyse(out.suffix, layer, at, why_not);
  if (!cut) {
    return std::nullopt;
  }
  const size_t forward_inputs = out.suffix->inputs().size();
  for (Value* b : cut->boundary) {
    Value* input = out.suffix->addInput()->setType(b->type());
    b->replaceAllUsesWith(input);
  }
  std::vector<Node*> prefix_nodes;
  for (Node* n : out.suffix->nodes()) {
    const bool recomputed = !n->outputs().empty() && cut->statics.count(n->outputs()[0]) != 0;
    if (cut->in_suffix.count(n) == 0 && !recomputed) {
      prefix_nodes.push_back(n);
    }
  }
  // Nodes of the prefix whose outputs only other prefix nodes read: nothing of the suffix
  // uses them any more (the boundary replaced every such read).
  for (auto it = prefix_nodes.rbegin(); it != prefix_nodes.rend(); ++it) {
    for (const Value* output : (*it)->outputs()) {
      if (output->hasUses()) {
        *why_not = "internal: '" + output->debugName() + "' of the part before the layer is "
                   "still read after the cut";
        return std::nullopt;
      }
    }
    (*it)->destroy();
  }
  for (size_t i = forward_inputs; i-- > 1;) {
    out.suffix->eraseInput(i);  // the forward's own inputs: read only through the boundary now
  }
  torch::jit::EliminateDeadCode(out.suffix);
  return out;
}

}  // namespace lithe::host
