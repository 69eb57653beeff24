// Channel spaces over the inlined forward graph (see channel_flow.h for the model). The walk
// visits the top-level nodes once, in order: every op it knows assigns spaces to its outputs and
// "zero sets" (channels known to be exactly zero) to the values it produces; every use of a space
// by a layer records a constraint (only channels zero there may go); everything else blocks the
// spaces it touches. Index maps (flatten, cat along channels) are settled by a fixed point.
#include "channel_flow.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "channel_plan.h"
#include "channel_spaces.h"
#include "lithe/host/graph/convolution_type.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/graph/op_table.h"
#include "lithe/sdk/error.h"
#include "lithe/host/graph/submodule.h"

namespace lithe::host::speedup_detail {

bool LayerPlan::changed() const { return !keep_in.empty() || !keep_out.empty(); }

namespace {

namespace jit = torch::jit;

c10::Symbol op(const char* name) { return c10::Symbol::fromQualString(name); }

bool in(const c10::Symbol kind, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return kind == op(n); });
}

// What the op table says `kind` does to channels (kUnknown for an op it does not list).
ops::Channels channels_of(c10::Symbol kind) {
  const ops::OpSpec* spec = ops::find_op(kind);
  return spec == nullptr ? ops::Channels::kUnknown : spec->channels;
}

bool shape_query(c10::Symbol kind) { return channels_of(kind) == ops::Channels::kShapeQuery; }

using ops::constant_ints;

std::string describe(const jit::Node* node) {
  std::string where;
  if (const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(node)) {
    where = scope->module + " (" + scope->op_type + "): ";
  }
  return where + node->kind().toQualString();
}

class ChannelFlow {
 public:
  ChannelFlow(const jit::Module& module, const NamedMasks& masks, const at::Tensor& input)
      : module_(module) {
    for (const auto& [name, m] : masks) {
      masks_.emplace(name, &m);
    }
    graph_trace::Trace trace = graph_trace::trace_forward(module, input);
    graph_ = std::move(trace.graph);
    values_ = std::move(trace.values);
  }

  ChannelPlan run() {
    const auto graph_inputs = graph_->inputs();
    for (size_t i = 1; i < graph_inputs.size(); ++i) {
      if (const std::optional<int> s = space_of(graph_inputs[i])) {
        spaces_.block(*s, "model input", "the model's input keeps every channel");
      }
    }
    find_tied_tensors(graph_->block());
    for (jit::Node* node : graph_->nodes()) {
      visit(node);
    }
    for (jit::Value* output : graph_->outputs()) {
      block_value(output, "model output", "the model's output keeps every channel");
    }
    block_tied_layers();
    spaces_.settle();
    return make_plan(order_, uses_, spaces_);
  }

 private:
  // ---- tensors of a layer read elsewhere ----------------------------------------------------
  // A layer's weight, bias or running statistics read by anything but the layer's own op (a tied
  // decoder's x @ fc1.weight, a regulariser in forward) would keep the old size there.
  void find_tied_tensors(const jit::Block* block) {
    for (const jit::Node* node : block->nodes()) {
      for (const jit::Block* sub : node->blocks()) {
        find_tied_tensors(sub);
      }
      if (node->kind() != c10::prim::GetAttr || node->output()->type()->kind() != c10::TypeKind::TensorType) {
        continue;
      }
      const std::string& name = node->s(c10::attr::name);
      if (name != "weight" && name != "bias" && name != "running_mean" && name != "running_var") {
        continue;
      }
      const std::optional<std::string> owner = graph_trace::module_path(node->input());
      if (!owner) {
        continue;
      }
      for (const jit::Use& use : node->output()->uses()) {
        const c10::Symbol kind = use.user->kind();
        const ops::Channels rule = channels_of(kind);
        const bool own_op = (rule == ops::Channels::kConvolution ||
                             rule == ops::Channels::kLinear || rule == ops::Channels::kBatchNorm) &&
                            use.offset > 0;
        if (!own_op && tied_.count(*owner) == 0) {
          tied_[*owner] = name + " is also read by " + describe(use.user);
        }
      }
    }
  }

  void block_tied_layers() {
    for (const auto& [module, reason] : tied_) {
      const auto use = uses_.find(module);
      if (use == uses_.end()) {
        continue;
      }
      for (const int s : {use->second.in_space, use->second.out_space}) {
        if (s >= 0) {
          spaces_.block(s, module, reason);
        }
      }
    }
  }

  // ---- values ---------------------------------------------------------------------------------
  const at::Tensor* tensor_of(const jit::Value* v) const {
    const auto it = values_.find(v);
    return it == values_.end() || !it->second.defined() ? nullptr : &it->second;
  }

  // The axis of a value that holds its channels: 1 ([N, C, ...]) unless an op moved it (a
  // permute to channel-last, a Linear over the last axis of [N, tokens, features]).
  int64_t axis_of(const jit::Value* v) const {
    const auto it = axis_.find(v);
    return it == axis_.end() ? 1 : it->second;
  }

  void set_axis(const jit::Value* v, int64_t axis) {
    if (axis == 1) {
      axis_.erase(v);
    } else {
      axis_[v] = axis;
    }
  }

  bool channelled(const jit::Value* v) const {
    const at::Tensor* t = tensor_of(v);
    return t != nullptr && t->dim() >= 2 && axis_of(v) < t->dim();
  }

  int64_t channels(const jit::Value* v) const { return tensor_of(v)->size(axis_of(v)); }

  static int64_t normalized(int64_t d, int64_t rank) { return ops::normalized_axis(d, rank); }

