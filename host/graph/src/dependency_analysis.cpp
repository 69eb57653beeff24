// Channel and group dependencies read from a TorchScript graph: NNI v2.0's ChannelDependency and
// GroupDependency (reference §2.8). NNI traces the model and walks a module-level graph in which
// every module call is one node. Here the model is scripted, so we walk the `forward` graph with
// every method call inlined instead: a layer is then not a node but the op that consumes its
// weight (aten::conv2d(%x, GetAttr[weight](GetAttr[conv1](%self)), ...)), and the walk has to
// see through what tracing would have removed (control flow, list building, tuples).
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lithe/host/graph/convolution_type.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/graph/layer_dependencies.h"
#include "lithe/host/graph/op_table.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/filter_pruning.h"
#include "lithe/host/graph/submodule.h"

namespace lithe::host {
namespace {

namespace jit = torch::jit;

constexpr const char* kConv2d = "Conv2d";
constexpr const char* kConvTranspose2d = "ConvTranspose2d";
constexpr const char* kLinear = "Linear";

// Convolutions: they end the walk and have groups. NNI v2.0 knows Conv2d and ConvTranspose2d
// only and walks through a Conv1d/Conv3d as if it kept channels; Lithe stops there too, since
// those mix channels exactly as Conv2d does.
bool is_conv_type(const std::string& op_type) {
  return op_type == kConv2d || op_type == kConvTranspose2d || op_type == "Conv1d" ||
         op_type == "Conv3d";
}

// The layers whose output channels a filter pruner can remove: each gets a channel set.
bool is_filter_layer(const std::string& op_type) {
  const std::vector<std::string>& types = sdk::filter_op_types();
  return std::find(types.begin(), types.end(), op_type) != types.end();
}

// Where a layer op keeps its data input, its weight and (for convolutions) its groups.
struct OpRoles {
  size_t input;
  size_t weight;
  std::optional<size_t> groups;
};

std::optional<OpRoles> layer_op_roles(const jit::Node* node) {
  static const c10::Symbol conv1d = c10::Symbol::fromQualString("aten::conv1d");
  static const c10::Symbol conv2d = c10::Symbol::fromQualString("aten::conv2d");
  static const c10::Symbol conv3d = c10::Symbol::fromQualString("aten::conv3d");
  static const c10::Symbol conv = c10::Symbol::fromQualString("aten::_convolution");
  static const c10::Symbol convolution = c10::Symbol::fromQualString("aten::convolution");
  static const c10::Symbol conv_t = c10::Symbol::fromQualString("aten::conv_transpose2d");
  static const c10::Symbol linear = c10::Symbol::fromQualString("aten::linear");
  static const c10::Symbol addmm = c10::Symbol::fromQualString("aten::addmm");
  static const c10::Symbol matmul = c10::Symbol::fromQualString("aten::matmul");
  std::optional<OpRoles> roles;
  const c10::Symbol kind = node->kind();
  if (kind == conv1d || kind == conv2d || kind == conv3d || kind == conv_t) {
    roles = OpRoles{0, 1, 6};
  } else if (kind == conv || kind == convolution) {
    roles = OpRoles{0, 1, 8};
  } else if (kind == linear || kind == matmul) {
    roles = OpRoles{0, 1, std::nullopt};
  } else if (kind == addmm) {  // addmm(bias, input, weight.t())
    roles = OpRoles{1, 2, std::nullopt};
  }
  if (roles && node->inputs().size() <= std::max(roles->weight, roles->groups.value_or(0))) {
    return std::nullopt;  // an overload we do not know; treated as an ordinary op
  }
  return roles;
}

// Whether a value can carry activations. Module objects are excluded on purpose: a walk must
// not go from `bn.weight` to the module that owns it.
bool carries_tensors(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return true;
    case c10::TypeKind::ClassType:
    case c10::TypeKind::InterfaceType:
      return false;
    default:
      break;
  }
  const auto contained = type->containedTypes();
  return std::any_of(contained.begin(), contained.end(),
                     [](const c10::TypePtr& t) { return carries_tensors(t); });
}


// One call of a Conv2d / ConvTranspose2d / Linear module in the inlined graph.
struct LayerCall {
  jit::Node* node;
  std::string module;   // dotted name
  std::string op_type;  // class name
  int64_t groups;       // 1 for Linear
};

class GraphAnalysis {
 public:
  GraphAnalysis(const jit::Module& root, std::shared_ptr<jit::Graph> graph)
      : root_(root), graph_(std::move(graph)) {
    index_block(graph_->block());
  }

