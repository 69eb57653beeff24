#include <ATen/ATen.h>
#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/pruner.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::sdk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TEST(LayerViewTest, StartsWithAllOnesMasksShapedLikeWeightAndBias) {
  LayerView layer(0, "fc", "Linear", at::randn({4, 3}), at::randn({4}), Options());
  EXPECT_TRUE(layer.masks().weight.eq(1).all().item<bool>());
  ASSERT_TRUE(layer.masks().bias.has_value());
  EXPECT_EQ(layer.masks().bias->sizes(), at::IntArrayRef({4}));
  EXPECT_EQ(layer.masks().weight.scalar_type(), at::kFloat);
}

TEST(LayerViewTest, RejectsMaskOfWrongShapeNamingLayerAndShapes) {
  LayerView layer(0, "features.3", "Conv2d", at::randn({8, 3, 3, 3}), std::nullopt, Options());
  Masks masks;
  masks.weight = at::ones({8, 3});
  EXPECT_THAT([&] { layer.set_masks(masks); },
              ThrowsMessage<Error>(HasSubstr(
                  "layer 'features.3': weight mask must have the weight's shape [8, 3, 3, 3], "
                  "got [8, 3]")));
}

TEST(LayerViewTest, RejectsBiasMaskForLayerWithoutBias) {
  LayerView layer(0, "conv", "Conv2d", at::randn({2, 1, 1, 1}), std::nullopt, Options());
  Masks masks;
  masks.weight = at::ones({2, 1, 1, 1});
  masks.bias = at::ones({2});
  EXPECT_THAT([&] { layer.set_masks(masks); },
              ThrowsMessage<Error>(HasSubstr("layer 'conv' has no bias")));
}

TEST(LayerViewTest, RejectsMasksThatAreNotZeroOrOneNamingTheCountAndAnExample) {
  LayerView layer(0, "fc", "Linear", at::randn({4, 3}), at::randn({4}), Options());
  const Masks before = layer.masks();
  Masks masks;
  masks.weight = at::ones({4, 3});
  masks.weight[1][2] = 0.5;
  masks.weight[3][0] = std::nanf("");
  EXPECT_THAT([&] { layer.set_masks(masks); },
              ThrowsMessage<Error>(AllOf(
                  HasSubstr("layer 'fc': the weight mask must hold only 0 and 1"),
                  HasSubstr("2 of 12 entries are other values (e.g. 0.5 at flat index 5)"))));
  masks.weight = at::ones({4, 3});
  masks.bias = at::full({4}, 2, at::kLong);
  EXPECT_THAT([&] { layer.set_masks(masks); },
              ThrowsMessage<Error>(HasSubstr("the bias mask must hold only 0 and 1 (it multiplies the bias), but 4 of 4")));
  masks.bias = at::ones({4}, at::kComplexFloat);
  EXPECT_THAT([&] { layer.set_masks(masks); },
              ThrowsMessage<Error>(HasSubstr("must be a dense bool, integer or floating tensor")));
  EXPECT_TRUE(layer.masks().weight.equal(before.weight)) << "a refused mask changes nothing";
  // Bool, integer and double masks of 0/1 are accepted and stored as float32.
  masks.weight = at::randn({4, 3}).gt(0);
  masks.bias = at::tensor({1, 0, 1, 1}, at::kInt);
  layer.set_masks(masks);
  EXPECT_EQ(layer.masks().weight.scalar_type(), at::kFloat);
  EXPECT_TRUE(layer.masks().weight.equal(masks.weight.to(at::kFloat)));
  EXPECT_EQ(layer.masks().bias->sum().item<float>(), 3.0f);
  masks.weight = at::ones({4, 3}, at::kDouble);
  masks.bias = std::nullopt;
  layer.set_masks(masks);
  EXPECT_TRUE(layer.masks().weight.eq(1).all().item<bool>());
}

TEST(LayerViewTest, EmptyBiasMaskKeepsTheCurrentOne) {
  LayerView layer(0, "fc", "Linear", at::randn({2, 2}), at::randn({2}), Options());
  Masks first;
  first.weight = at::ones({2, 2});
  first.bias = at::zeros({2});
  layer.set_masks(first);
  Masks second;
  second.weight = at::zeros({2, 2});
  layer.set_masks(second);
  EXPECT_TRUE(layer.masks().bias->eq(0).all().item<bool>());
  EXPECT_TRUE(layer.masks().weight.eq(0).all().item<bool>());
}

TEST(LayerViewTest, AttributesStoreAndOverwriteValues) {
  LayerView layer(2, "fc", "Linear", at::randn({2, 2}), std::nullopt, Options());
  EXPECT_EQ(layer.attribute("if_calculated"), nullptr);
  layer.set_attribute("if_calculated", false);
  layer.set_attribute("if_calculated", true);
  ASSERT_NE(layer.attribute("if_calculated"), nullptr);
  EXPECT_TRUE(std::get<bool>(*layer.attribute("if_calculated")));
  EXPECT_EQ(layer.index(), 2);
}

class CountingMasker final : public WeightMasker {
 public:
  std::optional<Masks> calc_mask(LayerView& layer, double sparsity) override {
    ++calls;
    last_sparsity = sparsity;
    if (calls == 1) {
      return std::nullopt;  // "not enough data yet": must be retried
    }
    return Masks::keep_all(layer);
  }
  int calls = 0;
  double last_sparsity = -1;
};

TEST(OneShotPrunerTest, RetriesUntilTheMaskerDecidesThenNeverAgain) {
  auto masker = std::make_unique<CountingMasker>();
  CountingMasker* raw = masker.get();
  auto pruner = make_one_shot_pruner(std::move(masker));
  const Options config =
      options_from_json(nlohmann::ordered_json::parse(R"({"sparsity": 0.25})"), "/config_list/0");
  LayerView layer(0, "fc", "Linear", at::randn({2, 2}), std::nullopt, config);
  EXPECT_FALSE(pruner->calc_mask(layer).has_value());  // masker undecided
  EXPECT_TRUE(pruner->calc_mask(layer).has_value());   // retried, decided
  EXPECT_FALSE(pruner->calc_mask(layer).has_value());  // final: not asked again
  EXPECT_EQ(raw->calls, 2);
  EXPECT_DOUBLE_EQ(raw->last_sparsity, 0.25);
}

TEST(OneShotPrunerTest, ValidatesSparsityRange) {
  auto pruner = make_one_shot_pruner(std::make_unique<CountingMasker>());
  const Options bad =
      options_from_json(nlohmann::ordered_json::parse(R"({"sparsity": 1.0})"), "/config_list/3");
  EXPECT_THAT([&] { pruner->validate_config(bad); },
              ThrowsMessage<Error>(
                  HasSubstr("/config_list/3/sparsity must be a number in [0, 1), got 1")));
  const Options missing =
      options_from_json(nlohmann::ordered_json::parse(R"({"op_types": ["Linear"]})"), "/c/0");
  EXPECT_THAT([&] { pruner->validate_config(missing); },
              ThrowsMessage<Error>(HasSubstr("/c/0: missing required key 'sparsity'")));
}

}  // namespace
}  // namespace lithe::sdk
