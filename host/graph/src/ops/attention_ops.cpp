// Attention. nn.MultiheadAttention runs its inference kernel, aten::_native_multi_head_attention,
// whenever grad is off and its fast-path conditions hold (ViT's encoder blocks, batch_first),
// and nn.TransformerEncoderLayer its own, aten::_transformer_encoder_layer_fwd; ONNX has no such
// ops (nor attention before opset 23), so each is written as what it computes: the three input
// projections, a scaled dot product per head, softmax, the weighted sum and the output
// projection (plus the layer's norms and feed-forward block). Everything else in torch 2.x
// attends through aten::scaled_dot_product_attention (nn.MultiheadAttention's other path, timm,
// research code), written as its formula.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

// Whether anything reads `v`, looking through the tuple a forward packs it into and unpacks
// again (`x, _ = self.self_attention(x, x, x, need_weights=False)`) or indexes
// (nn.TransformerEncoderLayer's `self.self_attn(x, x, x, need_weights=False)[0]`).
bool read(const jit::Value* v) {
  for (const jit::Use& use : v->uses()) {
    if (use.user->kind() != c10::prim::TupleConstruct) {
      return true;
    }
    for (const jit::Use& tuple_use : use.user->output()->uses()) {
      const jit::Node* reader = tuple_use.user;
      if (reader->kind() == c10::prim::TupleUnpack) {
        if (reader->output(use.offset)->hasUses()) {
          return true;
        }
        continue;
      }
      const c10::optional<c10::IValue> index =
          reader->kind() == c10::prim::TupleIndex ? jit::toIValue(reader->input(1))
                                                  : c10::nullopt;
      if (!index || !index->isInt() || index->toInt() == static_cast<int64_t>(use.offset)) {
        return true;
      }
    }
  }
  return false;
}

// nn.MultiheadAttention's computation on batch-first [N, len, E] inputs named `query`, `key`
// and `value` (shapes `q_shape` and `k_shape`): the three projections from the packed
// `qkv_weight` / `qkv_bias`, a scaled dot product per head, softmax, the weighted sum and the
// output projection. Returns the name of the result (`n`'s output with `last`).
std::string attention_steps(OnnxWriter& w, const jit::Node* n, const std::string& query,
                            const std::string& key, const std::string& value,
                            at::IntArrayRef q_shape, at::IntArrayRef k_shape, int64_t embed,
                            int64_t heads, const at::Tensor& qkv_weight,
                            const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
                            const at::Tensor& proj_bias, bool last) {
  if (q_shape.size() != 3 || k_shape.size() != 3) {
    w.unsupported(n, "only batched [N, L, E] inputs are written (query rank " +
                         std::to_string(q_shape.size()) + ", key rank " +
                         std::to_string(k_shape.size()) + ")");
  }
  if (heads < 1 || embed % heads != 0 || q_shape[2] != embed) {
    w.unsupported(n, "embed_dim " + std::to_string(embed) + " is not " + std::to_string(heads) +
                         " equal heads of the input's last axis (" + std::to_string(q_shape[2]) +
                         ")");
  }
  const int64_t head_dim = embed / heads;
  const int64_t batch = q_shape[0];
  const int64_t target = q_shape[1];
  const int64_t source = k_shape[1];
  const auto ints = [&](const char* stem, std::vector<int64_t> v) {
    return w.initializer(stem, at::tensor(v, at::kLong));
  };
  // x · W[part]ᵀ + b[part]: one of the three input projections.
  const auto project = [&](const std::string& x, int64_t part, const char* stem) {
    const at::Tensor weight = qkv_weight.narrow(0, part * embed, embed).t().contiguous();
    const at::Tensor bias = qkv_bias.narrow(0, part * embed, embed).contiguous();
    const std::string product = w.step(n, "MatMul", {x, w.initializer(stem, weight)});
    return w.step(n, "Add", {product, w.initializer(stem, bias)});
  };
  // [N, len, E] -> [N, len, heads, head_dim] -> `perm`.
  const auto split_heads = [&](const std::string& x, int64_t len, std::vector<int64_t> perm) {
    const std::string shaped =
        w.step(n, "Reshape", {x, ints("heads_shape", {batch, len, heads, head_dim})});
    return w.step(n, "Transpose", {shaped}, {{"perm", std::move(perm)}});
  };
  const std::string q = split_heads(project(query, 0, "q_proj"), target, {0, 2, 1, 3});
  const std::string k = split_heads(project(key, 1, "k_proj"), source, {0, 2, 3, 1});
  const std::string v = split_heads(project(value, 2, "v_proj"), source, {0, 2, 1, 3});
  // torch scales q by 1/sqrt(head_dim) before the product, as here.
  const std::string scaled = w.step(
      n, "Mul",
      {q, w.initializer("scale", at::scalar_tensor(1.0 / std::sqrt(static_cast<double>(head_dim)),
                                                  at::kFloat))});
  const std::string scores = w.step(n, "MatMul", {scaled, k});
  const std::string weights = w.step(n, "Softmax", {scores}, {{"axis", int64_t{-1}}});
  const std::string mixed = w.step(n, "MatMul", {weights, v});
  const std::string merged = w.step(
      n, "Reshape",
      {w.step(n, "Transpose", {mixed}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}),
       ints("merged_shape", {batch, target, embed})});
  const std::string product = w.step(
      n, "MatMul", {merged, w.initializer("out_proj", proj_weight.detach().t().contiguous())});
  const std::vector<std::string> inputs = {
      product, w.initializer("out_proj_bias", proj_bias.detach().contiguous())};
  return last ? w.emit(n, "Add", inputs) : w.step(n, "Add", inputs);
}

