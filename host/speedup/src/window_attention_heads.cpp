// Whole-head removal for the window attentions of Swin and MaxViT (window_attention_heads.h says
// when and why).
#include "window_attention_heads.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/graph/submodule.h"
#include "module_rebuild.h"

namespace lithe::host::speedup_detail {
namespace {

namespace jit = torch::jit;

// The forward of a layer that lost heads, in three parts: the v2-only pieces are spliced in as
// text because code compiled from C++ type-checks both branches of an `if`, and a v1 layer has
// no logit_scale. What it computes is torchvision 0.14's shifted_window_attention with the head
// width HEAD_DIM instead of input width / num_heads: pad to whole windows, roll by the shift,
// attend within each window (relative position bias, and in shifted layers a mask of -100
// between tokens that came from different regions), merge the heads with proj, undo the roll,
// crop. The region bounds are the ones torchvision slices with, negative indices and all, so
// that a layer shifted along one axis only masks the same tokens. Dropout is called as there:
// always in training mode, at the layer's probabilities (0 in every torchvision Swin).
constexpr const char* kWindowForwardHead = R"TS(
def _lithe_window_heads_forward(self, x: Tensor) -> Tensor:
    position_bias = self.get_relative_position_bias()
    heads = self.num_heads
    head_dim = HEAD_DIM
    inner = heads * head_dim
    wh = self.window_size[0]
    ww = self.window_size[1]
    tokens = wh * ww
    batch = x.size(0)
    height = x.size(1)
    width = x.size(2)
    channels = x.size(3)
    pad_right = (ww - width % ww) % ww
    pad_bottom = (wh - height % wh) % wh
    y = torch.constant_pad_nd(x, [0, 0, 0, pad_right, 0, pad_bottom], 0.0)
    padded_h = height + pad_bottom
    padded_w = width + pad_right
    shift_h = self.shift_size[0]
    shift_w = self.shift_size[1]
    if wh >= padded_h:
        shift_h = 0
    if ww >= padded_w:
        shift_w = 0
    shifted = shift_h + shift_w > 0
    if shifted:
        y = torch.roll(y, [-shift_h, -shift_w], [1, 2])
    rows = padded_h // wh
    cols = padded_w // ww
    windows = rows * cols
    y = y.view([batch, rows, wh, cols, ww, channels]).permute([0, 1, 3, 2, 4, 5])
    y = y.reshape([batch * windows, tokens, channels])
    qkv_bias = self.qkv.bias
)TS";

constexpr const char* kCosineBias = R"TS(
    qkv_bias = qkv_bias.clone()
    qkv_bias[inner:2 * inner].zero_()
)TS";

constexpr const char* kProjection = R"TS(
    qkv = torch.linear(y, self.qkv.weight, qkv_bias)
    qkv = qkv.reshape([y.size(0), y.size(1), 3, heads, head_dim]).permute([2, 0, 3, 1, 4])
    q = qkv[0]
    k = qkv[1]
    v = qkv[2]
)TS";

constexpr const char* kCosineScores = R"TS(
    q_unit = q / q.norm(2.0, [-1], True).clamp_min(1e-12).expand_as(q)
    k_unit = k / k.norm(2.0, [-1], True).clamp_min(1e-12).expand_as(k)
    scores = torch.matmul(q_unit, k_unit.transpose(-2, -1))
    scores = scores * torch.clamp(self.logit_scale, max=4.605170185988092).exp()
)TS";

constexpr const char* kScaledScores = R"TS(
    scores = (q * float(head_dim) ** -0.5).matmul(k.transpose(-2, -1))
)TS";

