// The SDK's filter-pruning framework (lithe/sdk/filter_pruning.h): make_filter_masker's exact-k
// rule and make_filter_pruner's one-shot and dependency-aware modes, over hand-made scorers and
// a FakeContext whose dependency sets the tests choose (reference §2.0, §2.8, §7 cases 14, 15;
// conformance departures 1 and 5).
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lithe/sdk/error.h"
#include "lithe/sdk/filter_pruning.h"
#include "lithe/sdk/log.h"
#include "lithe/sdk/registry.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/fake_context.h"

namespace lithe::sdk {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::ThrowsMessage;

// The fake context needs a registry; nothing here builds algorithms by name.
class NoRegistry final : public Registry {
 public:
  void add_masker(AlgorithmInfo, MaskerFactory) override { unused(); }
  void add_pruner(AlgorithmInfo, PrunerFactory) override { unused(); }
  void add_quantizer(AlgorithmInfo, QuantizerFactory) override { unused(); }
  std::unique_ptr<WeightMasker> make_masker(const std::string&, const Options&) const override {
    unused();
    return nullptr;
  }
  std::unique_ptr<Pruner> make_pruner(const std::string&, const Options&) const override {
    unused();
    return nullptr;
  }
  std::unique_ptr<Quantizer> make_quantizer(const std::string&, const Options&) const override {
    unused();
    return nullptr;
  }

 private:
  [[noreturn]] static void unused() {
    throw Error(Errc::kInternal, "the filter-pruning tests use no registry");
  }
};

// L1 filter norms of the raw weight, as the l1_filter plugin computes them (float32 Σ|w|).
class L1Scorer final : public FilterScorer {
 public:
  std::optional<at::Tensor> filter_scores(LayerView& layer) override {
    ++calls;
    return layer.weight().detach().reshape({layer.weight().size(0), -1}).abs().sum(1);
  }
  void on_masks_computed(const LayerView& layer) override { computed.push_back(layer.name()); }

  int calls = 0;
  std::vector<std::string> computed;
};

// Scores set per layer name by the test; a missing entry means "not ready" (nullopt).
class FixedScorer final : public FilterScorer {
 public:
  void attach(CompressionContext&) override { ++attached; }
  std::optional<at::Tensor> filter_scores(LayerView& layer) override {
    ++calls;
    const auto it = scores.find(layer.name());
    if (it == scores.end()) {
      return std::nullopt;
    }
    return it->second;
  }
  void on_masks_computed(const LayerView& layer) override { computed.push_back(layer.name()); }

