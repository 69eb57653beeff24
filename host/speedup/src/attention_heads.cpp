// Whole-head removal for nn.MultiheadAttention (attention_heads.h says when and why).
#include "attention_heads.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/graph/submodule.h"
#include "lithe/sdk/error.h"
#include "module_rebuild.h"

namespace lithe::host::speedup_detail {
namespace {

namespace jit = torch::jit;

constexpr const char* kNative = "aten::_native_multi_head_attention";

// The forward a layer that lost heads runs: nn.MultiheadAttention's inference computation over
// num_heads × head_dim inner channels, the products through torch's fused
// scaled_dot_product_attention (scale 1/sqrt(head_dim), as the stock kernel). It has the stock
// forward's signature, so callers stay as they are; what the planner did not see used (masks,
// attention weights) is refused when called, not computed differently. BATCH_FIRST is the
// layer's batch_first, written in as a literal: a constant of the class (torch.nn's
// __constants__), which code compiled from C++ cannot read as self.batch_first.
// CAUSAL_ARGUMENT and CAUSAL_CHECK are the trailing `is_causal` argument (torch 2.x) and its
// check where the stock forward has one, nothing where it does not.
constexpr const char* kHeadsForward = R"TS(
def _lithe_heads_forward(self, query: Tensor, key: Tensor, value: Tensor,
                         key_padding_mask: Optional[Tensor] = None, need_weights: bool = True,
                         attn_mask: Optional[Tensor] = None,
                         average_attn_weights: bool = TrueCAUSAL_ARGUMENT) -> Tuple[Tensor, Optional[Tensor]]:
    assert key_padding_mask is None and attn_mask is None and not need_weights and query.dim() == 3CAUSAL_CHECK, "lithe speedup removed heads of this attention; it takes batched inputs without masks and returns no attention weights (need_weights=False), and is not causal"
    q = query
    k = key
    v = value
    if not BATCH_FIRST:
        q = q.transpose(0, 1)
        k = k.transpose(0, 1)
        v = v.transpose(0, 1)
    n = q.size(0)
    target = q.size(1)
    source = k.size(1)
    heads = self.num_heads
    head_dim = self.head_dim
    inner = heads * head_dim
    weight = self.in_proj_weight
    bias = self.in_proj_bias
    assert bias is not None
    qp = torch.linear(q, weight[0:inner], bias[0:inner])
    kp = torch.linear(k, weight[inner:2 * inner], bias[inner:2 * inner])
    vp = torch.linear(v, weight[2 * inner:3 * inner], bias[2 * inner:3 * inner])
    qh = qp.reshape([n, target, heads, head_dim]).transpose(1, 2)
    kh = kp.reshape([n, source, heads, head_dim]).transpose(1, 2)
    vh = vp.reshape([n, source, heads, head_dim]).transpose(1, 2)
    mixed = torch.scaled_dot_product_attention(qh, kh, vh)
    merged = mixed.transpose(1, 2).reshape([n, target, inner])
    out = torch.linear(merged, self.out_proj.weight, self.out_proj.bias)
    if not BATCH_FIRST:
        out = out.transpose(0, 1)
    weights: Optional[Tensor] = None
    return out, weights
)TS";

bool is_attention(const jit::Module& m) {
  return m.type()->name() && m.type()->name()->name() == "MultiheadAttention" &&
         m.hasattr("in_proj_weight") && m.attr("in_proj_weight").isTensor() &&
         m.hasattr("num_heads") && m.hasattr("head_dim") && m.hasattr("out_proj");
}

// The native attention calls of each module, and why a module's calls cannot lose heads.
struct Calls {
  int count = 0;
  std::string refusal;
};

// The constant `v` holds: jit::toIValue, also through the unpacking of a constant tuple
// (`merged_mask, mask_type = self.merge_masks(None, None, x)` folds to a (None, None) constant).
c10::optional<c10::IValue> constant_value(const jit::Value* v) {
  if (v->node()->kind() == c10::prim::TupleUnpack) {
    const c10::optional<c10::IValue> tuple = jit::toIValue(v->node()->input());
    if (tuple && tuple->isTuple() && v->offset() < tuple->toTupleRef().elements().size()) {
      return tuple->toTupleRef().elements()[v->offset()];
    }
  }
  return jit::toIValue(v);
}

void collect_calls(const jit::Block* block, std::map<std::string, Calls>& calls) {
  static const c10::Symbol native = c10::Symbol::fromQualString(kNative);
  for (const jit::Node* node : block->nodes()) {
    for (const jit::Block* sub : node->blocks()) {
      collect_calls(sub, calls);
    }
    if (node->kind() != native) {
      continue;
    }
    const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(node);
    if (!scope) {
      continue;
    }
    Calls& c = calls[scope->module];
    ++c.count;
    const c10::optional<c10::IValue> mask = node->inputs().size() > 9
                                                ? constant_value(node->input(9))
                                                : c10::optional<c10::IValue>(c10::IValue());
    const c10::optional<c10::IValue> weights =
        node->inputs().size() > 10 ? constant_value(node->input(10))
                                   : c10::optional<c10::IValue>(c10::IValue(false));
    if (!mask || !mask->isNone()) {
      c.refusal = "a call passes an attention mask";
    } else if (!weights || !weights->isBool() || weights->toBool()) {
      c.refusal = "a call reads its attention weights (need_weights is not False)";
    }
  }
}

bool batch_first(const jit::Module& m) {
  if (m.type()->hasConstant("batch_first")) {
    return m.type()->getConstant("batch_first").toBool();
  }
  return m.hasattr("batch_first") && m.attr("batch_first").toBool();
}

// Whether m's own forward takes an argument named `name` (torch 2.x added `is_causal`).
// Gives `m` kHeadsForward as its forward, with m's batch_first and signature written in.
void replace_heads_forward(jit::Module& m) {
  std::string text = kHeadsForward;
  substitute(text, "BATCH_FIRST", batch_first(m) ? "True" : "False");
  const bool causal = method_takes(m, "forward", "is_causal");
  substitute(text, "CAUSAL_ARGUMENT", causal ? ", is_causal: bool = False" : "");
  substitute(text, "CAUSAL_CHECK", causal ? " and not is_causal" : "");
  replace_forward(m, text, "_lithe_heads_forward");
}

}  // namespace

