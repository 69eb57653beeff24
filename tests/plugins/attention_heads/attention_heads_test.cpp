#include "plugins/attention_heads/attention_heads.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "support/plugin_test.h"

namespace lithe::plugins::attention_heads {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A fused projection [3·H·d, E] whose head h has every q, k and v entry equal to scale[h]
// (signs alternate, so L1 and L2 see |scale|).
at::Tensor fused(const std::vector<float>& scale, int64_t head_dim, int64_t embed) {
  const auto heads = static_cast<int64_t>(scale.size());
  at::Tensor w = at::empty({3, heads, head_dim, embed});
  for (int64_t h = 0; h < heads; ++h) {
    w.select(1, h).fill_(scale[static_cast<size_t>(h)]);
  }
  const at::Tensor signs = at::arange(embed).remainder(2).mul(2).sub(1).to(at::kFloat);
  return (w * signs).reshape({3 * heads * head_dim, embed});
}

// Which heads a weight mask [3·H·d, E] zeroes entirely (q, k and v rows).
std::vector<int64_t> pruned_heads(const at::Tensor& mask, int64_t heads) {
  const at::Tensor gone = mask.reshape({3, heads, -1}).eq(0).all(2).all(0);
  std::vector<int64_t> out;
  for (int64_t h = 0; h < heads; ++h) {
    if (gone[h].item<bool>()) {
      out.push_back(h);
    }
  }
  return out;
}

class TransformerHeadTest : public ::testing::Test {
 protected:
  TransformerHeadTest() { register_algorithms(registry_); }

  sdk::Masks prune(const at::Tensor& weight, std::optional<at::Tensor> bias, double sparsity,
                   const nlohmann::ordered_json& options) {
    auto pruner = registry_.make_pruner("transformer_head", test::options_json(options));
    const sdk::Options cfg = test::sparsity_entry(sparsity, "MultiheadAttention");
    pruner->validate_config(cfg);
    sdk::LayerView layer(0, "encoder.attn", "MultiheadAttention", weight, std::move(bias), cfg);
    std::optional<sdk::Masks> masks = pruner->calc_mask(layer);
    EXPECT_TRUE(masks.has_value());
    return *masks;
  }