  std::map<std::string, at::Tensor> scores;
  int attached = 0;
  int calls = 0;
  std::vector<std::string> computed;
};

Options layer_config(double sparsity) {
  return options_from_json(
      nlohmann::ordered_json{{"sparsity", sparsity}, {"op_types", {"Conv2d"}}}, "/config_list/0");
}

Options pruner_options(const nlohmann::ordered_json& json = nlohmann::ordered_json::object()) {
  return options_from_json(json, "/options");
}

// A Conv2d layer whose filter i has all `entries` weights equal to values[i] / entries, so its
// L1 norm is values[i] (reference §7 case 14 builds conv2 and conv3 this way, with 4 entries).
std::unique_ptr<LayerView> conv(int64_t index, const std::string& name,
                                const std::vector<float>& values, double sparsity,
                                bool bias = false, int64_t entries = 4) {
  const int64_t filters = static_cast<int64_t>(values.size());
  const at::Tensor weight = (at::tensor(values) / static_cast<float>(entries))
                                .reshape({filters, 1, 1, 1})
                                .expand({filters, entries, 1, 1})
                                .contiguous();
  std::optional<at::Tensor> b;
  if (bias) {
    b = at::ones({filters});
  }
  return std::make_unique<LayerView>(index, name, "Conv2d", weight, b, layer_config(sparsity));
}

// Per filter: 1 when the weight mask keeps any of its entries, else 0.
std::vector<int> keep(const at::Tensor& weight_mask) {
  const at::Tensor kept = weight_mask.reshape({weight_mask.size(0), -1}).ne(0).any(1).to(at::kInt);
  return std::vector<int>(kept.data_ptr<int>(), kept.data_ptr<int>() + kept.numel());
}
std::vector<int> keep(const std::optional<Masks>& masks) {
  EXPECT_TRUE(masks.has_value());
  return masks.has_value() ? keep(masks->weight) : std::vector<int>{};
}

std::vector<int> ints(const at::Tensor& mask) {
  const at::Tensor i = mask.to(at::kInt).contiguous();
  return std::vector<int>(i.data_ptr<int>(), i.data_ptr<int>() + i.numel());
}

Errc error_code(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no sdk::Error thrown";
  return Errc::kInternal;
}

// ---- make_filter_masker ----------------------------------------------------------------------

TEST(FilterMaskerTest, PrunesExactlyNumPruneFiltersTiesToTheLowerIndex) {
  auto scorer = std::make_shared<FixedScorer>();
  auto masker = make_filter_masker(scorer, "test_filter");
  auto layer = conv(0, "conv", {1, 1, 1, 1, 1}, 0.5, /*bias=*/true);
  scorer->scores["conv"] = at::tensor({2.f, 1.f, 2.f, 1.f, 3.f});

  // int(5 * 0.4) = 2: both 1s. int(5 * 0.6) = 3: the 1s and the first 2 (NNI would take both 2s).
  auto masks = masker->calc_mask(*layer, 0.4);
  EXPECT_THAT(keep(masks), ElementsAre(1, 0, 1, 0, 1));
  ASSERT_TRUE(masks->bias.has_value());
  EXPECT_THAT(ints(*masks->bias), ElementsAre(1, 0, 1, 0, 1)) << "bias follows the filters";
  EXPECT_THAT(keep(masker->calc_mask(*layer, 0.6)), ElementsAre(0, 0, 1, 0, 1));

  // All equal: the lowest indices go.
  scorer->scores["conv"] = at::zeros({5});
  EXPECT_THAT(keep(masker->calc_mask(*layer, 0.4)), ElementsAre(0, 0, 1, 1, 1));

  // Whole filters, float32, weight-shaped.
  EXPECT_EQ(masks->weight.sizes(), layer->weight().sizes());
  EXPECT_EQ(masks->weight.scalar_type(), at::kFloat);
  const at::Tensor rows = masks->weight.reshape({5, -1});
  EXPECT_TRUE(rows.eq(rows.select(1, 0).unsqueeze(1)).all().item<bool>());
}

TEST(FilterMaskerTest, Float64ScoresAreRankedWithoutRoundingToFloat32) {
  // APoZ-style float64 scores that are equal in float32: the truly smaller one goes.
  auto scorer = std::make_shared<FixedScorer>();
  auto masker = make_filter_masker(scorer, "test_filter");
  auto layer = conv(0, "conv", {1, 1}, 0.5);
  scorer->scores["conv"] = at::tensor({1.0 + 1e-12, 1.0}, at::kDouble);
  ASSERT_EQ(static_cast<float>(1.0 + 1e-12), 1.0f);
  EXPECT_THAT(keep(masker->calc_mask(*layer, 0.5)), ElementsAre(1, 0));
}

TEST(FilterMaskerTest, NanScoresRankAfterEveryNumber) {
  auto scorer = std::make_shared<FixedScorer>();
  auto masker = make_filter_masker(scorer, "test_filter");
  auto layer = conv(0, "conv", {1, 1, 1, 1}, 0.5);
  scorer->scores["conv"] = at::tensor({NAN, 5.f, NAN, 7.f});
  EXPECT_THAT(keep(masker->calc_mask(*layer, 0.5)), ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(keep(masker->calc_mask(*layer, 0.75)), ElementsAre(0, 0, 1, 0));
}

TEST(FilterMaskerTest, AlreadyPrunedFiltersGoFirst) {
  // L1 norms [9, 8, 1, 2], filter 0 pruned before: s = 0.5 prunes it and the smallest (2), not
  // filters 2 and 3; nothing is revived.
  auto scorer = std::make_shared<L1Scorer>();
  auto masker = make_filter_masker(scorer, "l1_filter");
  auto layer = conv(0, "conv", {9, 8, 1, 2}, 0.5, /*bias=*/true);
  Masks previous = Masks::keep_all(*layer);
  previous.weight[0].zero_();
  previous.bias->index_put_({0}, 0.f);
  layer->set_masks(previous);
  auto masks = masker->calc_mask(*layer, 0.5);
  EXPECT_THAT(keep(masks), ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(ints(*masks->bias), ElementsAre(0, 1, 0, 1));
  EXPECT_THAT(keep(layer->masks().weight), ElementsAre(0, 1, 1, 1))
      << "the layer's own masks are not modified";

  // More filters already pruned than num_prune: all stay pruned (masks are only ever zeroed).
  previous.weight[1].zero_();
  previous.weight[3].zero_();
  layer->set_masks(previous);
  EXPECT_THAT(keep(masker->calc_mask(*layer, 0.25)), ElementsAre(0, 0, 1, 0));
}

TEST(FilterMaskerTest, PartlyZeroFiltersKeepTheirZerosAndAreRankedByScore) {
  // A filter with some zero entries (e.g. from an earlier fine-grained mask) is not "pruned":
  // it is ranked by its score, and its zeros stay in the copy of the masks.
  auto scorer = std::make_shared<FixedScorer>();
  auto masker = make_filter_masker(scorer, "test_filter");
  auto layer = conv(0, "conv", {1, 1, 1, 1}, 0.25);
  scorer->scores["conv"] = at::tensor({4.f, 3.f, 1.f, 2.f});
  Masks previous = Masks::keep_all(*layer);
  previous.weight.index_put_({0, 1}, 0.f);
  layer->set_masks(previous);
  auto masks = masker->calc_mask(*layer, 0.25);
  EXPECT_THAT(keep(masks), ElementsAre(1, 1, 0, 1));
  EXPECT_EQ(masks->weight[0].flatten()[1].item<float>(), 0.f);
  EXPECT_EQ(masks->weight.eq(0).sum().item<int64_t>(), 4 + 1);
}

TEST(FilterMaskerTest, GrowingSparsityIsMonotoneAndExact) {
  // AGP-like: the masks of one call become the layer's masks before the next, while the
  // weights change between calls so that a fresh ranking would revive filters.
  auto scorer = std::make_shared<FixedScorer>();
  auto masker = make_filter_masker(scorer, "test_filter");
  at::manual_seed(7);
  auto layer = conv(0, "conv", std::vector<float>(20, 1.f), 0.0);
  std::vector<int> previous(20, 1);
  for (double sparsity : {0.1, 0.25, 0.4, 0.55, 0.7, 0.85}) {
    scorer->scores["conv"] = at::rand({20});
    auto masks = masker->calc_mask(*layer, sparsity);
    ASSERT_TRUE(masks.has_value());
    const std::vector<int> kept = keep(masks->weight);
    int pruned = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
      pruned += kept[i] == 0;
      EXPECT_FALSE(previous[i] == 0 && kept[i] == 1)
          << "filter " << i << " revived at " << sparsity;
    }
    EXPECT_EQ(pruned, prune_count(20, sparsity)) << sparsity;
    layer->set_masks(*masks);
    previous = kept;
  }
}

TEST(FilterMaskerTest, FewerThanTwoFiltersOrNothingToPruneReturnsTheCurrentMasks) {
  auto scorer = std::make_shared<FixedScorer>();  // never ready: must not be asked
  auto masker = make_filter_masker(scorer, "test_filter");
  auto layer = conv(0, "conv", {1, 2, 3, 4, 5, 6}, 0.1, /*bias=*/true);
  Masks previous = Masks::keep_all(*layer);
  previous.weight[2].zero_();
  previous.bias->index_put_({4}, 0.f);
  layer->set_masks(previous);
  // int(6 * 0.1) == 0.
  auto masks = masker->calc_mask(*layer, 0.1);
  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(masks->weight.equal(layer->masks().weight));
  EXPECT_TRUE(masks->bias->equal(*layer->masks().bias));
  EXPECT_NE(masks->weight.data_ptr(), layer->masks().weight.data_ptr()) << "a copy";
  // A single filter is never pruned.
  auto single = conv(1, "single", {3}, 0.9);
  masks = masker->calc_mask(*single, 0.9);
  ASSERT_TRUE(masks.has_value());
  EXPECT_THAT(keep(masks), ElementsAre(1));
  EXPECT_FALSE(masks->bias.has_value());

  EXPECT_EQ(scorer->calls, 0);
  EXPECT_THAT(scorer->computed, ElementsAre("conv", "single"));
}

TEST(FilterMaskerTest, NotReadyScorerGivesNullopt) {
  auto scorer = std::make_shared<FixedScorer>();
  auto masker = make_filter_masker(scorer, "test_filter");
  auto layer = conv(0, "conv", {1, 2, 3, 4}, 0.5);
  EXPECT_FALSE(masker->calc_mask(*layer, 0.5).has_value());
  EXPECT_THAT(scorer->computed, IsEmpty());
  scorer->scores["conv"] = at::tensor({4.f, 3.f, 2.f, 1.f});
  EXPECT_THAT(keep(masker->calc_mask(*layer, 0.5)), ElementsAre(1, 1, 0, 0));
  EXPECT_THAT(scorer->computed, ElementsAre("conv"));
}

TEST(FilterMaskerTest, RejectsLayersOtherThanConv2d) {
  auto masker = make_filter_masker(std::make_shared<L1Scorer>(), "l1_filter");
  LayerView fc(0, "fc1", "Linear", at::randn({10, 4}), at::zeros({10}), layer_config(0.5));
  EXPECT_THAT([&] { masker->calc_mask(fc, 0.5); },
              ThrowsMessage<Error>(AllOf(HasSubstr("layer 'fc1' is a Linear"),
                                         HasSubstr("l1_filter prunes Conv2d layers only"))));
  EXPECT_EQ(error_code([&] { masker->calc_mask(fc, 0.5); }), Errc::kUnsupportedLayer);
}

TEST(FilterMaskerTest, RejectsScoresOfTheWrongSizeOrType) {
  auto scorer = std::make_shared<FixedScorer>();
  auto masker = make_filter_masker(scorer, "test_filter");
  auto layer = conv(0, "features.3", {1, 2, 3, 4}, 0.5);
  scorer->scores["features.3"] = at::tensor({1.f, 2.f, 3.f});
  EXPECT_THAT([&] { masker->calc_mask(*layer, 0.5); },
              ThrowsMessage<Error>(AllOf(HasSubstr("layer 'features.3'"),
                                         HasSubstr("test_filter must score each of the 4 output "
                                                   "filters once"),
                                         HasSubstr("got [3] (3 elements)"))));
  EXPECT_EQ(error_code([&] { masker->calc_mask(*layer, 0.5); }), Errc::kShapeMismatch);
  scorer->scores["features.3"] = at::tensor({1, 2, 3, 4});
  EXPECT_THAT([&] { masker->calc_mask(*layer, 0.5); },
              ThrowsMessage<Error>(HasSubstr("filter scores must be a floating tensor, got Int")));
  EXPECT_EQ(error_code([&] { masker->calc_mask(*layer, 0.5); }), Errc::kDeviceMismatch);
}

// ---- make_filter_pruner, normal mode ----------------------------------------------------------

TEST(FilterPrunerTest, ComputesEachLayerOnceAndRetriesANotReadyScorer) {
  auto scorer = std::make_shared<FixedScorer>();
  auto pruner = make_filter_pruner(scorer, "test_filter", pruner_options());
  NoRegistry registry;
  auto layer = conv(0, "conv", {1, 2, 3, 4}, 0.5);
  test::FakeContext context({layer.get()}, registry);
  pruner->attach(context);
  EXPECT_EQ(scorer->attached, 1);
  EXPECT_FALSE(pruner->calc_mask(*layer).has_value()) << "not ready";
  EXPECT_FALSE(pruner->calc_mask(*layer).has_value()) << "still not ready";
  scorer->scores["conv"] = at::tensor({4.f, 1.f, 3.f, 2.f});
  EXPECT_THAT(keep(pruner->calc_mask(*layer)), ElementsAre(1, 0, 1, 0));
  EXPECT_FALSE(pruner->calc_mask(*layer).has_value()) << "one-shot: computed once";
  EXPECT_EQ(scorer->calls, 3);
}

TEST(FilterPrunerTest, ValidatesConfigLikeTheConv2dOneShotPruner) {
  auto pruner = make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter", pruner_options());
  const auto entry = [](const nlohmann::ordered_json& json) {
    return options_from_json(json, "/config_list/1");
  };
  EXPECT_THAT(
      [&] { pruner->validate_config(entry({{"sparsity", 0.5}, {"op_types", {"Linear"}}})); },
      ThrowsMessage<Error>(AllOf(HasSubstr("/config_list/1/op_types must contain only \"Conv2d\""),
                                 HasSubstr("l1_filter prunes Conv2d layers only"),
                                 HasSubstr("got [\"Linear\"]"))));
  EXPECT_THAT([&] { pruner->validate_config(entry({{"sparsity", 1.0}})); },
              ThrowsMessage<Error>(HasSubstr("/config_list/1/sparsity must be a number in [0, 1), "
                                             "got 1")));
  EXPECT_EQ(error_code([&] { pruner->validate_config(entry({{"op_types", {"Conv2d"}}})); }),
            Errc::kInvalidConfig);
  const Options ok = entry({{"sparsity", 0.5}, {"op_types", {"Conv2d"}}, {"typo", 1}});
  pruner->validate_config(ok);
  EXPECT_THAT(unread_option_paths(ok), ElementsAre("/config_list/1/typo"));
}

TEST(FilterPrunerTest, ReadsDependencyAwareAndAStringDummyInputOnly) {
  const Options options = pruner_options(
      {{"dependency_aware", true}, {"dummy_input", "ignored"}, {"unknown", 1}});
  make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter", options);
  EXPECT_THAT(unread_option_paths(options), ElementsAre("/options/unknown"));

  EXPECT_THAT(
      [&] {
        make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter",
                           pruner_options({{"dummy_input", {1, 3, 32, 32}}}));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("/options/dummy_input must be a string"),
                                 HasSubstr("l1_filter accepts dummy_input only as a string"))));
  EXPECT_EQ(error_code([&] {
              make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter",
                                 pruner_options({{"dependency_aware", "yes"}}));
            }),
            Errc::kInvalidConfig);
}