  LayerDependencies run() {
    LayerDependencies out;
    out.channel_sets = channel_sets();
    out.groups = groups();
    add_uncalled_convolutions(out);
    return out;
  }

 private:
  // Numbers nodes in program order (pre-order, nested blocks after their owner) and collects
  // the layer calls and the ops that couple channels.
  void index_block(jit::Block* block) {
    for (jit::Node* node : block->nodes()) {
      position_[node] = next_position_++;
      // Inline leaves calls through module interfaces: the layers they run would be invisible.
      // (Calls on other objects, e.g. packed quantized params, cannot hide module calls.)
      if (node->kind() == c10::prim::CallMethod) {
        const c10::TypePtr receiver = node->input(0)->type();
        const auto cls = receiver->cast<c10::ClassType>();
        LITHE_CHECK(receiver->kind() != c10::TypeKind::InterfaceType && !(cls && cls->is_module()),
                    sdk::Errc::kUnsupported, "forward calls method '", node->s(c10::attr::name),
                    "' of ", receiver->str(),
                    " in a way that cannot be inlined, so the layers it runs cannot be seen");
      }
      classify(node);
      for (jit::Block* sub : node->blocks()) {
        index_block(sub);
      }
    }
  }

  void classify(jit::Node* node) {
    static const c10::Symbol add = c10::Symbol::fromQualString("aten::add");
    static const c10::Symbol add_ = c10::Symbol::fromQualString("aten::add_");
    static const c10::Symbol cat = c10::Symbol::fromQualString("aten::cat");
    static const c10::Symbol concat = c10::Symbol::fromQualString("aten::concat");
    if (std::optional<LayerCall> call = layer_call(node)) {
      call_of_node_[node] = calls_.size();
      if (first_position_.count(call->module) == 0) {
        first_position_[call->module] = position_.at(node);
      }
      calls_.push_back(std::move(*call));
      return;
    }
    const c10::Symbol kind = node->kind();
    // Only tensor adds: `i + 2` on ints (loop counters, shape arithmetic) is aten::add too.
    if ((kind == add || kind == add_) && node->outputs().size() == 1 &&
        node->output()->type()->kind() == c10::TypeKind::TensorType) {
      std::vector<jit::Value*> starts;
      for (jit::Value* input : node->inputs()) {
        if (carries_tensors(input->type())) {
          starts.push_back(input);
        }
      }
      couplers_.push_back(std::move(starts));
    } else if ((kind == cat || kind == concat) && node->inputs().size() >= 2) {
      // NNI compares the traced constant with 1 literally; a dim that is not a constant would be
      // None there, which also couples (and coupling is the safe side: it never breaks shapes).
      const c10::optional<c10::IValue> dim = jit::toIValue(node->input(1));
      const bool along_channels = dim && dim->isInt() && dim->toInt() == 1;
      if (!along_channels) {
        couplers_.push_back({node->input(0)});
      }
    }
  }