// aten::_native_multi_head_attention(query, key, value, embed_dim, num_heads, qkv_weight,
// qkv_bias, proj_weight, proj_bias, mask, need_weights, average_attn_weights, mask_type), with
// batch-first [N, L, E] inputs and no mask; the attention weights (output 1) must be unused.
void emit_native_attention(OnnxWriter& w, const jit::Node* n) {
  if (n->inputs().size() < 9) {
    w.unsupported(n, "an overload Lithe does not know (" + std::to_string(n->inputs().size()) +
                         " arguments)");
  }
  if (n->inputs().size() > 9 && w.present(n->input(9))) {
    w.unsupported(n, "an attention mask is not written");
  }
  if (n->outputs().size() > 1 && read(n->output(1))) {
    w.unsupported(n, "its attention weights are read (need_weights=True)");
  }
  attention_steps(w, n, w.input(n, 0), w.input(n, 1), w.input(n, 2),
                  w.tensor(n->input(0)).sizes(), w.tensor(n->input(1)).sizes(),
                  w.constant(n, 3).toInt(), w.constant(n, 4).toInt(),
                  w.tensor(n->input(5)).detach(), w.tensor(n->input(6)).detach(),
                  w.tensor(n->input(7)), w.tensor(n->input(8)), /*last=*/true);
}

// aten::_transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias,
// proj_weight, proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
// norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask, mask_type):
// nn.TransformerEncoderLayer's inference kernel (eval, no grad, batch_first). Written as the
// layer computes it: self-attention and feed-forward blocks with their residuals, each
// normalised before (norm_first) or after.
void emit_encoder_layer(OnnxWriter& w, const jit::Node* n) {
  if (n->inputs().size() < 18) {
    w.unsupported(n, "an overload Lithe does not know (" + std::to_string(n->inputs().size()) +
                         " arguments)");
  }
  if (n->inputs().size() > 18 && w.present(n->input(18))) {
    w.unsupported(n, "an attention mask is not written");
  }
  const at::Tensor& src = w.tensor(n->input(0));
  const int64_t embed = w.constant(n, 1).toInt();
  const int64_t heads = w.constant(n, 2).toInt();
  const bool gelu = w.constant(n, 7).toBool();
  const bool norm_first = w.constant(n, 8).toBool();
  const double eps = w.constant(n, 9).toDouble();
  const std::vector<int64_t> normalized = {embed};
  const auto norm = [&](const std::string& x, size_t weight, bool last) {
    return layer_norm_steps(w, n, x, src.dim(), normalized, eps, w.input(n, weight),
                            w.input(n, weight + 1), last);
  };
  const auto attend = [&](const std::string& x) {
    return attention_steps(w, n, x, x, x, src.sizes(), src.sizes(), embed, heads,
                           w.tensor(n->input(3)).detach(), w.tensor(n->input(4)).detach(),
                           w.tensor(n->input(5)), w.tensor(n->input(6)), /*last=*/false);
  };
  // x · Wᵀ + b for the weight at input `weight` and its bias after it.
  const auto linear = [&](const std::string& x, size_t weight) {
    const std::string product = w.step(
        n, "MatMul",
        {x, w.initializer("ffn", w.tensor(n->input(weight)).detach().t().contiguous())});
    return w.step(n, "Add", {product, w.input(n, weight + 1)});
  };
  const auto feed_forward = [&](const std::string& x) {
    const std::string hidden = linear(x, 14);
    const std::string active =
        gelu ? gelu_steps(w, n, hidden, /*last=*/false) : w.step(n, "Relu", {hidden});
    return linear(active, 16);
  };
  const std::string src_name = w.input(n, 0);
  if (norm_first) {
    const std::string x = w.step(n, "Add", {src_name, attend(norm(src_name, 10, false))});
    w.emit(n, "Add", {x, feed_forward(norm(x, 12, false))});
  } else {
    const std::string x = norm(w.step(n, "Add", {src_name, attend(src_name)}), 10, false);
    norm(w.step(n, "Add", {x, feed_forward(x)}), 12, /*last=*/true);
  }
}