// ---- make_filter_pruner, dependency-aware mode ------------------------------------------------

// A context whose model has no analysable graph (a C++-frontend model).
class NoGraphContext final : public CompressionContext {
 public:
  explicit NoGraphContext(const Registry& registry) : registry_(registry) {}
  std::vector<LayerView*> layers() override { return {}; }
  int64_t add_activation_collector(ActivationCollector) override { return 1; }
  void remove_activation_collector(int64_t) override {}
  const Registry& registry() const override { return registry_; }
  int64_t add_optimizer_step_callback(std::function<void()>) override { return 1; }
  void remove_optimizer_step_callback(int64_t) override {}
  void update_masks_now() override {}
  int64_t save_model_state() override { return 1; }
  void restore_model_state(int64_t) override {}
  std::vector<std::vector<std::string>> channel_dependency_sets() override {
    throw Error(Errc::kUnsupported, "model 'net.pt' is a C++-frontend model without a graph");
  }
  std::map<std::string, int64_t> group_dependencies() override {
    throw Error(Errc::kUnsupported, "model 'net.pt' is a C++-frontend model without a graph");
  }

 private:
  const Registry& registry_;
};

TEST(FilterPrunerDependencyTest, ModelsWithoutAGraphGetAClearError) {
  NoRegistry registry;
  NoGraphContext context(registry);
  auto pruner = make_filter_pruner(std::make_shared<L1Scorer>(), "l2_filter",
                                   pruner_options({{"dependency_aware", true}}));
  EXPECT_THAT([&] { pruner->attach(context); },
              ThrowsMessage<Error>(AllOf(HasSubstr("l2_filter: option dependency_aware needs a "
                                                   "TorchScript model"),
                                         HasSubstr("C++-frontend model"))));
  EXPECT_EQ(error_code([&] { pruner->attach(context); }), Errc::kUnsupported);
  // Normal mode never asks for the graph.
  auto normal = make_filter_pruner(std::make_shared<L1Scorer>(), "l2_filter", pruner_options());
  EXPECT_NO_THROW(normal->attach(context));
}