  host::PluginRegistry registry_;
};

TEST_F(TransformerHeadTest, PrunesExactlyTheWeakestHeadsAcrossQueryKeyAndValueRows) {
  // 6 heads of 4 rows over E = 24: heads 4, 1 and 5 are the weakest.
  const at::Tensor w = fused({5, 2, 6, 4, 1, 3}, 4, 24);
  const at::Tensor b = at::arange(72, at::kFloat).add(1);
  const sdk::Masks masks = prune(w, b, 0.5, {{"head_hidden_dim", 4}});
  EXPECT_EQ(pruned_heads(masks.weight, 6), (std::vector<int64_t>{1, 4, 5}));
  // Every row of a pruned head is zero in all three parts, every other row is one.
  const at::Tensor rows = masks.weight.reshape({3, 6, 4, 24});
  for (const int64_t h : {0, 2, 3}) {
    EXPECT_TRUE(rows.select(1, h).eq(1).all().item<bool>()) << "head " << h;
  }
  ASSERT_TRUE(masks.bias.has_value());
  EXPECT_EQ(masks.bias->sizes(), b.sizes());
  const at::Tensor bias_rows = masks.bias->reshape({3, 6, 4});
  EXPECT_TRUE(bias_rows.select(1, 1).eq(0).all().item<bool>());
  EXPECT_TRUE(bias_rows.select(1, 0).eq(1).all().item<bool>());
  EXPECT_EQ(masks.bias->eq(0).sum().item<int64_t>(), 3 * 3 * 4);
}

TEST_F(TransformerHeadTest, ScoresAreTheSumOfThePartNormsAsNni) {
  at::manual_seed(0);
  const at::Tensor w = at::randn({3 * 4 * 2, 8});
  const at::Tensor parts = w.reshape({3, 4, -1});
  EXPECT_TRUE(head_importance(w, 2, Criterion::kL1Weight)
                  .allclose(parts.abs().sum(2).sum(0)));
  EXPECT_TRUE(head_importance(w, 2, Criterion::kL2Weight)
                  .allclose(parts.norm(2, {2}).sum(0)));
  // L1 and L2 can disagree: head 0 = one large entry per part, head 1 = many small ones.
  at::Tensor v = at::zeros({3, 2, 1, 4});
  v.select(1, 0).select(2, 0).fill_(3);  // L1 3, L2 3 per part
  v.select(1, 1).fill_(1);               // L1 4, L2 2 per part
  const at::Tensor both = v.reshape({6, 4});
  EXPECT_EQ(pruned_heads(prune(both, std::nullopt, 0.5, {{"head_hidden_dim", 1}}).weight, 2),
            (std::vector<int64_t>{0}));
  EXPECT_EQ(pruned_heads(prune(both, std::nullopt, 0.5,
                               {{"head_hidden_dim", 1}, {"ranking_criterion", "l2_weight"}})
                             .weight,
                         2),
            (std::vector<int64_t>{1}));
}

TEST_F(TransformerHeadTest, TiesGoToTheLowerHeadAndCountsAreExact) {
  const at::Tensor w = fused({1, 1, 1, 1}, 2, 4);
  EXPECT_EQ(pruned_heads(prune(w, std::nullopt, 0.5, {{"head_hidden_dim", 2}}).weight, 4),
            (std::vector<int64_t>{0, 1}));
  // int(4 × 0.7) = 2 heads; int(4 × 0.2) = 0: the masks stay all ones.
  EXPECT_EQ(pruned_heads(prune(w, std::nullopt, 0.7, {{"head_hidden_dim", 2}}).weight, 4).size(),
            2u);
  EXPECT_TRUE(prune(w, std::nullopt, 0.2, {{"head_hidden_dim", 2}}).weight.eq(1).all().item<bool>());
}

TEST_F(TransformerHeadTest, HeadsPrunedEarlierGoFirstAndStayPruned) {
  auto masker = registry_.make_masker("transformer_head",
                                      test::options_json({{"head_hidden_dim", 2}}));
  const at::Tensor w = fused({9, 1, 2, 8}, 2, 4);  // the strongest head was pruned earlier
  sdk::LayerView layer(0, "attn", "MultiheadAttention", w, std::nullopt,
                       test::sparsity_entry(0.5, "MultiheadAttention"));
  sdk::Masks earlier = sdk::Masks::keep_all(layer);
  earlier.weight.reshape({3, 4, -1}).select(1, 0).zero_();
  layer.set_masks(earlier);
  EXPECT_EQ(pruned_heads(masker->calc_mask(layer, 0.5)->weight, 4), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(pruned_heads(masker->calc_mask(layer, 0.25)->weight, 4), (std::vector<int64_t>{0}));
}

TEST_F(TransformerHeadTest, RefusalsNameTheLayerTheRuleAndTheValue) {
  // head_hidden_dim 5 does not divide 8 query rows.
  EXPECT_THAT([&] { prune(fused({1, 2}, 4, 4), std::nullopt, 0.5, {{"head_hidden_dim", 5}}); },
              ::testing::ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("layer 'encoder.attn'"),
                        HasSubstr("head_hidden_dim = 5 does not divide its 8 query rows"))));
  // A Linear selected by op_types alone is not taken for a fused projection (every Linear
  // with 3·k rows would be), whatever its shape.
  auto masker = registry_.make_masker("transformer_head",
                                      test::options_json({{"head_hidden_dim", 2}}));
  sdk::LayerView linear(0, "fc", "Linear", fused({1, 2}, 2, 4), std::nullopt,
                        test::sparsity_entry(0.5, "Linear"));
  EXPECT_THAT([&] { masker->calc_mask(linear, 0.5); },
              ::testing::ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("layer 'fc'"), HasSubstr("must name in op_names"))));
  // Named, a Linear whose rows do not split into q, k and v is refused by its shape.
  sdk::LayerView named(0, "fc", "Linear", at::ones({4, 4}), std::nullopt,
                       test::config_entry({{"sparsity", 0.5}, {"op_names", {"fc"}}}, 0));
  EXPECT_THAT([&] { masker->calc_mask(named, 0.5); },
              ::testing::ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("layer 'fc'"), HasSubstr("[4, 4]"))));
  sdk::LayerView odd(0, "attn", "MultiheadAttention", at::ones({4, 4}), std::nullopt,
                     test::sparsity_entry(0.5, "MultiheadAttention"));
  EXPECT_THAT([&] { masker->calc_mask(odd, 0.5); },
              ::testing::ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("layer 'attn'"), HasSubstr("in_proj_weight"),
                        HasSubstr("[4, 4]"))));
  // Options: head_hidden_dim is required and positive; the criterion is one of two.
  EXPECT_EQ(test::error_code([&] { registry_.make_pruner("transformer_head", sdk::Options()); }),
            sdk::Errc::kInvalidConfig);
  EXPECT_THAT([&] {
    registry_.make_pruner("transformer_head", test::options_json({{"head_hidden_dim", 0}}));
  }, ::testing::ThrowsMessage<sdk::Error>(HasSubstr("/options/head_hidden_dim")));
  EXPECT_THAT([&] {
    registry_.make_pruner("transformer_head",
                          test::options_json({{"head_hidden_dim", 2},
                                              {"ranking_criterion", "taylorfo"}}));
  }, ::testing::ThrowsMessage<sdk::Error>(HasSubstr("taylorfo")));
  // config_list: MultiheadAttention and Linear only.
  auto pruner = registry_.make_pruner("transformer_head",
                                      test::options_json({{"head_hidden_dim", 2}}));
  EXPECT_EQ(test::error_code([&] { pruner->validate_config(test::sparsity_entry(0.5, "Conv2d")); }),
            sdk::Errc::kInvalidConfig);
}

TEST_F(TransformerHeadTest, AFusedLinearNamedInOpNamesLosesWholeHeads) {
  // Swin's attn.qkv: a Linear [3·H·d, E]; 4 heads of 2 rows, the two weakest are 1 and 3.
  auto pruner = registry_.make_pruner("transformer_head",
                                      test::options_json({{"head_hidden_dim", 2}}));
  const sdk::Options entry =
      test::config_entry({{"sparsity", 0.5}, {"op_names", {"blocks.0.attn.qkv"}}}, 0);
  pruner->validate_config(entry);
  sdk::LayerView qkv(0, "blocks.0.attn.qkv", "Linear", fused({4, 1, 3, 2}, 2, 6),
                     at::ones({24}), entry);
  const std::optional<sdk::Masks> masks = pruner->calc_mask(qkv);
  ASSERT_TRUE(masks.has_value());
  EXPECT_EQ(pruned_heads(masks->weight, 4), (std::vector<int64_t>{1, 3}));
  ASSERT_TRUE(masks->bias.has_value());
  EXPECT_EQ(masks->bias->reshape({3, 4, 2}).eq(0).all(2).all(0).sum().item<int64_t>(), 2);
  EXPECT_EQ(masks->weight.eq(0).sum().item<int64_t>(), 3 * 2 * 2 * 6);
}

}  // namespace
}  // namespace lithe::plugins::attention_heads