  // The space of a tensor value; a value no known op made gets a blocked space of its own.
  std::optional<int> space_of(const jit::Value* v) {
    if (!channelled(v)) {
      return std::nullopt;
    }
    if (const auto it = space_of_value_.find(v); it != space_of_value_.end()) {
      return it->second;
    }
    const int s = spaces_.add(channels(v));
    space_of_value_[v] = s;
    const jit::Node* maker = v->node();
    if (maker->kind() != c10::prim::Param) {
      spaces_.block(s, describe(maker), "Lithe cannot resize the tensor this op makes");
    }
    return s;
  }

  void set_space(const jit::Value* v, int s) { space_of_value_[v] = s; }

  const Bits& zeros_of(const jit::Value* v) {
    static const Bits none;
    const auto it = zeros_.find(v);
    return it == zeros_.end() ? none : it->second;
  }

  Bits zeros_or_empty(const jit::Value* v, int64_t size) {
    Bits z = zeros_of(v);
    if (z.empty()) {
      z.assign(static_cast<size_t>(size), false);
    }
    return z;
  }

  void set_zeros(const jit::Value* v, Bits z, int s) {
    if (spaces_.mark_candidates(s, z)) {
      zeros_[v] = std::move(z);
    }
  }

  void block_value(const jit::Value* v, const std::string& where, const std::string& reason) {
    std::unordered_set<const jit::Value*> seen;
    block_value(v, where, reason, seen);
  }

  // A container (list, tuple, dict) keeps every tensor that went into it or into the containers
  // it came from or was copied from: whatever made it, whatever stored into it (append, insert,
  // d[k] = x), and the container an item of it was read from.
  void block_value(const jit::Value* v, const std::string& where, const std::string& reason,
                   std::unordered_set<const jit::Value*>& seen) {
    if (!seen.insert(v).second) {
      return;
    }
    if (const std::optional<int> s = space_of(v)) {
      spaces_.block(*s, where, reason);
    }
    const c10::TypeKind type = v->type()->kind();
    if (type == c10::TypeKind::TensorType) {
      return;
    }
    if (!graph_trace::holds_tensors(v->type())) {
      return;  // an int list (a shape) or another value without tensors
    }
    const jit::Node* maker = v->node();
    if (maker->kind() != c10::prim::GetAttr && maker->kind() != c10::prim::Param) {
      for (const jit::Value* part : maker->inputs()) {
        block_value(part, where, reason, seen);
      }
    }
    for (const jit::Use& use : v->uses()) {
      if (!ops::writes_input(use.user, use.offset)) {
        continue;
      }
      for (const jit::Value* stored : use.user->inputs()) {
        if (stored != v) {
          block_value(stored, where, reason, seen);
        }
      }
    }
  }

  // ---- the walk -------------------------------------------------------------------------------
  void visit(jit::Node* node) {
    const c10::Symbol kind = node->kind();
    const ops::OpSpec* spec = ops::find_op(kind);
    const ops::Channels channels = spec == nullptr ? ops::Channels::kUnknown : spec->channels;
    if (channels == ops::Channels::kShapeQuery) {
      visit_shape_query(node);
      return;
    }
    const bool tensor_result = std::any_of(
        node->outputs().begin(), node->outputs().end(),
        [](const jit::Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; });
    if (kind == c10::prim::Constant || kind == c10::prim::GetAttr ||
        kind == c10::prim::ListConstruct || kind == c10::prim::TupleConstruct ||
        kind == c10::prim::DictConstruct || kind == c10::prim::RaiseException ||
        channels == ops::Channels::kFresh ||
        ((channels == ops::Channels::kNone || channels == ops::Channels::kItem) &&
         !tensor_result)) {
      return;  // containers are handled by their readers; the rest does not touch activations
    }
    // An Optional[Tensor] refined to a Tensor is the same tensor.
    if (kind == op("prim::unchecked_cast") && tensor_result && channelled(node->input(0))) {
      const jit::Value* x = node->input(0);
      set_axis(node->output(), axis_of(x));
      const int s = *space_of(x);
      set_space(node->output(), s);
      set_zeros(node->output(), zeros_or_empty(x, this->channels(x)), s);
      return;
    }
    if (kind == op("prim::unchecked_cast") && !tensor_result) {
      return;
    }
    bool handled = false;
    switch (channels) {
      case ops::Channels::kConvolution:
        handled = visit_conv(node);
        break;
      case ops::Channels::kLinear:
        handled = visit_linear(node);
        break;
      case ops::Channels::kBatchNorm:
        handled = visit_batch_norm(node);
        break;
      case ops::Channels::kZeroPreserving:
      case ops::Channels::kAligned:
      case ops::Channels::kSpatial:
      case ops::Channels::kReduction:
      case ops::Channels::kInsertAxis:
      case ops::Channels::kRemoveAxis:
        handled = visit_unary(node, *spec);
        break;
      case ops::Channels::kLayout:
        handled = visit_layout(node);
        break;
      case ops::Channels::kLayerNorm:
        handled = visit_layer_norm(node);
        break;
      case ops::Channels::kItem:
        handled = visit_item(node);
        break;
      case ops::Channels::kBroadcast:
        handled = visit_binary(node, spec->zeros);
        break;
      case ops::Channels::kConcat:
        handled = visit_cat(node);
        break;
      case ops::Channels::kReshape:
        handled = visit_reshape(node);
        break;
      case ops::Channels::kUnknown:
      case ops::Channels::kNone:
      case ops::Channels::kShapeQuery:
      case ops::Channels::kFresh:
        break;
    }
    if (!handled) {
      block_unknown(node);
    } else {
      follow_mutation(node);
    }
  }