std::vector<int64_t> head_rows(int64_t num_heads, int64_t head_dim,
                               const std::vector<int64_t>& keep) {
  std::vector<int64_t> rows;
  const int64_t inner = num_heads * head_dim;
  for (int64_t part = 0; part < 3; ++part) {
    for (const int64_t h : keep) {
      for (int64_t i = 0; i < head_dim; ++i) {
        rows.push_back(part * inner + h * head_dim + i);
      }
    }
  }
  return rows;
}

std::vector<int64_t> heads_with_values(const at::Tensor& weight, const at::Tensor& bias,
                                       int64_t num_heads) {
  const int64_t inner = weight.size(0) / 3;
  // Value rows of each head, with their bias: [H, d·E (+ d)].
  at::Tensor values = weight.narrow(0, 2 * inner, inner).reshape({num_heads, -1});
  if (bias.defined()) {
    values = at::cat({values, bias.narrow(0, 2 * inner, inner).reshape({num_heads, -1})}, 1);
  }
  const at::Tensor dead = values.eq(0).all(1);
  std::vector<int64_t> keep;
  for (int64_t h = 0; h < num_heads; ++h) {
    if (!dead[h].item<bool>()) {
      keep.push_back(h);
    }
  }
  return keep;
}

std::vector<int64_t> head_columns(int64_t head_dim, const std::vector<int64_t>& keep) {
  std::vector<int64_t> columns;
  for (const int64_t h : keep) {
    for (int64_t i = 0; i < head_dim; ++i) {
      columns.push_back(h * head_dim + i);
    }
  }
  return columns;
}