  std::optional<LayerCall> layer_call(jit::Node* node) {
    const std::optional<OpRoles> roles = layer_op_roles(node);
    if (!roles) {
      return std::nullopt;
    }
    static const c10::Symbol transpose = c10::Symbol::fromQualString("aten::t");
    jit::Value* weight = node->input(roles->weight);
    if (weight->node()->kind() == transpose) {  // addmm / matmul take weight.t()
      weight = weight->node()->input(0);
    }
    jit::Node* getter = weight->node();
    if (getter->kind() != c10::prim::GetAttr || getter->s(c10::attr::name) != "weight") {
      return std::nullopt;  // a functional op on a computed weight: NNI sees no module there
    }
    const auto cls = getter->input()->type()->cast<c10::ClassType>();
    if (!cls || !cls->is_module() || !cls->name()) {
      return std::nullopt;
    }
    std::string op_type = cls->name()->name();
    std::optional<std::string> path = graph_trace::module_path(getter->input());
    if (!path || path->empty()) {
      return std::nullopt;
    }
    if (!is_conv_type(op_type) && op_type != kLinear && roles->groups.has_value()) {
      // A convolution subclass that adds nothing (torchvision's Conv3DSimple) is a
      // convolution: NNI, matching class names, would walk through it.
      const c10::IValue w = submodule(root_, *path).attr("weight");
      if (std::optional<std::string> base =
              w.isTensor() ? convolution_type(cls, w.toTensor().dim() - 2) : std::nullopt) {
        op_type = *base;
      }
    }
    if (!is_conv_type(op_type) && op_type != kLinear) {
      return std::nullopt;  // e.g. a custom class: passed through, as in NNI
    }
    LayerCall call{node, *path, op_type, 1};
    if (is_conv_type(op_type)) {
      LITHE_CHECK(roles->groups.has_value(), sdk::Errc::kUnsupported, "cannot analyse ",
                  op_type, " '", call.module, "': it runs as ", node->kind().toQualString(),
                  ", which has no groups argument");
      call.groups = groups_argument(node->input(*roles->groups), call);
    }
    return call;
  }

  // Scripted convolutions pass `groups` as a constant (it is in __constants__); a module that
  // keeps it as an attribute reads it through GetAttr.
  int64_t groups_argument(jit::Value* value, const LayerCall& call) {
    int64_t groups = 0;
    if (const c10::optional<c10::IValue> constant = jit::toIValue(value);
        constant && constant->isInt()) {
      groups = constant->toInt();
    } else if (value->node()->kind() == c10::prim::GetAttr &&
               value->node()->s(c10::attr::name) == "groups") {
      const std::optional<std::string> owner = graph_trace::module_path(value->node()->input());
      LITHE_CHECK(owner.has_value(), sdk::Errc::kUnsupported, "cannot analyse ", call.op_type,
                  " '", call.module, "': its groups come from an attribute of a value that is "
                  "not a submodule");
      const c10::IValue attribute = submodule(root_, *owner).attr("groups");
      LITHE_CHECK(attribute.isInt(), sdk::Errc::kUnsupported, "cannot analyse ", call.op_type,
                  " '", call.module, "': attribute groups of '", *owner, "' is ",
                  attribute.tagKind(), ", not an int");
      groups = attribute.toInt();
    } else {
      LITHE_CHECK(false, sdk::Errc::kUnsupported, "cannot analyse ", call.op_type, " '",
                  call.module, "': its groups argument (%", value->debugName(), " = ",
                  value->node()->kind().toQualString(),
                  ") is neither a constant nor the module's groups attribute");
    }
    LITHE_CHECK(groups >= 1, sdk::Errc::kUnsupported, "cannot analyse ", call.op_type, " '",
                call.module, "': groups must be >= 1, got ", groups);
    return groups;
  }