  // x.add_(1) changes what x holds: later readers of x (or of what x is a view of) must see the
  // new zero set, not the one x had when it was made.
  void follow_mutation(const jit::Node* node) {
    if (node->outputs().empty() || !ops::writes_input(node, 0)) {
      return;
    }
    const jit::Value* written = node->input(0);
    const auto now = zeros_.find(node->output(0));
    if (now == zeros_.end()) {
      zeros_.erase(written);
    } else {
      zeros_[written] = now->second;
    }
    // Through views the mapping of channels is not tracked: forget what was zero there.
    for (const jit::Node* maker = written->node(); view_like(maker->kind());
         maker = maker->input(0)->node()) {
      zeros_.erase(maker->input(0));
    }
    // And in every other value sharing the written storage (views made from it, items read back
    // from a list): the run's tensors say which alias it.
    const at::Tensor* storage = tensor_of(written);
    if (storage != nullptr) {
      for (auto it = zeros_.begin(); it != zeros_.end();) {
        const at::Tensor* t = tensor_of(it->first);
        const bool stale = it->first != written && it->first != node->output(0) && t != nullptr &&
                           t->is_alias_of(*storage);
        it = stale ? zeros_.erase(it) : std::next(it);
      }
    }
  }

  static bool view_like(c10::Symbol kind) {
    return in(kind, {"aten::view", "aten::reshape", "aten::flatten", "aten::squeeze",
                     "aten::unsqueeze", "aten::detach", "aten::select", "aten::slice",
                     "aten::transpose", "aten::permute", "aten::expand", "aten::narrow",
                     "aten::view_as", "aten::reshape_as", "aten::as_strided", "aten::t",
                     "aten::contiguous"});
  }

  // size(x, d) for d = 1 (or unknown), size(x) read at index 1, shape and numel expose the
  // channel count: code computing with it (asserts, divisions, views of other tensors) would
  // not follow a smaller count.
  void visit_shape_query(const jit::Node* node) {
    const c10::Symbol kind = node->kind();
    if (in(kind, {"aten::dim", "aten::len", "prim::device", "prim::dtype", "aten::__isnot__",
                  "aten::__is__"}) ||
        node->inputs().empty() || !channelled(node->input(0))) {
      return;
    }
    // torch.nn's own modules check shapes (BatchNorm's batch size, adaptive pooling's rank)
    // without depending on the channel count; their layers are rebuilt to match.
    const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(node);
    if (scope && scope->qualified_type.rfind("__torch__.torch.nn.modules.", 0) == 0) {
      return;
    }
    const jit::Value* x = node->input(0);
    const int64_t rank = tensor_of(x)->dim();
    const int64_t axis = axis_of(x);
    const auto is_channel = [rank, axis](const c10::optional<c10::IValue>& d) {
      return !d || !d->isInt() || normalized(d->toInt(), rank) == axis;
    };
    bool reads_channels = false;
    if (kind == op("aten::size") && node->inputs().size() >= 2) {
      reads_channels = is_channel(jit::toIValue(node->input(1)));
    } else if (kind == op("aten::size") || kind == op("prim::shape")) {
      for (const jit::Use& use : node->output()->uses()) {
        // Adaptive pooling checks len(input.size()) and passes input.size() as the default of
        // its output size, reading only its spatial end.
        if (use.user->kind() == op("aten::_list_with_default") ||
            use.user->kind() == op("aten::len")) {
          continue;
        }
        // x.shape[-2:] (interpolate to another tensor's spatial size): a slice that leaves
        // out the channel axis reads no channel.
        if (use.user->kind() == op("aten::slice") && use.offset == 0 &&
            use.user->inputs().size() == 4) {
          const c10::optional<c10::IValue> start = jit::toIValue(use.user->input(1));
          const c10::optional<c10::IValue> end = jit::toIValue(use.user->input(2));
          const c10::optional<c10::IValue> step = jit::toIValue(use.user->input(3));
          if (start && end && step && step->isInt() && step->toInt() == 1 &&
              (start->isInt() || start->isNone()) && (end->isInt() || end->isNone())) {
            const auto clamp = [rank](int64_t i) {
              return std::min(rank, std::max<int64_t>(0, i < 0 ? i + rank : i));
            };
            const int64_t from = start->isNone() ? 0 : clamp(start->toInt());
            const int64_t to = end->isNone() ? rank : clamp(end->toInt());
            reads_channels = reads_channels || (from <= axis && axis < to);
            continue;
          }
        }
        const bool indexed = use.user->kind() == op("aten::__getitem__") && use.offset == 0;
        reads_channels = reads_channels || !indexed || is_channel(jit::toIValue(use.user->input(1)));
      }
    } else {
      reads_channels = true;  // numel
    }
    if (reads_channels) {
      block_value(x, describe(node), "the channel count is read here");
    }
  }

  void block_unknown(const jit::Node* node) {
    const std::string where = describe(node);
    const std::string reason = node->blocks().empty()
                                   ? "Lithe does not know how this op uses channels"
                                   : "control flow: Lithe does not shrink through it";
    for (const jit::Value* input : node->inputs()) {
      block_value(input, where, reason);
    }
    // Values read inside nested blocks come from outside too.
    std::vector<const jit::Block*> pending(node->blocks().begin(), node->blocks().end());
    while (!pending.empty()) {
      const jit::Block* b = pending.back();
      pending.pop_back();
      for (const jit::Node* inner : b->nodes()) {
        if (shape_query(inner->kind())) {
          continue;  // e.g. BatchNorm's input.dim() check: it reads no channel
        }
        for (const jit::Value* input : inner->inputs()) {
          if (input->node()->owningBlock() == graph_->block()) {
            block_value(input, where, reason);
          }
        }
        pending.insert(pending.end(), inner->blocks().begin(), inner->blocks().end());
      }
      for (const jit::Value* output : b->outputs()) {
        if (output->node()->owningBlock() == graph_->block()) {
          block_value(output, where, reason);
        }
      }
    }
    for (const jit::Value* output : node->outputs()) {
      block_value(output, where, reason);  // a fresh, blocked space
    }
  }