// Reference §7 case 14: x -> conv1(1->4) -> relu -> {conv2, conv3} -> add. conv2's L1 norms are
// [4,3,2,1], conv3's [1,.5,3,2.5]; their sum [5,3.5,5,3.5] ranks the common channels.
class Case14Test : public ::testing::Test {
 protected:
  void build(double s2, double s3, bool compress_conv3 = true) {
    conv1_ = conv(0, "conv1", {1, 1, 1, 1}, 0.0, false, 1);
    conv2_ = conv(1, "conv2", {4, 3, 2, 1}, s2);
    conv3_ = conv(2, "conv3", {1, 0.5, 3, 2.5}, s3);
    std::vector<LayerView*> layers{conv2_.get()};
    if (compress_conv3) {
      layers.push_back(conv3_.get());
    }
    context_ = std::make_unique<test::FakeContext>(layers, registry_);
    context_->channel_sets = {{"conv1"}, {"conv2", "conv3"}};
    context_->groups = {{"conv1", 1}, {"conv2", 1}, {"conv3", 1}};
  }
  std::unique_ptr<Pruner> attached_pruner(bool dependency_aware) {
    auto pruner = make_filter_pruner(scorer_, "l1_filter",
                                     pruner_options({{"dependency_aware", dependency_aware}}));
    pruner->attach(*context_);
    return pruner;
  }

