// Attention-head pruning of nn.MultiheadAttention (NNI 2.5 TransformerHeadPruner with its
// one-shot weight criteria), and since 1.1.0 of fused q, k, v Linear layers (Swin's attn.qkv,
// MaxViT's to_qkv).
// A head is d = head_hidden_dim consecutive rows in each of the query, key and value parts of
// the layer's fused input projection (in_proj_weight or the Linear's weight, [3·H·d, E]); the
// `sparsity` fraction of heads with the smallest importance loses all 3·d rows, weight and bias.
// With its value rows zero a head adds nothing to the attention output, whatever its queries and
// keys, so `lithe speedup` can remove it (and the output projection's columns that read it).
//
// Departures from NNI 2.5: NNI prunes groups of four named Linear layers (HuggingFace-style
// q/k/v/o); torch's nn.MultiheadAttention holds q, k and v in one parameter, which is what this
// prunes (the output projection stays unmasked: the value rows already silence the head).
// Exactly int(H × sparsity) heads are pruned, ties to the lower head index, heads already pruned
// first (as the SDK's filter pruners); NNI's activation and Taylor criteria and its iterative
// schedule are not provided.
#include "attention_heads.h"

#include <ATen/ATen.h>
#include <lithe/sdk.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace lithe::plugins::attention_heads {
namespace {

constexpr const char* kAlgorithm = "transformer_head";
constexpr const char* kAttention = "MultiheadAttention";
constexpr const char* kLinear = "Linear";  // a fused q, k, v projection (Swin, MaxViT)

const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::sparsity_keys())
          .add(sdk::option("head_hidden_dim", sdk::OptionType::kInteger,
                           "rows of each of the query, key and value projections per head "
                           "(embed_dim / num_heads: 64 in ViT-B/16)")
                   .mandatory()
                   .above(0))
          .add(sdk::option("ranking_criterion", sdk::OptionType::kString,
                           "how heads are ranked: the L1 or L2 norm of their q, k and v rows")
                   .defaults_to("\"l1_weight\"")
                   .one_of({"l1_weight", "l2_weight"}));
  return schema;
}

// The number of heads of `layer`, after checking that its weight is a fused [3·H·d, E]
// projection with d = head_dim.
int64_t head_count(const sdk::LayerView& layer, int64_t head_dim) {
  const at::Tensor& w = layer.weight();
  LITHE_CHECK(w.defined() && w.dim() == 2 && w.size(0) % 3 == 0, sdk::Errc::kUnsupportedLayer,
              "layer '", layer.name(), "': ", kAlgorithm,
              " needs a fused input projection (nn.MultiheadAttention's in_proj_weight, or a "
              "Linear's weight, [3 * inner, embed_dim]), got a weight of shape ",
              w.defined() ? w.sizes() : at::IntArrayRef{});
  const int64_t inner = w.size(0) / 3;
  LITHE_CHECK(inner % head_dim == 0, sdk::Errc::kInvalidConfig, "layer '", layer.name(),
              "': head_hidden_dim = ", head_dim, " does not divide its ", inner,
              " query rows into heads (in_proj_weight ", w.sizes(), ")");
  return inner / head_dim;
}