constexpr const char* kWindowForwardTail = R"TS(
    scores = scores + position_bias
    if shifted:
        labels = y.new_zeros([padded_h, padded_w])
        end = 9223372036854775807
        h_starts = [0, -wh, -shift_h]
        h_stops = [-wh, -shift_h, end]
        w_starts = [0, -ww, -shift_w]
        w_stops = [-ww, -shift_w, end]
        count = 0
        for i in range(3):
            for j in range(3):
                labels[h_starts[i]:h_stops[i], w_starts[j]:w_stops[j]] = count
                count += 1
        labels = labels.view([rows, wh, cols, ww]).permute([0, 2, 1, 3]).reshape([windows, tokens])
        apart = labels.unsqueeze(1) - labels.unsqueeze(2)
        apart = apart.masked_fill(apart != 0, -100.0).masked_fill(apart == 0, 0.0)
        scores = scores.view([y.size(0) // windows, windows, heads, y.size(1), y.size(1)])
        scores = scores + apart.unsqueeze(1).unsqueeze(0)
        scores = scores.view([-1, heads, y.size(1), y.size(1)])
    probs = torch.softmax(scores, -1)
    probs = torch.dropout(probs, self.attention_dropout, True)
    out = probs.matmul(v).transpose(1, 2).reshape([y.size(0), y.size(1), inner])
    out = torch.linear(out, self.proj.weight, self.proj.bias)
    out = torch.dropout(out, self.dropout, True)
    out = out.view([batch, rows, cols, wh, ww, channels]).permute([0, 1, 3, 2, 4, 5])
    out = out.reshape([batch, padded_h, padded_w, channels])
    if shifted:
        out = torch.roll(out, [shift_h, shift_w], [1, 2])
    return out[:, :height, :width, :].contiguous()
)TS";

// MaxViT's RelativePositionalMultiHeadAttention over [B, G, P, D] partitions, as torchvision
// 0.14 computes it (keys scaled by the layer's own scale_factor, einsum products, the bias
// table's heads), but merging num_heads × head_dim channels instead of the input's D. The
// projections are applied as torch.linear of their tensors (what nn.Linear's forward is): code
// compiled from C++ cannot call submodules whose class types were just copied.
constexpr const char* kPartitionForward = R"TS(
def _lithe_window_heads_forward(self, x: Tensor) -> Tensor:
    batch = x.size(0)
    groups = x.size(1)
    tokens = x.size(2)
    heads = self.n_heads
    head_dim = self.head_dim
    q, k, v = torch.chunk(torch.linear(x, self.to_qkv.weight, self.to_qkv.bias), 3, -1)
    q = q.reshape([batch, groups, tokens, heads, head_dim]).permute([0, 1, 3, 2, 4])
    k = k.reshape([batch, groups, tokens, heads, head_dim]).permute([0, 1, 3, 2, 4])
    v = v.reshape([batch, groups, tokens, heads, head_dim]).permute([0, 1, 3, 2, 4])
    k = k * self.scale_factor
    scores = torch.einsum("B G H I D, B G H J D -> B G H I J", [q, k])
    probs = torch.softmax(scores + self.get_relative_positional_bias(), -1)
    out = torch.einsum("B G H I J, B G H J D -> B G H I D", [probs, v])
    out = out.permute([0, 1, 3, 2, 4]).reshape([batch, groups, tokens, heads * head_dim])
    return torch.linear(out, self.merge.weight, self.merge.bias)
)TS";

std::string swin_forward(int64_t head_dim, bool cosine) {
  std::string text = std::string(kWindowForwardHead) + (cosine ? kCosineBias : "") +
                     kProjection + (cosine ? kCosineScores : kScaledScores) +
                     kWindowForwardTail;
  const std::string key = "HEAD_DIM";
  text.replace(text.find(key), key.size(), std::to_string(head_dim));
  return text;
}

std::string window_forward(const WindowAttentionKind& kind, int64_t head_dim) {
  switch (kind.forward) {
    case WindowAttentionKind::Forward::kSwin:
      return swin_forward(head_dim, false);
    case WindowAttentionKind::Forward::kSwinCosine:
      return swin_forward(head_dim, true);
    case WindowAttentionKind::Forward::kPartition:
      return kPartitionForward;
  }
  return {};
}

std::string type_name(const jit::Module& m) {
  return m.type()->name() ? m.type()->name()->name() : std::string();
}

bool has_linear(const jit::Module& m, const std::string& name) {
  const std::optional<jit::Module> child = find_submodule(m, name);
  return child.has_value() && child->hasattr("weight") && child->attr("weight").isTensor() &&
         child->attr("weight").toTensor().dim() == 2;
}

// torchvision's window attentions, by class name: Swin v1 and v2, MaxViT's.
const std::vector<WindowAttentionKind>& kinds() {
  static const std::vector<WindowAttentionKind> table = {
      {"ShiftedWindowAttention", "qkv", "proj", "num_heads", "relative_position_bias_table", "",
       "", {"aten::reshape"}, WindowAttentionKind::Forward::kSwin},
      {"ShiftedWindowAttentionV2", "qkv", "proj", "num_heads", "", "cpb_mlp.2", "logit_scale",
       {"aten::reshape"}, WindowAttentionKind::Forward::kSwinCosine},
      {"RelativePositionalMultiHeadAttention", "to_qkv", "merge", "n_heads",
       "relative_position_bias_table", "", "", {"aten::chunk", "prim::ListUnpack"},
       WindowAttentionKind::Forward::kPartition},
  };
  return table;
}