  NoRegistry registry_;
  std::shared_ptr<L1Scorer> scorer_ = std::make_shared<L1Scorer>();
  std::unique_ptr<LayerView> conv1_, conv2_, conv3_;
  std::unique_ptr<test::FakeContext> context_;
};

TEST_F(Case14Test, EqualSparsitiesPruneTheSameChannels) {
  build(0.5, 0.5);
  auto pruner = attached_pruner(true);
  // Sum [5,3.5,5,3.5]: target int(4 * .5) = 2 -> channels 1 and 3 in both (as NNI).
  EXPECT_THAT(keep(pruner->calc_mask(*conv2_)), ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(keep(pruner->calc_mask(*conv3_)), ElementsAre(1, 0, 1, 0));
  EXPECT_FALSE(pruner->calc_mask(*conv2_).has_value());
  EXPECT_FALSE(pruner->calc_mask(*conv3_).has_value());
  EXPECT_EQ(scorer_->calls, 2) << "one score per member, computed together";
  EXPECT_THAT(scorer_->computed, ElementsAre("conv2", "conv3"));
}

TEST_F(Case14Test, NormalModePrunesEachLayerOnItsOwn) {
  build(0.5, 0.5);
  auto pruner = attached_pruner(false);
  EXPECT_THAT(keep(pruner->calc_mask(*conv2_)), ElementsAre(1, 1, 0, 0));
  EXPECT_THAT(keep(pruner->calc_mask(*conv3_)), ElementsAre(0, 0, 1, 1));
}

TEST_F(Case14Test, MixedSparsitiesUseTheSmallestForTheCommonChannels) {
  // min_s = .25: target 1 -> channel 1 (3.5 ties at 1 and 3: the lower index; NNI prunes both).
  // conv2 (1 to prune): channel 1. conv3 (3): channel 1, then its own smallest, 0 (1) and 3 (2.5).
  for (bool conv3_first : {false, true}) {
    build(0.25, 0.75);
    auto pruner = attached_pruner(true);
    std::optional<Masks> m2, m3;
    if (conv3_first) {
      m3 = pruner->calc_mask(*conv3_);
      m2 = pruner->calc_mask(*conv2_);
    } else {
      m2 = pruner->calc_mask(*conv2_);
      m3 = pruner->calc_mask(*conv3_);
    }
    EXPECT_THAT(keep(m2), ElementsAre(1, 0, 1, 1)) << conv3_first;
    EXPECT_THAT(keep(m3), ElementsAre(0, 0, 1, 0)) << conv3_first;
  }
}

TEST_F(Case14Test, APartlyCompressedSetPrunesNoCommonChannels) {
  // Only conv2 is compressed: conv3 keeps every channel, so min_s = 0 and conv2 is pruned as in
  // normal mode.
  build(0.5, 0.5, /*compress_conv3=*/false);
  auto pruner = attached_pruner(true);
  EXPECT_THAT(keep(pruner->calc_mask(*conv2_)), ElementsAre(1, 1, 0, 0));
  EXPECT_EQ(scorer_->calls, 1) << "conv3 is not compressed, so not scored";
}

TEST_F(Case14Test, ASetWaitsForEveryMembersScorer) {
  build(0.5, 0.5);
  auto scorer = std::make_shared<FixedScorer>();
  auto pruner =
      make_filter_pruner(scorer, "test_filter", pruner_options({{"dependency_aware", true}}));
  pruner->attach(*context_);
  scorer->scores["conv2"] = at::tensor({4.f, 3.f, 2.f, 1.f});  // conv3 not ready
  EXPECT_FALSE(pruner->calc_mask(*conv2_).has_value());
  EXPECT_FALSE(pruner->calc_mask(*conv3_).has_value());
  EXPECT_THAT(scorer->computed, IsEmpty());
  scorer->scores["conv3"] = at::tensor({1.f, 0.5f, 3.f, 2.5f});
  EXPECT_THAT(keep(pruner->calc_mask(*conv2_)), ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(keep(pruner->calc_mask(*conv3_)), ElementsAre(1, 0, 1, 0));
  EXPECT_THAT(scorer->computed, ElementsAre("conv2", "conv3"));
}

TEST_F(Case14Test, LogsTheCoupledSetsOnceAtAttach) {
  build(0.5, 0.5);
  std::vector<std::string> messages;
  const LogLevel level = log_level();
  set_log_level(LogLevel::kInfo);
  set_log_sink([&](LogLevel, const std::string& message) { messages.push_back(message); });
  auto pruner = attached_pruner(true);
  pruner->calc_mask(*conv2_);
  pruner->calc_mask(*conv3_);
  set_log_sink({});
  set_log_level(level);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_THAT(messages[0], AllOf(HasSubstr("l1_filter dependency_aware: 1 set(s)"),
                                 HasSubstr("{conv2, conv3}")));
}

TEST(FilterPrunerDependencyTest, GroupsSplitTheCommonChannelsEvenly) {
  // Reference §7 case 15: channel sums 1..8, min_s .5, G = 2 -> target 4, 2 per group of 4.
  NoRegistry registry;
  auto layer = conv(0, "conv", {1, 2, 3, 4, 5, 6, 7, 8}, 0.5, /*bias=*/true);
  test::FakeContext context({layer.get()}, registry);
  context.channel_sets = {{"conv"}};
  context.groups = {{"conv", 2}};
  auto pruner = make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter",
                                   pruner_options({{"dependency_aware", true}}));
  pruner->attach(context);
  auto masks = pruner->calc_mask(*layer);
  EXPECT_THAT(keep(masks), ElementsAre(0, 0, 1, 1, 0, 0, 1, 1));
  EXPECT_THAT(ints(*masks->bias), ElementsAre(0, 0, 1, 1, 0, 0, 1, 1));

  // G larger than the target (a layer feeding a depthwise conv): int(4 / 8) = 0 per group, so no
  // common channels and the layer is pruned as in normal mode.
  auto depthwise_fed = conv(0, "conv", {1, 2, 3, 4, 5, 6, 7, 8}, 0.5);
  test::FakeContext dw_context({depthwise_fed.get()}, registry);
  dw_context.channel_sets = {{"conv"}};
  dw_context.groups = {{"conv", 8}};
  pruner = make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter",
                              pruner_options({{"dependency_aware", true}}));
  pruner->attach(dw_context);
  EXPECT_THAT(keep(pruner->calc_mask(*depthwise_fed)), ElementsAre(0, 0, 0, 0, 1, 1, 1, 1));
}