class HeadMasker final : public sdk::WeightMasker {
 public:
  HeadMasker(int64_t head_dim, Criterion criterion) : head_dim_(head_dim), criterion_(criterion) {}

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer, double sparsity) override {
    sdk::require_layer_op_type_in(layer, {kAttention, kLinear}, kAlgorithm);
    // Every Linear's rows split into three parts of heads once the counts divide, so only the
    // layers a user names are taken for fused projections.
    LITHE_CHECK(layer.op_type() != kLinear || layer.config().has("op_names"),
                sdk::Errc::kInvalidConfig, "layer '", layer.name(), "': ", kAlgorithm,
                " prunes a Linear layer only as a fused q, k, v projection (Swin's attn.qkv, "
                "MaxViT's to_qkv), "
                "which its config_list entry must name in op_names; this entry selects it by "
                "op_types alone");
    const int64_t heads = head_count(layer, head_dim_);
    const int64_t k = sdk::prune_count(heads, sparsity);
    sdk::Masks masks = layer.masks().clone();
    if (heads < 2 || k < 1) {
      return masks;
    }
    const at::Tensor scores = head_importance(layer.weight(), head_dim_, criterion_);
    // A head whose q, k and v rows are all masked already goes first, so a schedule's growing
    // sparsity adds heads and never revives one.
    const at::Tensor pruned = masks.weight.reshape({3, heads, -1}).eq(0).all(2).all(0).to(at::kCPU);
    const at::Tensor cpu_scores = scores.to(at::kCPU, at::kDouble).contiguous();
    // (already pruned first, NaN last, score); stable_sort keeps ties in head order.
    std::vector<std::tuple<int, int, double, int64_t>> order;
    for (int64_t h = 0; h < heads; ++h) {
      const double s = cpu_scores.data_ptr<double>()[h];
      order.emplace_back(pruned[h].item<bool>() ? 0 : 1, std::isnan(s) ? 1 : 0,
                         std::isnan(s) ? 0.0 : s, h);
    }
    std::stable_sort(order.begin(), order.end());
    const int64_t count = std::max(k, pruned.sum().item<int64_t>());
    at::Tensor weight_mask = masks.weight.view({3, heads, -1});
    for (int64_t i = 0; i < count; ++i) {
      const int64_t h = std::get<3>(order[static_cast<size_t>(i)]);
      weight_mask.select(1, h).zero_();
      if (masks.bias.has_value()) {
        masks.bias->view({3, heads, -1}).select(1, h).zero_();
      }
    }
    return masks;
  }

 private:
  int64_t head_dim_;
  Criterion criterion_;
};

std::unique_ptr<HeadMasker> make_masker(const sdk::Options& options) {
  const int64_t head_dim = option_keys().read<int64_t>(options, "head_hidden_dim");
  const std::string criterion = option_keys().read<std::string>(options, "ranking_criterion");
  return std::make_unique<HeadMasker>(
      head_dim, criterion == "l1_weight" ? Criterion::kL1Weight : Criterion::kL2Weight);
}

}  // namespace

at::Tensor head_importance(const at::Tensor& in_proj, int64_t head_dim, Criterion criterion) {
  const int64_t heads = in_proj.size(0) / 3 / head_dim;
  // [3 parts, H heads, d rows × E columns]; NNI: torch.norm(w.view(n_heads, -1), p, -1) per part.
  const at::Tensor w = in_proj.detach().to(at::kFloat).reshape({3, heads, -1});
  const at::Tensor per_part =
      criterion == Criterion::kL1Weight ? w.abs().sum(2) : w.pow(2).sum(2).sqrt();
  return per_part.sum(0);
}

void register_algorithms(sdk::Registry& registry) {
  registry.add_masker({kAlgorithm, "whole attention heads (q, k and v rows) of "
                                   "nn.MultiheadAttention or a fused q, k, v Linear with the "
                                   "smallest weight norm"},
                      [](const sdk::Options& options, const sdk::Registry&) {
                        return make_masker(options);
                      });
  registry.add_pruner({kAlgorithm, "one-shot pruning of the attention heads of "
                                   "nn.MultiheadAttention layers or fused q, k, v Linear layers "
                                   "with the smallest weight norm"},
                      [](const sdk::Options& options, const sdk::Registry&) {
                        return sdk::make_one_shot_pruner_for(make_masker(options), kAlgorithm,
                                                             {kAttention, kLinear});
                      });
  registry.describe_options(kAlgorithm, option_keys());
}

}  // namespace lithe::plugins::attention_heads

LITHE_PLUGIN("attention_heads", "1.1.0", lithe::plugins::attention_heads::register_algorithms)