std::vector<HeadPlan> plan_heads(const jit::Module& masked, const ChannelPlan& plan,
                                 std::vector<SpeedupBlock>& blocked) {
  std::vector<std::pair<std::string, jit::Module>> layers;
  for (const auto& item : masked.named_modules()) {
    if (!item.name.empty() && is_attention(item.value)) {
      layers.emplace_back(item.name, item.value);
    }
  }
  if (layers.empty()) {
    return {};
  }
  std::map<std::string, Calls> calls;
  collect_calls(graph_trace::inline_forward(masked)->block(), calls);
  std::vector<HeadPlan> plans;
  for (const auto& [name, layer] : layers) {
    HeadPlan p{name, int_constant_or_attr(layer, "num_heads"),
               int_constant_or_attr(layer, "head_dim"), {}};
    const at::Tensor weight = layer.attr("in_proj_weight").toTensor().detach();
    const c10::IValue bias_value = layer.attr("in_proj_bias");
    const int64_t inner = p.num_heads * p.head_dim;
    if (p.num_heads < 1 || weight.dim() != 2 || weight.size(0) != 3 * inner) {
      continue;
    }
    p.keep = heads_with_values(weight,
                               bias_value.isTensor() ? bias_value.toTensor().detach()
                                                     : at::Tensor(),
                               p.num_heads);
    const auto gone = static_cast<int64_t>(p.num_heads - p.keep.size());
    if (gone == 0) {
      continue;
    }
    std::string refusal;
    const auto c = calls.find(name);
    if (c == calls.end() || c->second.count == 0) {
      refusal = "its forward never runs the inference kernel (only batch_first self-attention in "
                "eval mode does), which the rebuilt attention replaces";
    } else if (!c->second.refusal.empty()) {
      refusal = c->second.refusal + ", which the rebuilt attention does not support";
    } else if (!bias_value.isTensor() || !bias_value.toTensor().defined()) {
      refusal = "it has no in_proj_bias";
    } else if (plan.layers.count(name + ".out_proj") != 0 &&
               plan.layers.at(name + ".out_proj").changed()) {
      refusal = "its out_proj also loses channels";
    }
    if (!refusal.empty()) {
      blocked.push_back({name + " (" + kNative + ")",
                         "keeps its " + std::to_string(gone) + " heads with zero value rows: " +
                             refusal,
                         gone * p.head_dim});
      continue;
    }
    if (p.keep.empty()) {
      p.keep.push_back(0);  // one silent head: the output stays out_proj's bias, shapes stay sane
    }
    if (static_cast<int64_t>(p.keep.size()) < p.num_heads) {
      plans.push_back(std::move(p));
    }
  }
  return plans;
}

std::vector<ShrunkLayer> remove_heads(jit::Module& module, const std::vector<HeadPlan>& plans) {
  std::vector<ShrunkLayer> shrunk;
  for (const HeadPlan& p : plans) {
    jit::Module layer = submodule(module, p.module);
    jit::Module out_proj = submodule(module, p.module + ".out_proj");
    const std::vector<int64_t> rows = head_rows(p.num_heads, p.head_dim, p.keep);
    const std::vector<int64_t> columns = head_columns(p.head_dim, p.keep);
    const at::Tensor row_index = at::tensor(rows, at::kLong);
    const at::Tensor column_index = at::tensor(columns, at::kLong);
    const at::Tensor in_proj = layer.attr("in_proj_weight").toTensor().detach();
    const at::Tensor out_weight = out_proj.attr("weight").toTensor().detach();
    ShrunkLayer attention{p.module, "MultiheadAttention", in_proj.sizes().vec(), {}, rows,
                          all(in_proj.size(1))};
    ShrunkLayer projection{p.module + ".out_proj", "Linear", out_weight.sizes().vec(), {},
                           all(out_weight.size(0)), columns};
    const auto keep_rows = [&](const at::Tensor& t) { return t.index_select(0, row_index); };
    set_tensor(layer, "in_proj_weight", keep_rows);
    set_tensor(layer, "in_proj_bias", keep_rows);
    set_int(layer, "num_heads", static_cast<int64_t>(p.keep.size()));
    set_tensor(out_proj, "weight",
               [&](const at::Tensor& w) { return w.index_select(1, column_index); });
    set_int(out_proj, "in_features", static_cast<int64_t>(columns.size()));
    replace_heads_forward(layer);
    attention.weight_shape_after = layer.attr("in_proj_weight").toTensor().sizes().vec();
    projection.weight_shape_after = out_proj.attr("weight").toTensor().sizes().vec();
    shrunk.push_back(std::move(attention));
    shrunk.push_back(std::move(projection));
  }
  return shrunk;
}

}  // namespace lithe::host::speedup_detail