  // The module whose "weight" (or other attribute) feeds input `index`, when it is a standard
  // torch.nn layer of one of `types`.
  std::optional<std::string> layer_module(const jit::Node* node, size_t index,
                                          std::initializer_list<const char*> types) const {
    if (node->inputs().size() <= index) {
      return std::nullopt;
    }
    const jit::Node* getter = node->input(index)->node();
    if (getter->kind() != c10::prim::GetAttr) {
      return std::nullopt;
    }
    const auto cls = getter->input()->type()->cast<c10::ClassType>();
    if (!cls || !cls->is_module() || !cls->name()) {
      return std::nullopt;
    }
    // Only torch.nn's own classes: their forward is known to use nothing but these tensors.
    const std::string qualified = cls->name()->qualifiedName();
    if (qualified.rfind("__torch__.torch.nn.modules.", 0) != 0) {
      return std::nullopt;
    }
    const std::string name = cls->name()->name();
    if (std::none_of(types.begin(), types.end(), [&](const char* t) { return name == t; })) {
      return std::nullopt;
    }
    return graph_trace::module_path(getter->input());
  }

  // The class name of the module whose attribute feeds input `index` (after layer_module).
  static std::string class_of(const jit::Node* node, size_t index) {
    return node->input(index)->node()->input()->type()->expect<c10::ClassType>()->name()->name();
  }

  const sdk::Masks* masks_of(const std::string& module) const {
    const auto it = masks_.find(module);
    return it == masks_.end() ? nullptr : it->second;
  }

  at::Tensor attribute(const std::string& module, const std::string& name) const {
    const c10::IValue value = submodule(module_, module).attr(name, c10::IValue());
    return value.isTensor() ? value.toTensor() : at::Tensor();
  }


  // Channels whose bias is zero (all of them without a bias).
  Bits zero_bias(const std::string& module, int64_t count) const {
    Bits z(static_cast<size_t>(count), true);
    const at::Tensor bias = attribute(module, "bias");
    if (bias.defined() && bias.dim() == 1 && bias.numel() == count) {
      const at::Tensor zero = bias.detach().eq(0).cpu();
      const auto acc = zero.accessor<bool, 1>();
      for (int64_t i = 0; i < count; ++i) {
        z[static_cast<size_t>(i)] = acc[i];
      }
    }
    return z;
  }

  // Filters (rows) whose weight mask is all zero and whose bias is zero in the masked model.
  Bits zero_filters(const std::string& module, int64_t count) const {
    Bits z(static_cast<size_t>(count), false);
    const sdk::Masks* m = masks_of(module);
    if (m == nullptr || !m->weight.defined() || m->weight.dim() < 1 ||
        m->weight.size(0) != count) {
      return z;
    }
    const at::Tensor any_kept = m->weight.reshape({count, -1}).ne(0).any(1).cpu();
    const at::Tensor bias = attribute(module, "bias");
    if (bias.defined() && (bias.dim() != 1 || bias.numel() != count)) {
      return z;  // not one bias per filter: no filter is known to be zero
    }
    const at::Tensor bias_zero =
        bias.defined() ? bias.detach().eq(0).cpu() : at::ones({count}, at::kBool);
    const auto kept = any_kept.accessor<bool, 1>();
    const auto bz = bias_zero.accessor<bool, 1>();
    for (int64_t i = 0; i < count; ++i) {
      z[static_cast<size_t>(i)] = !kept[i] && bz[i];
    }
    return z;
  }

  LayerUse& use_of(const std::string& module, LayerKind kind, const std::string& op_type) {
    auto [it, inserted] = uses_.try_emplace(module, LayerUse{kind, op_type});
    if (inserted) {
      order_.push_back(module);
    }
    return it->second;
  }

  // Joins a later call's space with the first call's (a module called twice keeps one shape).
  void join(const std::string& module, int& recorded, int s) {
    if (recorded < 0) {
      recorded = s;
    } else if (!spaces_.unite(recorded, s)) {
      const std::string where = module + " (called more than once)";
      spaces_.block(recorded, where, "called on tensors of different channel counts");
      spaces_.block(s, where, "called on tensors of different channel counts");
    }
  }

  // The module of a convolution op: torch.nn's Conv1d/2d/3d, or a subclass that adds nothing to
  // it (convolution_type), whose channel and group counts the rebuild sets.
  std::optional<std::string> conv_module(const jit::Node* node, int64_t spatial) const {
    if (node->inputs().size() < 2) {
      return std::nullopt;
    }
    const jit::Node* getter = node->input(1)->node();
    if (getter->kind() != c10::prim::GetAttr || getter->s(c10::attr::name) != "weight" ||
        !convolution_type(getter->input()->type()->cast<c10::ClassType>(), spatial)) {
      return std::nullopt;
    }
    return graph_trace::module_path(getter->input());
  }