// The kind of `m`, when its class is one of them and it has the members the rebuilt forward
// reads.
const WindowAttentionKind* window_attention_kind(const jit::Module& m) {
  const std::string type = type_name(m);
  for (const WindowAttentionKind& kind : kinds()) {
    if (type != kind.type) {
      continue;
    }
    const bool swin = kind.forward != WindowAttentionKind::Forward::kPartition;
    const bool members =
        has_linear(m, kind.qkv) && has_linear(m, kind.proj) && m.hasattr(kind.heads) &&
        (swin ? m.hasattr("window_size") && m.hasattr("shift_size") &&
                    m.hasattr("attention_dropout") && m.hasattr("dropout") &&
                    m.find_method("get_relative_position_bias")
              : m.hasattr("head_dim") && m.hasattr("scale_factor") &&
                    m.find_method("get_relative_positional_bias"));
    const bool tables = (kind.table.empty() || m.hasattr(kind.table)) &&
                        (kind.bias_mlp.empty() || has_linear(m, kind.bias_mlp)) &&
                        (kind.scale.empty() || m.hasattr(kind.scale));
    return members && tables ? &kind : nullptr;
  }
  return nullptr;
}

bool changed(const ChannelPlan& plan, const std::string& name) {
  const auto it = plan.layers.find(name);
  return it != plan.layers.end() && it->second.changed();
}

at::Tensor tensor_attr(const jit::Module& m, const std::string& name) {
  const c10::IValue v = m.attr(name, c10::IValue());
  return v.isTensor() ? v.toTensor().detach() : at::Tensor();
}

}  // namespace

