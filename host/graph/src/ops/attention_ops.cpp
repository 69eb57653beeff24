// Attention. nn.MultiheadAttention runs its inference kernel, aten::_native_multi_head_attention,
// whenever grad is off and its fast-path conditions hold (ViT's encoder blocks, batch_first);
// ONNX has no such op before opset 23, so it is written as what it computes: the three input
// projections, a scaled dot product per head, softmax, the weighted sum and the output
// projection.
#include <cmath>

#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

// Whether anything reads `v`, looking through the tuple a forward packs it into and unpacks
// again (`x, _ = self.self_attention(x, x, x, need_weights=False)`).
bool read(const jit::Value* v) {
  for (const jit::Use& use : v->uses()) {
    if (use.user->kind() != c10::prim::TupleConstruct) {
      return true;
    }
    for (const jit::Use& tuple_use : use.user->output()->uses()) {
      if (tuple_use.user->kind() != c10::prim::TupleUnpack ||
          tuple_use.user->output(use.offset)->hasUses()) {
        return true;
      }
    }
  }
  return false;
}

// aten::_native_multi_head_attention(query, key, value, embed_dim, num_heads, qkv_weight,
// qkv_bias, proj_weight, proj_bias, mask, need_weights, average_attn_weights, mask_type), with
// batch-first [N, L, E] inputs and no mask; the attention weights (output 1) must be unused.
void emit_native_attention(OnnxWriter& w, const jit::Node* n) {
  if (n->inputs().size() < 9) {
    w.unsupported(n, "an overload Lithe does not know");
  }
  if (n->inputs().size() > 9 && w.present(n->input(9))) {
    w.unsupported(n, "an attention mask is not written");
  }
  if (n->outputs().size() > 1 && read(n->output(1))) {
    w.unsupported(n, "its attention weights are read (need_weights=True)");
  }
  const at::Tensor& query = w.tensor(n->input(0));
  const at::Tensor& key = w.tensor(n->input(1));
  if (query.dim() != 3 || key.dim() != 3) {
    w.unsupported(n, "only batched [N, L, E] inputs are written");
  }
  const int64_t embed = w.constant(n, 3).toInt();
  const int64_t heads = w.constant(n, 4).toInt();
  if (heads < 1 || embed % heads != 0 || query.size(2) != embed) {
    w.unsupported(n, "embed_dim is not num_heads equal parts of the input's last axis");
  }
  const int64_t head_dim = embed / heads;
  const int64_t batch = query.size(0);
  const int64_t target = query.size(1);
  const int64_t source = key.size(1);
  const at::Tensor qkv_weight = w.tensor(n->input(5)).detach();
  const at::Tensor qkv_bias = w.tensor(n->input(6)).detach();
  const auto ints = [&](const char* stem, std::vector<int64_t> v) {
    return w.initializer(stem, at::tensor(v, at::kLong));
  };
  // x · W[part]ᵀ + b[part]: one of the three input projections.
  const auto project = [&](size_t input, int64_t part, const char* stem) {
    const at::Tensor weight = qkv_weight.narrow(0, part * embed, embed).t().contiguous();
    const at::Tensor bias = qkv_bias.narrow(0, part * embed, embed).contiguous();
    const std::string product = w.step(n, "MatMul", {w.input(n, input), w.initializer(stem, weight)});
    return w.step(n, "Add", {product, w.initializer(stem, bias)});
  };
  // [N, len, E] -> [N, len, heads, head_dim] -> `perm`.
  const auto split_heads = [&](const std::string& x, int64_t len, std::vector<int64_t> perm) {
    const std::string shaped =
        w.step(n, "Reshape", {x, ints("heads_shape", {batch, len, heads, head_dim})});
    return w.step(n, "Transpose", {shaped}, {{"perm", std::move(perm)}});
  };
  const std::string q = split_heads(project(0, 0, "q_proj"), target, {0, 2, 1, 3});
  const std::string k = split_heads(project(1, 1, "k_proj"), source, {0, 2, 3, 1});
  const std::string v = split_heads(project(2, 2, "v_proj"), source, {0, 2, 1, 3});
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
  const at::Tensor proj_weight = w.tensor(n->input(7)).detach().t().contiguous();
  const std::string product =
      w.step(n, "MatMul", {merged, w.initializer("out_proj", proj_weight)});
  w.emit(n, "Add",
         {product, w.initializer("out_proj_bias", w.tensor(n->input(8)).detach().contiguous())});
}

// The three input projections (L·E² for the queries, S·E² each for keys and values), the
// scores and their weighted sum (L·S·E each, over all heads), the softmax (one per score) and
// the output projection (L·E²), per batch item.
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
  return batch * (2 * target * embed * embed + 2 * source * embed * embed +
                  2 * target * source * embed + heads->toInt() * target * source);
}

}  // namespace

std::vector<OpSpec> attention_ops() {
  using C = Channels;
  OpSpec attention{{"aten::_native_multi_head_attention"}, C::kUnknown, emit_native_attention};
  attention.flops = attention_flops;
  return {attention};
}

}  // namespace lithe::host::ops