  bool visit_conv(const jit::Node* node) {
    const jit::Value* x = node->input(0);
    const jit::Value* y = node->output();
    if (!channelled(x) || !channelled(y) || axis_of(x) != 1) {
      return false;
    }
    const bool generic = !in(node->kind(), {"aten::conv1d", "aten::conv2d", "aten::conv3d"});
    if (generic) {  // aten::_convolution / convolution: a transposed one is not this layer
      const c10::optional<c10::IValue> transposed = jit::toIValue(node->input(6));
      if (!transposed || !transposed->isBool() || transposed->toBool()) {
        return false;
      }
    }
    const std::optional<std::string> module = conv_module(node, tensor_of(x)->dim() - 2);
    if (!module) {
      return false;
    }
    const std::string op_type = class_of(node, 1);
    const size_t groups_index = generic ? 8 : 6;
    const c10::optional<c10::IValue> groups_value = jit::toIValue(node->input(groups_index));
    if (!groups_value || !groups_value->isInt()) {
      return false;
    }
    const int64_t groups = groups_value->toInt();
    const int64_t cin = channels(x);
    const int64_t cout = channels(y);
    if (groups == 1) {
      read_and_make(*module, LayerKind::kConv, op_type.c_str(), x, y);
      return true;
    }
    if (groups == cin && cin == cout) {
      // Depthwise: channel c in gives channel c out, so both sides are one space.
      const int space = pass_through(*module, LayerKind::kDepthwiseConv, op_type, x, y);
      // Out channel c is zero when its filter and bias are, or when its input is and its bias is
      // zero (a bias would make a zero input channel non-zero).
      Bits z = zeros_or_empty(x, cin);
      const Bits own = zero_filters(*module, cout);
      const Bits bias_zero = zero_bias(*module, cout);
      for (size_t i = 0; i < z.size(); ++i) {
        z[i] = (z[i] && bias_zero[i]) || own[i];
      }
      set_zeros(y, std::move(z), space);
      return true;
    }
    if (groups < 1 || cin % groups != 0 || cout % groups != 0) {
      return false;
    }
    // Grouped: like an ordinary convolution on each side, but every group must keep as many
    // channels as the others (NNI's GroupMaskConflict), settled after the walk.
    LayerUse& use = read_and_make(*module, LayerKind::kGroupedConv, op_type.c_str(), x, y);
    use.groups = groups;
    spaces_.balance(use.in_space, groups);
    spaces_.balance(use.out_space, groups);
    return true;
  }

  bool visit_linear(const jit::Node* node) {
    const std::optional<std::string> module = layer_module(node, 1, {"Linear"});
    const jit::Value* x = node->input(0);
    const jit::Value* y = node->output();
    // Features are the last axis, whatever the rank ([N, F], [N, tokens, F], channel-last
    // [N, H, W, C]): x must hold its channels there, and y holds them there too.
    if (!module || tensor_of(x) == nullptr || tensor_of(y) == nullptr ||
        tensor_of(x)->dim() < 2) {
      return false;
    }
    set_axis(y, tensor_of(y)->dim() - 1);
    if (axis_of(x) == tensor_of(x)->dim() - 1) {
      read_and_make(*module, LayerKind::kLinear, "Linear", x, y);
      return true;
    }
    // x's last axis is not a channel space the walk follows (ViT's tokens come from a cat with
    // a class-token parameter; a channel axis elsewhere would not be per feature): the layer
    // reads every input feature, but its own rows can still go, since y[..., j] = x·W[j] + b[j]
    // is zero wherever row j and b[j] are.
    const std::string where = *module + " (Linear)";
    block_value(x, where, "a Linear reads the last axis, which does not hold these channels");
    LayerUse& use = use_of(*module, LayerKind::kLinear, "Linear");
    use.in_channels = tensor_of(x)->size(-1);
    use.out_channels = channels(y);
    const int in_space = spaces_.add(use.in_channels);
    spaces_.block(in_space, where, "its input features come from ops Lithe does not follow");
    join(*module, use.in_space, in_space);
    const int out_space = spaces_.add(use.out_channels);
    set_space(y, out_space);
    join(*module, use.out_space, out_space);
    set_zeros(y, zero_filters(*module, use.out_channels), use.out_space);
    return true;
  }

  // A layer whose output channel c comes from input channel c only (depthwise convolution,
  // BatchNorm): x and y share one space. Returns it.
  int pass_through(const std::string& module, LayerKind kind, const std::string& op_type,
                   const jit::Value* x, const jit::Value* y) {
    LayerUse& use = use_of(module, kind, op_type);
    use.in_channels = channels(x);
    use.out_channels = channels(y);
    const int s = *space_of(x);
    set_space(y, s);
    join(module, use.in_space, s);
    join(module, use.out_space, s);
    return s;
  }

  // A layer that reads every channel of x through its weight's columns (only channels zero in
  // x may go) and makes y's channels from its rows (a new space; zero where a row is pruned).
  LayerUse& read_and_make(const std::string& module, LayerKind kind, const char* op_type,
                          const jit::Value* x, const jit::Value* y) {
    const int64_t in = channels(x);
    const int64_t out = channels(y);
    LayerUse& use = use_of(module, kind, op_type);
    use.in_channels = in;
    use.out_channels = out;
    const int in_space = *space_of(x);
    spaces_.constrain(in_space, zeros_or_empty(x, in));
    join(module, use.in_space, in_space);
    const int out_space = spaces_.add(out);
    set_space(y, out_space);
    join(module, use.out_space, out_space);
    set_zeros(y, zero_filters(module, out), use.out_space);
    return use;
  }