TEST(FilterPrunerDependencyTest, GroupCountIsTheLcmOfTheMembersGroups) {
  // G = lcm(2, 3) = 6 groups of 2 channels; target int(12 * .5) = 6 -> one channel per pair.
  NoRegistry registry;
  std::vector<float> a_norms{1, 2, 4, 3, 5, 6, 8, 7, 9, 10, 12, 11};
  std::vector<float> b_norms(12, 1.f);
  auto a = conv(0, "a", a_norms, 0.5);
  auto b = conv(1, "b", b_norms, 0.5);
  test::FakeContext context({a.get(), b.get()}, registry);
  context.channel_sets = {{"a", "b"}};
  context.groups = {{"a", 2}, {"b", 3}};
  auto pruner = make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter",
                                   pruner_options({{"dependency_aware", true}}));
  pruner->attach(context);
  EXPECT_THAT(keep(pruner->calc_mask(*a)), ElementsAre(0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0));
  EXPECT_THAT(keep(pruner->calc_mask(*b)), ElementsAre(0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0));
}

TEST(FilterPrunerDependencyTest, EveryMemberPrunesTheCommonChannels) {
  // Three added layers with different sparsities and random weights; one member has a dead
  // channel (L1 norm 0) outside the common set, which in NNI ties with the zeroed common
  // channels and can make members prune different channels (conformance behaviour 10).
  NoRegistry registry;
  at::manual_seed(11);
  std::vector<std::unique_ptr<LayerView>> layers;
  const std::vector<double> sparsities{0.5, 0.25, 0.75};
  for (int i = 0; i < 3; ++i) {
    at::Tensor weight = at::randn({16, 8, 3, 3});
    if (i == 2) {
      weight[5].zero_();
    }
    layers.push_back(std::make_unique<LayerView>(i, "block.conv" + std::to_string(i), "Conv2d",
                                                 weight, at::randn({16}),
                                                 layer_config(sparsities[i])));
  }
  test::FakeContext context({layers[0].get(), layers[1].get(), layers[2].get()}, registry);
  context.channel_sets = {{"block.conv0", "block.conv1", "block.conv2"}};
  auto pruner = make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter",
                                   pruner_options({{"dependency_aware", true}}));
  pruner->attach(context);
  std::vector<std::vector<int>> kept;
  for (auto& layer : layers) {
    kept.push_back(keep(pruner->calc_mask(*layer)));
  }
  // The member with the smallest sparsity (.25) prunes exactly the int(16 * .25) = 4 common
  // channels; every other member prunes those too, plus its own up to its count.
  for (size_t m = 0; m < kept.size(); ++m) {
    int pruned = 0;
    for (size_t c = 0; c < 16; ++c) {
      pruned += kept[m][c] == 0;
      if (kept[1][c] == 0) {
        EXPECT_EQ(kept[m][c], 0) << "member " << m << " keeps common channel " << c;
      }
    }
    EXPECT_EQ(pruned, prune_count(16, sparsities[m])) << "member " << m;
  }
  EXPECT_EQ(kept[2][5], 0) << "the dead channel of member 2 is pruned";
}