// aten::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
// enable_gqa): softmax(q·kᵀ·scale + mask)·v over the last two axes. A boolean mask keeps where
// it is true, a float mask is added; is_causal masks the upper triangle (aligned at the top
// left, so no row is masked entirely). A row a mask masks entirely (its scores all -inf) gives
// zeros, as torch's kernels do; NaN from the inputs stays NaN.
void emit_sdpa(OnnxWriter& w, const jit::Node* n) {
  if (n->inputs().size() < 6) {
    w.unsupported(n, "an overload Lithe does not know (" + std::to_string(n->inputs().size()) +
                         " arguments)");
  }
  const c10::IValue dropout = w.constant(n, 4);
  if (!dropout.isDouble() || dropout.toDouble() != 0.0) {
    w.unsupported(n, "dropout_p is " + (dropout.isDouble() ? std::to_string(dropout.toDouble())
                                                            : std::string("not a number")) +
                         ", not 0 (a model in evaluation passes 0)");
  }
  if (n->inputs().size() > 7 && w.constant(n, 7).toBool()) {
    const at::Tensor& q = w.tensor(n->input(0));
    const at::Tensor& k = w.tensor(n->input(1));
    if (q.dim() < 3 || k.dim() < 3 || q.size(-3) != k.size(-3)) {
      w.unsupported(n, "enable_gqa with " +
                           (k.dim() < 3 ? std::string("unbatched") : std::to_string(k.size(-3))) +
                           " key-value heads for " +
                           (q.dim() < 3 ? std::string("unbatched") : std::to_string(q.size(-3))) +
                           " query heads is not written");
    }
  }
  const at::Tensor& query = w.tensor(n->input(0));
  const at::Tensor& key = w.tensor(n->input(1));
  if (query.dim() < 2 || key.dim() != query.dim()) {
    w.unsupported(n, "query and key must have the same rank, at least 2 (query " +
                         std::to_string(query.dim()) + ", key " + std::to_string(key.dim()) + ")");
  }
  const int64_t target = query.size(-2);
  const int64_t source = key.size(-2);
  double scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  if (n->inputs().size() > 6) {
    const c10::IValue given = w.constant(n, 6);
    if (given.isDouble()) {
      scale = given.toDouble();
    }
  }
  const int64_t rank = query.dim();
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) {
    perm[static_cast<size_t>(i)] = i;
  }
  std::swap(perm[static_cast<size_t>(rank - 1)], perm[static_cast<size_t>(rank - 2)]);
  const std::string scaled = w.step(
      n, "Mul", {w.input(n, 0), w.initializer("scale", at::scalar_tensor(scale, at::kFloat))});
  const std::string key_t = w.step(n, "Transpose", {w.input(n, 1)}, {{"perm", perm}});
  std::string scores = w.step(n, "MatMul", {scaled, key_t});
  const auto keep_where = [&](const std::string& keep) {
    const at::Tensor minus_inf =
        at::scalar_tensor(-std::numeric_limits<float>::infinity(), at::kFloat);
    return w.step(n, "Where", {keep, scores, w.initializer("minus_inf", minus_inf)});
  };
  const bool causal = w.constant(n, 5).toBool();
  const bool masked = w.present(n->input(3));
  if (causal) {
    if (masked) {
      w.unsupported(n, "is_causal together with an attention mask");
    }
    // torch's causal mask is the lower triangle aligned at the top-left corner.
    const at::Tensor lower = at::ones({target, source}, at::kBool).tril();
    scores = keep_where(w.initializer("causal", lower));
  } else if (masked) {
    const at::Tensor& mask = w.tensor(n->input(3));
    scores = mask.scalar_type() == at::kBool
                 ? keep_where(w.input(n, 3))
                 : w.step(n, "Add", {scores, w.input(n, 3)});
  }
  std::string weights = w.step(n, "Softmax", {scores}, {{"axis", int64_t{-1}}});
  if (masked) {
    // Softmax of a row of -inf is NaN; torch gives zeros there.
    const std::string row_max = w.step(
        n, "ReduceMax", {scores}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}});
    const std::string dead = w.step(
        n, "IsInf", {row_max}, {{"detect_positive", int64_t{0}}, {"detect_negative", int64_t{1}}});
    weights = w.step(n, "Where",
                     {dead, w.initializer("zero", at::scalar_tensor(0.0, at::kFloat)), weights});
  }
  w.emit(n, "MatMul", {weights, w.input(n, 2)});
}