std::vector<WindowHeadPlan> plan_window_heads(const jit::Module& masked, const ChannelPlan& plan,
                                              std::vector<SpeedupBlock>& blocked) {
  std::vector<WindowHeadPlan> plans;
  for (const auto& item : masked.named_modules()) {
    const WindowAttentionKind* kind = window_attention_kind(item.value);
    if (item.name.empty() || kind == nullptr) {
      continue;
    }
    const std::string& name = item.name;
    const jit::Module qkv = submodule(item.value, kind->qkv);
    const at::Tensor weight = tensor_attr(qkv, "weight");
    const at::Tensor bias = tensor_attr(qkv, "bias");
    const int64_t num_heads = int_constant_or_attr(item.value, kind->heads);
    if (num_heads < 1 || weight.size(0) % (3 * num_heads) != 0) {
      continue;
    }
    WindowHeadPlan p{{name, num_heads, weight.size(0) / (3 * num_heads), {}}, kind};
    // MaxViT's forward reads its head width from head_dim: it must be the projection's.
    if (kind->forward == WindowAttentionKind::Forward::kPartition &&
        int_constant_or_attr(item.value, "head_dim") != p.heads.head_dim) {
      continue;
    }
    p.heads.keep = heads_with_values(weight, bias, num_heads);
    const auto gone = static_cast<int64_t>(num_heads - p.heads.keep.size());
    if (gone == 0) {
      continue;
    }
    std::string refusal;
    if (!bias.defined()) {
      refusal = "its " + kind->qkv + " has no bias";
    } else {
      for (const std::string& layer : {kind->qkv, kind->proj, kind->bias_mlp}) {
        if (!layer.empty() && changed(plan, name + "." + layer)) {
          refusal = "its " + layer + " also loses channels";
          break;
        }
      }
    }
    if (!refusal.empty()) {
      blocked.push_back({name + " (" + type_name(item.value) + ")",
                         "keeps its " + std::to_string(gone) + " heads with zero value rows: " +
                             refusal,
                         gone * p.heads.head_dim});
      continue;
    }
    if (p.heads.keep.empty()) {
      p.heads.keep.push_back(0);  // one silent head: the output stays proj's bias
    }
    // The channel plan kept the projection's zero rows, at the forward's op that splits them
    // into heads ("<name> (<class>): <op>") or at the projection itself, whose bias the
    // forward reads ("<name>.qkv", Swin v2); the zero rows of removed heads go with them (a
    // removed head's q and k rows need not be zero: its value rows are).
    at::Tensor zero_rows = weight.eq(0).all(1);
    if (bias.defined()) {
      zero_rows = zero_rows.logical_and(bias.eq(0));
    }
    const at::Tensor kept_rows =
        at::tensor(head_rows(num_heads, p.heads.head_dim, p.heads.keep), at::kLong);
    const int64_t removed = zero_rows.sum().item<int64_t>() -
                            zero_rows.index_select(0, kept_rows).sum().item<int64_t>();
    std::vector<std::string> places = {name + "." + kind->qkv};
    for (const std::string& op : kind->plan_places) {
      places.push_back(name + " (" + kind->type + "): " + op);
    }
    for (auto it = blocked.begin(); it != blocked.end();) {
      if (std::find(places.begin(), places.end(), it->where) != places.end()) {
        it->channels -= removed;
        if (it->channels <= 0) {
          it = blocked.erase(it);
          continue;
        }
      }
      ++it;
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

std::vector<std::string> window_head_modules(const WindowHeadPlan& plan) {
  const std::string& name = plan.heads.module;
  std::vector<std::string> modules = {name, name + "." + plan.kind->qkv,
                                      name + "." + plan.kind->proj};
  if (!plan.kind->bias_mlp.empty()) {
    modules.push_back(name + "." + plan.kind->bias_mlp);
  }
  return modules;
}

std::vector<ShrunkLayer> remove_window_heads(jit::Module& module,
                                             const std::vector<WindowHeadPlan>& plans) {
  std::vector<ShrunkLayer> shrunk;
  for (const WindowHeadPlan& plan : plans) {
    const HeadPlan& p = plan.heads;
    const WindowAttentionKind& kind = *plan.kind;
    jit::Module layer = submodule(module, p.module);
    jit::Module qkv = submodule(layer, kind.qkv);
    jit::Module proj = submodule(layer, kind.proj);
    const std::vector<int64_t> rows = head_rows(p.num_heads, p.head_dim, p.keep);
    const std::vector<int64_t> columns = head_columns(p.head_dim, p.keep);
    const at::Tensor row_index = at::tensor(rows, at::kLong);
    const at::Tensor column_index = at::tensor(columns, at::kLong);
    const at::Tensor head_index = at::tensor(p.keep, at::kLong);
    const auto select = [](const at::Tensor& index, int64_t dim) {
      return [index, dim](const at::Tensor& t) { return t.index_select(dim, index); };
    };
    const at::Tensor qkv_weight = tensor_attr(qkv, "weight");
    const at::Tensor proj_weight = tensor_attr(proj, "weight");
    ShrunkLayer q{p.module + "." + kind.qkv, "Linear", qkv_weight.sizes().vec(), {}, rows,
                  all(qkv_weight.size(1))};
    ShrunkLayer o{p.module + "." + kind.proj, "Linear", proj_weight.sizes().vec(), {},
                  all(proj_weight.size(0)), columns};
    set_tensor(qkv, "weight", select(row_index, 0));
    set_tensor(qkv, "bias", select(row_index, 0));
    set_int(qkv, "out_features", static_cast<int64_t>(rows.size()));
    set_tensor(proj, "weight", select(column_index, 1));
    set_int(proj, "in_features", static_cast<int64_t>(columns.size()));
    q.weight_shape_after = tensor_attr(qkv, "weight").sizes().vec();
    o.weight_shape_after = tensor_attr(proj, "weight").sizes().vec();
    shrunk.push_back(std::move(q));
    shrunk.push_back(std::move(o));
    if (!kind.bias_mlp.empty()) {
      // One row of the position MLP's last Linear per head.
      jit::Module mlp_out = submodule(layer, kind.bias_mlp);
      const at::Tensor mlp_weight = tensor_attr(mlp_out, "weight");
      ShrunkLayer b{p.module + "." + kind.bias_mlp, "Linear", mlp_weight.sizes().vec(), {},
                    p.keep, all(mlp_weight.size(1))};
      set_tensor(mlp_out, "weight", select(head_index, 0));
      set_tensor(mlp_out, "bias", select(head_index, 0));
      set_int(mlp_out, "out_features", static_cast<int64_t>(p.keep.size()));
      b.weight_shape_after = tensor_attr(mlp_out, "weight").sizes().vec();
      shrunk.push_back(std::move(b));
    }
    if (!kind.scale.empty()) {
      set_tensor(layer, kind.scale, select(head_index, 0));  // [heads, 1, 1]
    }
    if (!kind.table.empty()) {
      set_tensor(layer, kind.table, select(head_index, 1));  // [positions, heads]
    }
    set_int(layer, kind.heads, static_cast<int64_t>(p.keep.size()));
    replace_forward(layer, window_forward(kind, p.head_dim), "_lithe_window_heads_forward");
  }
  return shrunk;
}

}  // namespace lithe::host::speedup_detail