TEST(FilterPrunerDependencyTest, MembersMustHaveEqualChannelCounts) {
  NoRegistry registry;
  auto a = conv(0, "a", {1, 2, 3, 4}, 0.5);
  auto b = conv(1, "b", {1, 2, 3, 4, 5, 6}, 0.5);
  test::FakeContext context({a.get(), b.get()}, registry);
  context.channel_sets = {{"a", "b"}};
  auto pruner = make_filter_pruner(std::make_shared<L1Scorer>(), "l1_filter",
                                   pruner_options({{"dependency_aware", true}}));
  pruner->attach(context);
  EXPECT_THAT([&] { pruner->calc_mask(*a); },
              ThrowsMessage<Error>(HasSubstr("layers 'a' and 'b' are in one channel dependency "
                                             "set {a, b} but have 4 and 6 output channels")));
  EXPECT_EQ(error_code([&] { pruner->calc_mask(*a); }), Errc::kShapeMismatch);
}

TEST(FilterPrunerDependencyTest, NothingToPruneInAnyMemberDoesNotWaitForTheScorer) {
  NoRegistry registry;
  auto a = conv(0, "a", {1, 2, 3, 4}, 0.2);  // int(4 * .2) = 0
  auto b = conv(1, "b", {1, 2, 3, 4}, 0.1);
  test::FakeContext context({a.get(), b.get()}, registry);
  context.channel_sets = {{"a", "b"}};
  auto scorer = std::make_shared<FixedScorer>();  // never ready
  auto pruner =
      make_filter_pruner(scorer, "test_filter", pruner_options({{"dependency_aware", true}}));
  pruner->attach(context);
  EXPECT_THAT(keep(pruner->calc_mask(*a)), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(keep(pruner->calc_mask(*b)), ElementsAre(1, 1, 1, 1));
  EXPECT_EQ(scorer->calls, 0);
}

TEST(FilterPrunerDependencyTest, RejectsLayersOtherThanConv2d) {
  NoRegistry registry;
  LayerView fc(0, "fc1", "Linear", at::randn({10, 4}), at::zeros({10}), layer_config(0.5));
  test::FakeContext context({&fc}, registry);
  auto pruner = make_filter_pruner(std::make_shared<L1Scorer>(), "fpgm",
                                   pruner_options({{"dependency_aware", true}}));
  pruner->attach(context);
  EXPECT_THAT([&] { pruner->calc_mask(fc); },
              ThrowsMessage<Error>(AllOf(HasSubstr("layer 'fc1' is a Linear"),
                                         HasSubstr("fpgm prunes Conv2d layers only"))));
}

// ---- SDK 1.5: make_filter_masker_for / make_filter_pruner_for --------------------------------

// A layer of `op_type` whose weight has `filters` rows shaped `rest`, filter i scaled by i + 1
// (so L1 ranks filter 0 lowest), with a bias of ones.
std::unique_ptr<LayerView> layer_of(const std::string& op_type, int64_t filters,
                                    std::vector<int64_t> rest, double sparsity,
                                    const std::string& name = "layer", int64_t index = 0) {
  std::vector<int64_t> shape{filters};
  shape.insert(shape.end(), rest.begin(), rest.end());
  std::vector<int64_t> scale_shape(shape.size(), 1);
  scale_shape[0] = filters;
  const at::Tensor weight =
      at::ones(shape) * at::arange(1, filters + 1, at::kFloat).reshape(scale_shape);
  return std::make_unique<LayerView>(index, name, op_type, weight, at::ones({filters}),
                                     layer_config(sparsity));
}

TEST(FilterMaskerForTest, PrunesLinearRowsAndConv1dConv3dFiltersLikeConv2dFilters) {
  auto masker = make_filter_masker_for(filter_op_types(), std::make_shared<L1Scorer>(), "l1");
  EXPECT_THAT(filter_op_types(), ElementsAre("Conv1d", "Conv2d", "Conv3d", "Linear"));
  // [F, in] for Linear: a filter is a row (one output feature).
  for (const auto& [type, rest] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"Linear", {3}}, {"Conv1d", {2, 3}}, {"Conv2d", {2, 3, 3}}, {"Conv3d", {2, 1, 3, 3}}}) {
    auto layer = layer_of(type, 6, rest, 0.5);
    const std::optional<Masks> masks = masker->calc_mask(*layer, 0.5);
    ASSERT_TRUE(masks.has_value()) << type;
    EXPECT_THAT(keep(masks->weight), ElementsAre(0, 0, 0, 1, 1, 1)) << type;
    EXPECT_THAT(ints(*masks->bias), ElementsAre(0, 0, 0, 1, 1, 1)) << type;
    EXPECT_EQ(masks->weight.sizes(), layer->weight().sizes()) << type;
  }
}