  // Values whose contents flow into `value` one step back.
  void predecessors(jit::Value* value, std::vector<jit::Value*>& out) const {
    jit::Node* node = value->node();
    const size_t index = value->offset();
    switch (node->kind()) {
      case c10::prim::Param: {
        // A graph input starts the data flow; a loop-body input is the loop-carried value
        // (input 0 is the iteration counter): it comes from before the loop or the previous
        // iteration.
        jit::Node* owner = node->owningBlock()->owningNode();
        if (owner != nullptr && owner->kind() == c10::prim::Loop && index >= 1) {
          out.push_back(owner->input(index + 1));
          out.push_back(node->owningBlock()->outputs().at(index));
        }
        break;
      }
      case c10::prim::If:
        for (jit::Block* branch : node->blocks()) {
          out.push_back(branch->outputs().at(index));
        }
        break;
      case c10::prim::Loop:
        out.push_back(node->input(index + 2));
        out.push_back(node->blocks().at(0)->outputs().at(index + 1));
        break;
      case c10::prim::TupleUnpack:
      case c10::prim::ListUnpack: {
        // Tracing unpacks these away (NNI's unpack_manually); follow only the matching element.
        jit::Node* pack = node->input()->node();
        if ((pack->kind() == c10::prim::TupleConstruct ||
             pack->kind() == c10::prim::ListConstruct) &&
            pack->inputs().size() == node->outputs().size()) {
          out.push_back(pack->input(index));
        } else {
          out.push_back(node->input());
        }
        break;
      }
      case c10::prim::TupleIndex: {
        jit::Node* pack = node->input(0)->node();
        const c10::optional<c10::IValue> at = jit::toIValue(node->input(1));
        if (pack->kind() == c10::prim::TupleConstruct && at && at->isInt() && at->toInt() >= 0 &&
            static_cast<size_t>(at->toInt()) < pack->inputs().size()) {
          out.push_back(pack->input(static_cast<size_t>(at->toInt())));
        } else {
          out.push_back(node->input(0));
        }
        break;
      }
      default: {
        // The op table knows the ops whose tensor input gives only a shape, dtype or device
        // (x.new_zeros(...), x.size()): no channel of it reaches the result. NNI's traced graph
        // records the same data flow, so it would couple here; Lithe does not (Swin's attention
        // mask would otherwise tie the stem to every attention's qkv).
        // It also knows the ops after which a channel is no longer the one before: a reshape
        // (view, flatten) and the ops it describes only as mixing or cutting (chunk, select,
        // slice, matmul, attention). NNI walks through them and can couple layers of different widths
        // (MViT's qkv Linear with the pooling convolutions of its q, k and v); here they end
        // the walk. Permutes and transposes move channels without changing them: walked.
        const ops::OpSpec* spec = ops::find_op(node->kind());
        if (ops::reads_only_metadata(node) ||
            (spec != nullptr && (spec->channels == ops::Channels::kReshape ||
                                 spec->channels == ops::Channels::kUnknown || spec->selects))) {
          break;
        }
        for (jit::Value* input : node->inputs()) {
          if (carries_tensors(input->type())) {
            out.push_back(input);
          }
        }
      }
    }
    // A list is filled after it is built (parts.append(conv(x))): what the writers put in
    // reaches every reader of the list.
    if (value->type()->kind() == c10::TypeKind::ListType) {
      for (const jit::Use& use : value->uses()) {
        if (!ops::writes_input(use.user, use.offset)) {
          continue;
        }
        for (jit::Value* input : use.user->inputs()) {
          if (input != value && carries_tensors(input->type())) {
            out.push_back(input);
          }
        }
      }
    }
  }

  // NNI's BFS to the nearest convolution / Linear calls (it stops at them), as
  // module names in the order found, each once.
  std::vector<std::string> nearest_layers(const std::vector<jit::Value*>& starts) const {
    std::vector<std::string> found;
    std::deque<jit::Value*> queue(starts.begin(), starts.end());
    std::unordered_set<jit::Value*> seen(starts.begin(), starts.end());
    std::vector<jit::Value*> next;
    while (!queue.empty()) {
      jit::Value* value = queue.front();
      queue.pop_front();
      if (const auto call = call_of_node_.find(value->node()); call != call_of_node_.end()) {
        const std::string& name = calls_[call->second].module;
        if (std::find(found.begin(), found.end(), name) == found.end()) {
          found.push_back(name);
        }
        continue;
      }
      next.clear();
      predecessors(value, next);
      for (jit::Value* v : next) {
        if (seen.insert(v).second) {  // loops make the data flow cyclic
          queue.push_back(v);
        }
      }
    }
    return found;
  }

  std::vector<std::vector<std::string>> channel_sets() const {
    // Each coupling op merges its layers and every set they already belong to.
    std::vector<std::set<std::string>> sets;
    std::map<std::string, size_t> set_of;
    for (const std::vector<jit::Value*>& starts : couplers_) {
      const std::vector<std::string> layers = nearest_layers(starts);
      if (layers.empty()) {
        continue;  // e.g. BatchNorm's num_batches_tracked.add_(1)
      }
      size_t target = sets.size();
      sets.emplace_back();
      for (const std::string& layer : layers) {
        const auto existing = set_of.find(layer);
        if (existing == set_of.end()) {
          sets[target].insert(layer);
        } else if (existing->second != target) {
          sets[target].merge(sets[existing->second]);  // leaves the old set empty
        }
        for (const std::string& member : sets[target]) {
          set_of[member] = target;
        }
      }
    }
    std::vector<std::vector<std::string>> out;
    std::set<std::string> emitted;
    for (const LayerCall& call : calls_) {
      if (!is_filter_layer(call.op_type) || emitted.count(call.module) != 0) {
        continue;
      }
      std::vector<std::string> members = {call.module};
      if (const auto found = set_of.find(call.module); found != set_of.end()) {
        members.assign(sets[found->second].begin(), sets[found->second].end());
      }
      std::sort(members.begin(), members.end(), [&](const std::string& a, const std::string& b) {
        return first_position_.at(a) < first_position_.at(b);
      });
      emitted.insert(members.begin(), members.end());
      out.push_back(std::move(members));
    }
    return out;
  }