  bool visit_batch_norm(const jit::Node* node) {
    size_t found_at = 1;
    std::optional<std::string> module =
        layer_module(node, 1, {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d"});
    if (!module) {
      found_at = 3;
      module = layer_module(node, 3, {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d"});
    }
    const jit::Value* x = node->input(0);
    const jit::Value* y = node->output();
    if (!module || !channelled(x) || !channelled(y) || axis_of(x) != 1) {
      return false;
    }
    const int64_t c = channels(x);
    const int s = pass_through(*module, LayerKind::kBatchNorm, class_of(node, found_at), x, y);
    // γ = β = 0 makes the output exactly zero; a zero input stays "zero" (NNI's rule; the
    // β − μ·γ/√(σ²+ε) it really gives is what speedup reports as the BatchNorm shift).
    Bits z = zeros_or_empty(x, c);
    const at::Tensor gamma = attribute(*module, "weight");
    const at::Tensor beta = attribute(*module, "bias");
    if (gamma.defined() && beta.defined()) {
      const at::Tensor both = (gamma.detach().eq(0) & beta.detach().eq(0)).cpu();
      const auto acc = both.accessor<bool, 1>();
      for (int64_t i = 0; i < c; ++i) {
        z[static_cast<size_t>(i)] = z[static_cast<size_t>(i)] || acc[i];
      }
    }
    set_zeros(y, std::move(z), s);
    return true;
  }

  // One output channel per input channel (activations, identities, pooling, reductions over
  // other axes, squeeze/unsqueeze of other axes). The channel axis of y is x's, shifted where
  // axes before it are removed or added.
  bool visit_unary(const jit::Node* node, const ops::OpSpec& spec) {
    const ops::Channels kind = spec.channels;
    bool keeps_zero = kind != ops::Channels::kAligned &&
                      (spec.keeps_zero == nullptr || spec.keeps_zero(node));
    const jit::Value* x = node->input(0);
    const jit::Value* y = node->outputs().at(0);
    if (!channelled(x) || tensor_of(y) == nullptr) {
      return false;
    }
    // A second result (max pooling's indices) would keep the old channel count.
    for (size_t i = 1; i < node->outputs().size(); ++i) {
      if (node->output(i)->hasUses()) {
        return false;
      }
    }
    const int64_t rank_x = tensor_of(x)->dim();
    const int64_t rank_y = tensor_of(y)->dim();
    const int64_t ax = axis_of(x);
    int64_t ay = ax;
    if (kind == ops::Channels::kSpatial && ax != 1) {
      return false;  // pooling a channel-last tensor would pool over its channels
    }
    // The axes the op works along (softmax's dim, a reduction's dims, the axis squeezed).
    std::optional<std::vector<int64_t>> dims;
    if (spec.dim_arg >= 0) {
      dims = static_cast<size_t>(spec.dim_arg) < node->inputs().size()
                 ? constant_ints(node->input(static_cast<size_t>(spec.dim_arg)))
                 : std::nullopt;
      if (!dims || dims->empty()) {
        return false;
      }
    }
    if (kind == ops::Channels::kAligned || kind == ops::Channels::kZeroPreserving ||
        kind == ops::Channels::kReduction) {
      // Along the channel axis the op mixes channels; a reduction over axes before it (without
      // keepdim) moves the channel axis down.
      bool keep = true;
      if (kind == ops::Channels::kReduction) {
        const c10::optional<c10::IValue> keepdim =
            spec.keepdim_arg >= 0 && static_cast<size_t>(spec.keepdim_arg) < node->inputs().size()
                ? jit::toIValue(node->input(static_cast<size_t>(spec.keepdim_arg)))
                : c10::nullopt;
        keep = keepdim && keepdim->isBool() && keepdim->toBool();
      }
      for (const int64_t d : dims.value_or(std::vector<int64_t>{})) {
        const int64_t n = normalized(d, rank_x);
        if (n == ax) {
          // A slice whose constant bounds keep every channel is the identity there, and stays
          // so when there are fewer.
          if (spec.selects && rank_y == rank_x &&
              ops::selects_whole_axis(node, tensor_of(x)->size(ax))) {
            continue;
          }
          return false;
        }
        if (n < ax && !keep) {
          --ay;
        }
      }
    } else if (kind == ops::Channels::kInsertAxis) {
      if (normalized(dims->front(), rank_y) <= ax) {
        ++ay;
      }
    } else if (kind == ops::Channels::kRemoveAxis) {
      const int64_t d = normalized(dims->front(), rank_x);
      if (d == ax) {
        return false;
      }
      if (d < ax && rank_y < rank_x) {
        --ay;
      }
    }
    // A result of rank < 2 has no channel axis a later reader would keep: not followed.
    if (rank_y < 2 || ay < 0 || ay >= rank_y || tensor_of(x)->size(ax) != tensor_of(y)->size(ay)) {
      return false;
    }
    set_axis(y, ay);
    const int s = *space_of(x);
    set_space(y, s);
    if (keeps_zero) {
      set_zeros(y, zeros_or_empty(x, channels(x)), s);
    }
    return true;
  }

  // aten::layer_norm(x, normalized_shape, weight, bias, eps, cudnn): over the trailing axes.
  // Over the channel axis, a removed channel would change every other channel's mean and
  // variance: x keeps its channels and y gets a space that keeps them too (at x's axis, so that
  // the Linear layers after it still see their features). Over other axes it is per channel.
  bool visit_layer_norm(const jit::Node* node) {
    const jit::Value* x = node->input(0);
    const jit::Value* y = node->output();
    const std::optional<std::vector<int64_t>> shape = constant_ints(node->input(1));
    if (!channelled(x) || tensor_of(y) == nullptr || !shape) {
      return false;
    }
    const int64_t rank = tensor_of(x)->dim();
    const int64_t ax = axis_of(x);
    set_axis(y, ax);
    if (ax >= rank - static_cast<int64_t>(shape->size())) {
      const std::string where = describe(node);
      const std::string reason =
          "LayerNorm normalises over the channels: removing one changes the others' statistics";
      block_value(x, where, reason);
      const int s = spaces_.add(channels(y));
      set_space(y, s);
      spaces_.block(s, where, reason);
      return true;
    }
    const int s = *space_of(x);
    set_space(y, s);
    return true;
  }

  // parts[0], features["out"]: the tensor stored there, with its space.
  bool visit_item(const jit::Node* node) {
    const jit::Value* source = ops::item_value(node);
    const jit::Value* y = node->output();
    if (source == nullptr || !channelled(source) || tensor_of(y) == nullptr) {
      return false;
    }
    set_axis(y, axis_of(source));
    const int s = *space_of(source);
    set_space(y, s);
    set_zeros(y, zeros_or_empty(source, channels(source)), s);
    return true;
  }

  // permute / transpose: the same channels, at the axis the permutation sends them to.
  bool visit_layout(const jit::Node* node) {
    const jit::Value* x = node->input(0);
    const jit::Value* y = node->output();
    if (!channelled(x) || tensor_of(y) == nullptr) {
      return false;
    }
    const int64_t rank = tensor_of(x)->dim();
    const std::optional<std::vector<int64_t>> perm = ops::layout_permutation(node, rank);
    if (!perm) {
      return false;
    }
    const int64_t ax = axis_of(x);
    for (int64_t k = 0; k < rank; ++k) {
      if ((*perm)[static_cast<size_t>(k)] == ax) {
        set_axis(y, k);
        const int s = *space_of(x);
        set_space(y, s);
        set_zeros(y, zeros_or_empty(x, channels(x)), s);
        return true;
      }
    }
    return false;
  }

  // The other operand of a binary op may be a scalar or a tensor that broadcasts over channels.
  // Broadcasting aligns trailing axes: v's axis facing the channel axis of a rank-`rank` result
  // must be 1 (or absent).
  bool broadcasts_over_channels(const jit::Value* v, int64_t rank, int64_t axis) const {
    if (v->type()->kind() != c10::TypeKind::TensorType) {
      return true;
    }
    const at::Tensor* t = tensor_of(v);
    if (t == nullptr || t->dim() > rank) {
      return false;
    }
    const int64_t facing = axis - (rank - t->dim());
    return t->numel() == 1 || facing < 0 || t->size(facing) == 1;
  }

  bool visit_binary(const jit::Node* node, ops::ZeroRule rule) {
    const jit::Value* a = node->input(0);
    const jit::Value* b = node->input(1);
    const jit::Value* y = node->output();
    if (!channelled(y)) {
      return false;
    }
    // y holds its channels where its spaced operands do (they must agree).
    const int64_t rank = tensor_of(y)->dim();
    const auto same_rank = [&](const jit::Value* v) {
      return channelled(v) && tensor_of(v)->dim() == rank;
    };
    const int64_t axis = same_rank(a) ? axis_of(a) : (same_rank(b) ? axis_of(b) : 1);
    if (axis >= rank) {
      return false;
    }
    const int64_t c = tensor_of(y)->size(axis);
    const bool a_space = same_rank(a) && axis_of(a) == axis && channels(a) == c;
    const bool b_space = same_rank(b) && axis_of(b) == axis && channels(b) == c;
    set_axis(y, axis);
    if (a_space && b_space) {
      const int s = *space_of(a);
      if (!spaces_.unite(s, *space_of(b))) {
        return false;
      }
      set_space(y, s);
      const Bits za = zeros_or_empty(a, c);
      const Bits zb = zeros_or_empty(b, c);
      Bits z(static_cast<size_t>(c), false);
      for (size_t i = 0; i < z.size(); ++i) {
        z[i] = rule == ops::ZeroRule::kEither ? za[i] || zb[i]
               : rule == ops::ZeroRule::kFirst ? za[i]
                                                : za[i] && zb[i];
      }
      set_zeros(y, std::move(z), s);
      return true;
    }
    const jit::Value* spaced = a_space ? a : (b_space ? b : nullptr);
    const jit::Value* other = a_space ? b : a;
    if (spaced == nullptr || !broadcasts_over_channels(other, rank, axis)) {
      return false;
    }
    // The other operand broadcasts over the channels; any channels it has itself face another
    // axis of y, so they stay.
    if (other->type()->kind() == c10::TypeKind::TensorType) {
      block_value(other, describe(node), "it is broadcast against another tensor's channels");
    }
    const int s = *space_of(spaced);
    set_space(y, s);
    // x·k and x/k keep zeros (k on the right for div); x + k, max(x, k) do not.
    if (rule == ops::ZeroRule::kEither || (rule == ops::ZeroRule::kFirst && spaced == a)) {
      set_zeros(y, zeros_or_empty(spaced, c), s);
    }
    return true;
  }

  bool visit_cat(const jit::Node* node) {
    const jit::Value* y = node->output();
    // The list as the cat reads it: its literal and what was appended before (DenseNet).
    const std::optional<std::vector<const jit::Value*>> items = ops::list_items(node->input(0), node);
    if (!items || items->empty() || tensor_of(y) == nullptr || node->inputs().size() < 2) {
      return false;
    }
    const c10::optional<c10::IValue> dim_value = jit::toIValue(node->input(1));
    if (!dim_value || !dim_value->isInt()) {
      return false;
    }
    const int64_t rank = tensor_of(y)->dim();
    const int64_t dim = normalized(dim_value->toInt(), rank);
    const int64_t axis = axis_of(items->front());
    std::vector<int> parts;
    std::vector<int64_t> sizes;
    for (const jit::Value* part : *items) {
      if (!channelled(part) || tensor_of(part)->dim() != rank || axis_of(part) != axis) {
        return false;
      }
      parts.push_back(*space_of(part));
      sizes.push_back(channels(part));
    }
    set_axis(y, axis);
    if (dim != axis) {
      // Channels stay aligned: every part and the result are one space.
      for (size_t i = 1; i < parts.size(); ++i) {
        if (!spaces_.unite(parts[0], parts[i])) {
          return false;
        }
      }
      set_space(y, parts[0]);
      Bits z(static_cast<size_t>(channels(y)), true);
      for (const jit::Value* part : *items) {
        const Bits zp = zeros_or_empty(part, channels(part));
        for (size_t i = 0; i < z.size(); ++i) {
          z[i] = z[i] && zp[i];
        }
      }
      set_zeros(y, std::move(z), parts[0]);
      return true;
    }
    const int whole = spaces_.add(channels(y));
    set_space(y, whole);
    Bits z;
    for (const jit::Value* part : *items) {
      const Bits zp = zeros_or_empty(part, channels(part));
      z.insert(z.end(), zp.begin(), zp.end());
    }
    set_zeros(y, std::move(z), whole);
    spaces_.link_cat(parts, sizes, whole);
    return true;
  }

  // flatten(1) / view / reshape of [N, C, H, W] into [N, C·H·W] (or keeping [N, C, ...]).
  bool visit_reshape(const jit::Node* node) {
    const jit::Value* x = node->input(0);
    const jit::Value* y = node->output();
    if (!channelled(x) || tensor_of(y) == nullptr || tensor_of(y)->dim() < 2) {
      return false;
    }
    const at::Tensor& in = *tensor_of(x);
    const at::Tensor& out = *tensor_of(y);
    if (in.size(0) != out.size(0)) {
      return false;
    }
    const int64_t ax = axis_of(x);
    if (ax != 1) {
      // Channels elsewhere (channel-last): only a reshape that keeps every axis up to and
      // including the channel axis (merging or splitting those after it) keeps them.
      if (out.dim() <= ax) {
        return false;
      }
      for (int64_t d = 0; d <= ax; ++d) {
        if (in.size(d) != out.size(d)) {
          return false;
        }
      }
      if (node->kind() != op("aten::flatten")) {
        // A constant size at the channel axis would not follow a smaller count.
        const jit::Node* shape = node->input(1)->node();
        c10::optional<c10::IValue> size;
        if (shape->kind() == c10::prim::ListConstruct &&
            static_cast<int64_t>(shape->inputs().size()) > ax) {
          size = jit::toIValue(shape->input(static_cast<size_t>(ax)));
        }
        // Only -1 there follows a new count; a constant or a size read elsewhere would not.
        const bool follows = size && size->isInt() && size->toInt() == -1;
        if (!follows) {
          const std::string where = describe(node);
          block_value(x, where, "its target shape does not give -1 at the channel axis (" +
                                    std::to_string(ax) + ")");
          block_value(y, where, "its target shape is fixed");
          return true;
        }
      }
      set_axis(y, ax);
      const int s = *space_of(x);
      set_space(y, s);
      set_zeros(y, zeros_or_empty(x, channels(x)), s);
      return true;
    }
    if (node->kind() != op("aten::flatten")) {
      // A constant channel size in the target shape would not follow the new channel count.
      const jit::Node* shape = node->input(1)->node();
      if (shape->kind() == c10::prim::ListConstruct && shape->inputs().size() >= 2) {
        const c10::optional<c10::IValue> size1 = jit::toIValue(shape->input(1));
        if (size1 && size1->isInt() && size1->toInt() != -1) {
          const std::string where = describe(node);
          block_value(x, where, "its target shape has the constant size " +
                                    std::to_string(size1->toInt()) +
                                    " at dim 1 (write x.flatten(1) or x.view(x.size(0), -1))");
          block_value(y, where, "its target shape is a constant");
          return true;
        }
      } else if (const c10::optional<c10::IValue> sizes = jit::toIValue(node->input(1))) {
        const std::string where = describe(node);
        block_value(x, where, "its target shape is a constant");
        block_value(y, where, "its target shape is a constant");
        return true;
      }
    } else {
      const c10::optional<c10::IValue> start = jit::toIValue(node->input(1));
      if (!start || !start->isInt() || start->toInt() != 1) {
        if (start && start->isInt() && start->toInt() >= 2 && channels(x) == channels(y)) {
          const int s = *space_of(x);
          set_space(y, s);
          set_zeros(y, zeros_or_empty(x, channels(x)), s);
          return true;
        }
        return false;
      }
    }
    const int64_t c = in.size(1);
    if (out.size(1) == c) {  // [N, C, 1, 1] -> [N, C], or [N, C, H, W] -> [N, C, H·W]
      const int s = *space_of(x);
      set_space(y, s);
      set_zeros(y, zeros_or_empty(x, c), s);
      return true;
    }
    if (out.dim() != 2 || in.numel() != out.numel() || out.size(1) % c != 0) {
      return false;
    }
    const int64_t inner = out.size(1) / c;
    const int flat = spaces_.add(out.size(1));
    set_space(y, flat);
    const Bits zc = zeros_or_empty(x, c);
    Bits z(static_cast<size_t>(out.size(1)), false);
    for (int64_t i = 0; i < out.size(1); ++i) {
      z[static_cast<size_t>(i)] = zc[static_cast<size_t>(i / inner)];
    }
    set_zeros(y, std::move(z), flat);
    spaces_.link_flatten(*space_of(x), flat, inner);
    return true;
  }

  const jit::Module& module_;
  std::unordered_map<std::string, const sdk::Masks*> masks_;
  std::shared_ptr<jit::Graph> graph_;
  graph_trace::ValueTensors values_;
  std::unordered_map<const jit::Value*, int64_t> axis_;  // channel axis where it is not 1
  ChannelSpaces spaces_;
  std::unordered_map<const jit::Value*, int> space_of_value_;
  std::unordered_map<const jit::Value*, Bits> zeros_;
  std::map<std::string, LayerUse> uses_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> tied_;  // module -> what else reads its tensors
};

}  // namespace

ChannelPlan plan_channels(const jit::Module& masked, const NamedMasks& masks,
                          const at::Tensor& input) {
  return ChannelFlow(masked, masks, input).run();
}

}  // namespace lithe::host::speedup_detail