TEST(FilterMaskerForTest, OnlyTheTypesAskedForAreAccepted) {
  auto linear_only = make_filter_masker_for({"Linear"}, std::make_shared<L1Scorer>(), "rows");
  auto conv = layer_of("Conv2d", 4, {1, 1, 1}, 0.5, "conv1");
  EXPECT_THAT([&] { linear_only->calc_mask(*conv, 0.5); },
              ThrowsMessage<Error>(AllOf(HasSubstr("layer 'conv1' is a Conv2d"),
                                         HasSubstr("rows prunes Linear layers only"))));
  auto all = make_filter_masker_for(filter_op_types(), std::make_shared<L1Scorer>(), "l1");
  LayerView bn(0, "bn1", "BatchNorm2d", at::ones({4}), at::zeros({4}), layer_config(0.5));
  EXPECT_THAT([&] { all->calc_mask(bn, 0.5); },
              ThrowsMessage<Error>(AllOf(
                  HasSubstr("layer 'bn1' is a BatchNorm2d"),
                  HasSubstr("l1 prunes [\"Conv1d\", \"Conv2d\", \"Conv3d\", \"Linear\"] layers "
                            "only"))));
  EXPECT_EQ(error_code([&] { all->calc_mask(bn, 0.5); }), Errc::kUnsupportedLayer);
  // A plugin asking for a type the framework cannot prune, or for none, fails at creation.
  EXPECT_THAT([&] { make_filter_masker_for({"BatchNorm2d"}, std::make_shared<L1Scorer>(), "x"); },
              ThrowsMessage<Error>(HasSubstr("x: filter pruning cannot prune BatchNorm2d")));
  EXPECT_EQ(error_code([&] { make_filter_pruner_for({}, std::make_shared<L1Scorer>(), "x",
                                                    pruner_options()); }),
            Errc::kUnsupported);
}

TEST(FilterPrunerForTest, ConfigMayNameEveryAcceptedTypeAndNothingElse) {
  auto pruner = make_filter_pruner_for(filter_op_types(), std::make_shared<L1Scorer>(), "l1",
                                       pruner_options());
  const auto entry = [](const nlohmann::ordered_json& json) {
    return options_from_json(json, "/config_list/1");
  };
  EXPECT_NO_THROW(pruner->validate_config(
      entry({{"sparsity", 0.5}, {"op_types", {"Conv1d", "Conv2d", "Conv3d", "Linear"}}})));
  for (const char* bad : {"default", "BatchNorm2d", "ConvTranspose2d"}) {
    EXPECT_THAT(
        [&] { pruner->validate_config(entry({{"sparsity", 0.5}, {"op_types", {"Linear", bad}}})); },
        ThrowsMessage<Error>(AllOf(
            HasSubstr("/config_list/1/op_types may contain only [\"Conv1d\", \"Conv2d\", "
                      "\"Conv3d\", \"Linear\"]"),
            HasSubstr(std::string("got \"") + bad + "\" in [\"Linear\", \"" + bad + "\"]"))))
        << bad;
  }
  // The SDK 1.0 function keeps its Conv2d-only rule: plugins built for it see no new types.
  auto conv2d_only = make_filter_pruner(std::make_shared<L1Scorer>(), "old", pruner_options());
  EXPECT_EQ(error_code([&] {
              conv2d_only->validate_config(entry({{"sparsity", 0.5}, {"op_types", {"Linear"}}}));
            }),
            Errc::kInvalidConfig);
}

TEST(FilterPrunerForTest, DependencyAwareCouplesLinearLayersOfOneResidualStream) {
  // A transformer block: embed's output and fc2's are added, so they prune common rows; fc1
  // (the hidden width) is pruned on its own.
  NoRegistry registry;
  auto embed = layer_of("Linear", 4, {3}, 0.5, "embed", 0);
  auto fc1 = layer_of("Linear", 8, {4}, 0.5, "fc1", 1);
  auto fc2 = layer_of("Linear", 4, {8}, 0.5, "fc2", 2);
  // Reverse fc2's ranking, so that alone it would prune rows 2 and 3.
  fc2->weight().copy_(fc2->weight().flip(0));
  test::FakeContext context({embed.get(), fc1.get(), fc2.get()}, registry);
  context.channel_sets = {{"embed", "fc2"}, {"fc1"}};
  auto pruner = make_filter_pruner_for(filter_op_types(), std::make_shared<L1Scorer>(), "l1",
                                       pruner_options({{"dependency_aware", true}}));
  pruner->attach(context);
  // Summed L1 per row: embed 3·(1,2,3,4), fc2 8·(4,3,2,1) → (35, 30, 25, 20): rows 2, 3.
  EXPECT_THAT(keep(pruner->calc_mask(*embed)), ElementsAre(1, 1, 0, 0));
  EXPECT_THAT(keep(pruner->calc_mask(*fc2)), ElementsAre(1, 1, 0, 0));
  EXPECT_THAT(keep(pruner->calc_mask(*fc1)), ElementsAre(0, 0, 0, 0, 1, 1, 1, 1));
}

}  // namespace
}  // namespace lithe::sdk