  std::map<std::string, int64_t> groups() const {
    std::map<std::string, int64_t> out;
    const auto raise = [&out](const std::string& name, int64_t g) {
      int64_t& entry = out[name];  // 0 when new
      entry = std::max(entry, g);
    };
    for (const LayerCall& call : calls_) {
      if (!is_conv_type(call.op_type)) {
        continue;
      }
      raise(call.module, call.groups);
      if (call.groups <= 1) {
        continue;
      }
      const OpRoles roles = *layer_op_roles(call.node);
      for (const std::string& parent : nearest_layers({call.node->input(roles.input)})) {
        // A Linear ends the walk without an entry: it mixes all channels, so the filters
        // behind it are not split into the grouped convolution's groups.
        if (is_conv_type(op_type_of(parent))) {
          raise(parent, call.groups);
        }
      }
    }
    return out;
  }

  const std::string& op_type_of(const std::string& module) const {
    for (const LayerCall& call : calls_) {
      if (call.module == module) {
        return call.op_type;
      }
    }
    LITHE_INTERNAL_ASSERT(false);
    return calls_.front().op_type;  // unreachable
  }

  // A layer that forward never runs constrains nothing, but callers look every one up.
  void add_uncalled_convolutions(LayerDependencies& out) const {
    for (const auto& item : root_.named_modules()) {
      if (item.name.empty() || first_position_.count(item.name) != 0) {
        continue;
      }
      const c10::ClassTypePtr type = item.value.type();
      const std::string op_type = type->name() ? type->name()->name() : std::string();
      if (op_type == kLinear) {
        out.channel_sets.push_back({item.name});
        continue;
      }
      if (!is_conv_type(op_type)) {
        continue;
      }
      std::optional<c10::IValue> groups;
      if (type->hasConstant("groups")) {
        groups = type->getConstant("groups");
      } else if (item.value.hasattr("groups")) {
        groups = item.value.attr("groups");
      }
      LITHE_CHECK(groups && groups->isInt(), sdk::Errc::kUnsupported, "cannot analyse ", op_type,
                  " '", item.name, "': forward never calls it and it has no int groups constant "
                  "or attribute");
      if (is_filter_layer(op_type)) {
        out.channel_sets.push_back({item.name});
      }
      out.groups[item.name] = groups->toInt();
    }
  }

  const jit::Module& root_;
  std::shared_ptr<jit::Graph> graph_;
  std::unordered_map<const jit::Node*, size_t> position_;
  size_t next_position_ = 0;
  std::vector<LayerCall> calls_;  // in program order
  std::unordered_map<const jit::Node*, size_t> call_of_node_;
  std::map<std::string, size_t> first_position_;   // module -> position of its first call
  std::vector<std::vector<jit::Value*>> couplers_;  // BFS starts of each add / cat, in order
};

}  // namespace

LayerDependencies analyze_dependencies(const torch::jit::Module& module) {
  const c10::optional<jit::Method> forward = module.find_method("forward");
  LITHE_CHECK(forward.has_value(), sdk::Errc::kUnsupported, "cannot analyse the dependencies of ",
              module.type()->name() ? module.type()->name()->qualifiedName() : "the module",
              ": it has no forward method");
  try {
    // A copy, with the branches the module's attributes fix folded away (as tracing does).
    return GraphAnalysis(module, graph_trace::inline_forward(module)).run();
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kUnsupported,
                     std::string("cannot analyse the dependencies of the module's forward "
                                 "graph: ") +
                         e.what_without_backtrace());
  }
}

}  // namespace lithe::host