// The three input projections (L·E² for the queries, S·E² each for keys and values), the
// scores and their weighted sum (L·S·E each, over all heads), the softmax (one per score) and
// the output projection (L·E²), for one batch item.
int64_t attention_count(int64_t target, int64_t source, int64_t embed, int64_t heads) {
  return 2 * target * embed * embed + 2 * source * embed * embed + 2 * target * source * embed +
         heads * target * source;
}

int64_t attention_flops(const OpCall& call) {
  const at::Tensor* query = call.input(0);
  const at::Tensor* key = call.input(1);
  const c10::optional<c10::IValue> heads = jit::toIValue(call.node->input(4));
  if (query == nullptr || key == nullptr || query->dim() != 3 || key->dim() != 3 || !heads ||
      !heads->isInt()) {
    return 0;
  }
  const int64_t batch = query->size(0);
  const int64_t target = query->size(1);
  const int64_t source = key->size(1);
  const int64_t embed = query->size(2);
  return batch * attention_count(target, source, embed, heads->toInt());
}

// Self-attention (attention_count with L = S), the two feed-forward products (L·E·F each),
// the activation (L·F), the two residual adds (L·E each) and the two LayerNorms (2·L·E each).
int64_t encoder_layer_flops(const OpCall& call) {
  const at::Tensor* src = call.input(0);
  const at::Tensor* ffn = call.input(14);
  const c10::optional<c10::IValue> heads = jit::toIValue(call.node->input(2));
  if (src == nullptr || ffn == nullptr || src->dim() != 3 || ffn->dim() != 2 || !heads ||
      !heads->isInt()) {
    return 0;
  }
  const int64_t batch = src->size(0);
  const int64_t len = src->size(1);
  const int64_t embed = src->size(2);
  const int64_t hidden = ffn->size(0);
  return batch * (attention_count(len, len, embed, heads->toInt()) + 2 * len * embed * hidden +
                  len * hidden + 2 * len * embed + 4 * len * embed);
}

// The scores and the weighted sum (L·S·E and L·S·Ev per batch item and head) and the softmax
// (one per score).
int64_t sdpa_flops(const OpCall& call) {
  const at::Tensor* query = call.input(0);
  const at::Tensor* key = call.input(1);
  const at::Tensor* value = call.input(2);
  if (query == nullptr || key == nullptr || value == nullptr || query->dim() < 2 ||
      key->dim() < 2 || value->dim() < 2) {
    return 0;
  }
  const int64_t target = query->size(-2);
  const int64_t source = key->size(-2);
  if (query->numel() == 0 || key->numel() == 0) {
    return 0;
  }
  const int64_t items = query->numel() / (target * query->size(-1));
  return items * (target * source * query->size(-1) + target * source * value->size(-1) +
                  target * source);
}

}  // namespace

std::vector<OpSpec> attention_ops() {
  using C = Channels;
  OpSpec attention{{"aten::_native_multi_head_attention"}, C::kUnknown, emit_native_attention};
  attention.flops = attention_flops;
  OpSpec encoder_layer{{"aten::_transformer_encoder_layer_fwd"}, C::kUnknown, emit_encoder_layer};
  encoder_layer.flops = encoder_layer_flops;
  OpSpec sdpa{{"aten::scaled_dot_product_attention"}, C::kUnknown, emit_sdpa};
  sdpa.flops = sdpa_flops;
  return {attention, encoder_layer, sdpa};
}

}  // namespace lithe::host::ops
