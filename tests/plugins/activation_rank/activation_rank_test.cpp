#include "plugins/activation_rank/activation_rank.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/filter_pruning.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/fake_context.h"
#include "support/paths.h"
#include "support/plugin_test.h"

namespace lithe::plugins::activation_rank {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using test::error_code;

sdk::Options config(double sparsity) { return test::sparsity_entry(sparsity); }
using test::options_json;

// Reference §7 case 13: Conv2d(1, 4, 1, bias=False) with W = [1, −2, 3, .5] on one input
// [[1, −1], [2, 0]].
at::Tensor case13_weight() { return at::tensor({1.f, -2.f, 3.f, .5f}).reshape({4, 1, 1, 1}); }
at::Tensor case13_output() {
  const at::Tensor x = at::tensor({1.f, -1.f, 2.f, 0.f}).reshape({1, 1, 2, 2});
  return at::conv2d(x, case13_weight());
}

// NNI's own statistics over the concatenated activations (ActivationAPoZRankFilterPrunerMasker
// ._calc_apoz and ActivationMeanRankFilterPrunerMasker._cal_mean_activation), with the mean in
// float64 for comparison with Lithe's float64 running sums.
at::Tensor nni_apoz_score(const std::vector<at::Tensor>& outputs, bool relu6) {
  const at::Tensor raw = at::cat(outputs, 0);
  const at::Tensor act = relu6 ? at::hardtanh(raw, 0, 6) : at::relu(raw);
  const at::Tensor eq_zero = act.eq(at::zeros_like(act));
  const at::Tensor apoz =
      eq_zero.sum({0, 2, 3}, false, at::kDouble) / eq_zero.select(1, 0).numel();
  return at::ones_like(apoz) - apoz;
}
at::Tensor nni_mean_score(const std::vector<at::Tensor>& outputs, bool relu6) {
  const at::Tensor raw = at::cat(outputs, 0).to(at::kDouble);
  const at::Tensor act = relu6 ? at::hardtanh(raw, 0, 6) : at::relu(raw);
  return act.mean({0, 2, 3});
}

class ActivationRankTest : public ::testing::Test {
 protected:
  ActivationRankTest() { register_algorithms(registry_); }
  host::PluginRegistry registry_;
};

// --- reference §7 case 13 through the registered pruners -----------------------------------

struct Case13Result {
  std::optional<sdk::Masks> before_forward;
  std::optional<sdk::Masks> after_forward;
  size_t collectors_after_masks = 0;
};

Case13Result run_case13(const host::PluginRegistry& registry, const std::string& algorithm) {
  auto pruner = registry.make_pruner(algorithm, sdk::Options());
  const sdk::Options cfg = config(0.5);
  pruner->validate_config(cfg);
  sdk::LayerView layer(0, "conv", "Conv2d", case13_weight(), std::nullopt, cfg);
  test::FakeContext context({&layer}, registry);
  pruner->attach(context);
  Case13Result result;
  EXPECT_EQ(context.collector_count(), 1u) << "attach registers one activation collector";
  result.before_forward = pruner->calc_mask(layer);
  context.observe(layer, case13_output());
  result.after_forward = pruner->calc_mask(layer);
  result.collectors_after_masks = context.collector_count();
  return result;
}

TEST_F(ActivationRankTest, ApozCase13PrunesTheFiltersWithMostZerosTiesToTheLowerIndex) {
  ActivationRankScorer scorer(Criterion::kApoz, {});
  sdk::LayerView layer(0, "conv", "Conv2d", case13_weight(), std::nullopt, config(0.5));
  test::FakeContext context({&layer}, registry_);
  scorer.attach(context);
  context.observe(layer, case13_output());
  const auto scores = scorer.filter_scores(layer);
  ASSERT_TRUE(scores.has_value());
  EXPECT_EQ(scores->scalar_type(), at::kDouble) << "NNI's 1 − APoZ is float64";
  EXPECT_TRUE(scores->equal(at::tensor({.5, .25, .5, .5}, at::kDouble))) << *scores;

  // s = .5 -> 2 filters: .25 (filter 1), then the lowest index of the .5 ties (filter 0).
  const Case13Result result = run_case13(registry_, "apoz");
  EXPECT_FALSE(result.before_forward.has_value()) << "no activation seen: masks stay, retried";
  ASSERT_TRUE(result.after_forward.has_value());
  EXPECT_TRUE(result.after_forward->weight.flatten().equal(at::tensor({0.f, 0.f, 1.f, 1.f})));
  EXPECT_FALSE(result.after_forward->bias.has_value());
  EXPECT_EQ(result.collectors_after_masks, 0u) << "the only layer is done: collector removed";
}

TEST_F(ActivationRankTest, DataParallelScoresCountEveryRanksShareOfTheBatches) {
  // The other rank saw the same outputs: the sums and the element count both double, so the
  // scores are those of one process that saw both shares (here: the same values).
  ActivationRankScorer scorer(Criterion::kApoz, {});
  sdk::LayerView layer(0, "conv", "Conv2d", case13_weight(), std::nullopt, config(0.5));
  test::FakeContext context({&layer}, registry_);
  int64_t elements_seen = 0;
  context.peer = [&](std::vector<at::Tensor>& tensors, sdk::Reduction op) {
    ASSERT_EQ(op, sdk::Reduction::kSum);
    ASSERT_EQ(tensors.size(), 2u);
    elements_seen = tensors[1].item<int64_t>();
    for (at::Tensor& t : tensors) {
      t = t * 2;
    }
  };
  scorer.attach(context);
  context.observe(layer, case13_output());
  const auto scores = scorer.filter_scores(layer);
  ASSERT_TRUE(scores.has_value());
  EXPECT_EQ(context.reductions, 1);
  EXPECT_EQ(elements_seen, case13_output().size(0) * case13_output().size(2) *
                               case13_output().size(3));
  EXPECT_TRUE(scores->equal(at::tensor({.5, .25, .5, .5}, at::kDouble))) << *scores;
}

TEST_F(ActivationRankTest, MeanCase13PrunesTheSmallestMeanActivations) {
  ActivationRankScorer scorer(Criterion::kMean, {});
  sdk::LayerView layer(0, "conv", "Conv2d", case13_weight(), std::nullopt, config(0.5));
  test::FakeContext context({&layer}, registry_);
  scorer.attach(context);
  context.observe(layer, case13_output());
  const auto scores = scorer.filter_scores(layer);
  ASSERT_TRUE(scores.has_value());
  EXPECT_TRUE(scores->equal(at::tensor({.75, .5, 2.25, .375}, at::kDouble))) << *scores;

  const Case13Result result = run_case13(registry_, "mean_activation");
  EXPECT_FALSE(result.before_forward.has_value());
  ASSERT_TRUE(result.after_forward.has_value());
  EXPECT_TRUE(result.after_forward->weight.flatten().equal(at::tensor({1.f, 0.f, 1.f, 0.f})));
  EXPECT_EQ(result.collectors_after_masks, 0u);
}

// --- running statistics ----------------------------------------------------------------------

TEST_F(ActivationRankTest, ScoresWaitForStatisticsBatchNumForwardsAndUseEveryBatchSeen) {
  at::manual_seed(7);
  sdk::LayerView layer(0, "conv", "Conv2d", at::randn({5, 3, 3, 3}), std::nullopt, config(0.4));
  test::FakeContext context({&layer}, registry_);
  for (const Criterion criterion : {Criterion::kApoz, Criterion::kMean}) {
    ActivationRankScorer scorer(criterion, {Activation::kRelu, 2});
    scorer.attach(context);
    // Batches of different sizes and spatial extents: the statistics are per element, as
    // NNI's mean over the concatenation (same H, W there; the counts make it exact here).
    const std::vector<at::Tensor> outputs{at::randn({3, 5, 4, 4}), at::randn({2, 5, 4, 4}),
                                          at::randn({4, 5, 4, 4})};
    EXPECT_FALSE(scorer.filter_scores(layer).has_value()) << "nothing seen";
    scorer.observe(layer, outputs[0]);
    EXPECT_EQ(scorer.batches_seen("conv"), 1);
    EXPECT_FALSE(scorer.filter_scores(layer).has_value()) << "1 of 2 batches";
    scorer.observe(layer, outputs[1]);
    auto scores = scorer.filter_scores(layer);
    ASSERT_TRUE(scores.has_value());
    std::vector<at::Tensor> seen{outputs[0], outputs[1]};
    at::Tensor expected = criterion == Criterion::kApoz ? nni_apoz_score(seen, false)
                                                        : nni_mean_score(seen, false);
    if (criterion == Criterion::kApoz) {
      EXPECT_TRUE(scores->equal(expected)) << "integer counts: bit-identical to NNI";
    } else {
      EXPECT_TRUE(at::allclose(*scores, expected, 1e-12, 0)) << *scores << expected;
    }
    scorer.observe(layer, outputs[2]);  // more than statistics_batch_num: all are used
    seen.push_back(outputs[2]);
    scores = scorer.filter_scores(layer);
    ASSERT_TRUE(scores.has_value());
    expected = criterion == Criterion::kApoz ? nni_apoz_score(seen, false)
                                             : nni_mean_score(seen, false);
    EXPECT_TRUE(at::allclose(*scores, expected, 1e-12, 0)) << *scores << expected;
  }
}

TEST_F(ActivationRankTest, Relu6ClipsActivationsAtSixForTheMeanAndCountsTheSameZeros) {
  sdk::LayerView layer(0, "conv", "Conv2d", at::ones({2, 1, 1, 1}), std::nullopt, config(0.5));
  test::FakeContext context({&layer}, registry_);
  // channel 0: [10, −10, 20, 0] -> relu6 [6, 0, 6, 0] (relu: mean 7.5); channel 1: [1, 2, 3, −1].
  const at::Tensor output =
      at::tensor({10.f, -10.f, 20.f, 0.f, 1.f, 2.f, 3.f, -1.f}).reshape({1, 2, 2, 2});
  ActivationRankScorer mean6(Criterion::kMean, {Activation::kRelu6, 1});
  ActivationRankScorer mean(Criterion::kMean, {Activation::kRelu, 1});
  ActivationRankScorer apoz6(Criterion::kApoz, {Activation::kRelu6, 1});
  for (ActivationRankScorer* scorer : {&mean6, &mean, &apoz6}) {
    scorer->attach(context);
  }
  context.observe(layer, output);
  EXPECT_TRUE(mean6.filter_scores(layer)->equal(at::tensor({3.0, 1.5}, at::kDouble)));
  EXPECT_TRUE(mean.filter_scores(layer)->equal(at::tensor({7.5, 1.5}, at::kDouble)));
  EXPECT_TRUE(apoz6.filter_scores(layer)->equal(at::tensor({.5, .75}, at::kDouble)));
  at::manual_seed(3);
  const at::Tensor random = at::randn({2, 2, 3, 3}) * 8;
  ActivationRankScorer fresh(Criterion::kMean, {Activation::kRelu6, 1});
  fresh.attach(context);
  fresh.observe(layer, random);
  EXPECT_TRUE(at::allclose(*fresh.filter_scores(layer), nni_mean_score({random}, true), 1e-12, 0));
}

TEST_F(ActivationRankTest, OutputsMustBeFourDimensionalWithAStableChannelCount) {
  sdk::LayerView layer(0, "features.0", "Conv2d", at::ones({4, 1, 1, 1}), std::nullopt,
                       config(0.5));
  test::FakeContext context({&layer}, registry_);
  ActivationRankScorer scorer(Criterion::kApoz, {});
  scorer.attach(context);
  EXPECT_THAT([&] { context.observe(layer, at::ones({4, 2, 2})); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("layer 'features.0'"),
                                              HasSubstr("4-dimensional outputs [N, C, H, W]"),
                                              HasSubstr("got shape [4, 2, 2]"))));
  EXPECT_EQ(error_code([&] { scorer.observe(layer, at::ones({2, 4})); }),
            sdk::Errc::kShapeMismatch);
  EXPECT_EQ(scorer.batches_seen("features.0"), 0) << "rejected outputs are not counted";
  scorer.observe(layer, at::ones({1, 4, 2, 2}));
  EXPECT_THAT([&] { scorer.observe(layer, at::ones({1, 3, 2, 2})); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("layer 'features.0'"),
                                              HasSubstr("4 channels before"),
                                              HasSubstr("[1, 3, 2, 2]"))));
}

TEST_F(ActivationRankTest, TheCollectorDoesNotTouchTheOutputOrItsGraph) {
  sdk::LayerView layer(0, "conv", "Conv2d", at::ones({3, 1, 1, 1}), std::nullopt, config(0.5));
  test::FakeContext context({&layer}, registry_);
  ActivationRankScorer scorer(Criterion::kMean, {});
  scorer.attach(context);
  at::manual_seed(1);
  const at::Tensor leaf = at::randn({2, 3, 4, 4}).set_requires_grad(true);
  const at::Tensor output = leaf * 2;
  const at::Tensor before = output.detach().clone();
  context.observe(layer, output);
  EXPECT_TRUE(output.equal(before));
  const at::Tensor scores = *scorer.filter_scores(layer);
  EXPECT_FALSE(scores.requires_grad()) << "statistics are not part of the training graph";
}

// --- lifetime of the collector -----------------------------------------------------------------

TEST_F(ActivationRankTest, CollectorIsRemovedOnceEveryLayerIsDoneAndRegisteredAgainOnRequest) {
  sdk::LayerView a(0, "conv1", "Conv2d", at::ones({2, 1, 1, 1}), std::nullopt, config(0.5));
  sdk::LayerView b(1, "conv2", "Conv2d", at::ones({2, 1, 1, 1}), std::nullopt, config(0.5));
  test::FakeContext context({&a, &b}, registry_);
  ActivationRankScorer scorer(Criterion::kMean, {});
  scorer.attach(context);
  EXPECT_TRUE(scorer.collecting());
  const at::Tensor first = at::tensor({1.f, 2.f, 3.f, 4.f}).reshape({1, 2, 2, 1});
  context.observe(a, first);
  context.observe(b, first);
  ASSERT_TRUE(scorer.filter_scores(a).has_value());

  scorer.on_masks_computed(a);
  EXPECT_EQ(scorer.batches_seen("conv1"), 0) << "conv1's statistics were reset";
  EXPECT_EQ(scorer.batches_seen("conv2"), 1);
  EXPECT_EQ(context.collector_count(), 1u) << "conv2 still needs activations";
  scorer.on_masks_computed(b);
  EXPECT_EQ(context.collector_count(), 0u) << "every layer done: hooks removed (NNI)";
  EXPECT_FALSE(scorer.collecting());
  context.observe(a, first);  // nobody listens any more
  EXPECT_EQ(scorer.batches_seen("conv1"), 0);

  // A schedule asks again: fresh statistics from the next forwards.
  EXPECT_FALSE(scorer.filter_scores(a).has_value());
  EXPECT_EQ(context.collector_count(), 1u);
  EXPECT_TRUE(scorer.collecting());
  EXPECT_FALSE(scorer.filter_scores(b).has_value()) << "registered once, nothing seen yet";
  EXPECT_EQ(context.collector_count(), 1u);
  const at::Tensor second = at::tensor({5.f, 7.f, 0.f, -1.f}).reshape({1, 2, 2, 1});
  context.observe(a, second);
  const auto scores = scorer.filter_scores(a);
  ASSERT_TRUE(scores.has_value());
  EXPECT_TRUE(scores->equal(at::tensor({6.0, 0.0}, at::kDouble)))
      << "only the batch after re-registration counts: " << *scores;
}

// A schedule round where the first layer has nothing to prune (reports done without asking for
// scores) and the second restarts collection: the round must still end with the collector
// removed, whatever the layer order.
TEST_F(ActivationRankTest, RoundEndsWhenALayerWithNothingToPruneReportedBeforeTheRestart) {
  sdk::LayerView a(0, "conv1", "Conv2d", at::ones({2, 1, 1, 1}), std::nullopt, config(0.5));
  sdk::LayerView b(1, "conv2", "Conv2d", at::ones({2, 1, 1, 1}), std::nullopt, config(0.5));
  test::FakeContext context({&a, &b}, registry_);
  ActivationRankScorer scorer(Criterion::kApoz, {});
  scorer.attach(context);
  const at::Tensor batch = at::tensor({1.f, 2.f, 0.f, 4.f}).reshape({1, 2, 2, 1});
  context.observe(a, batch);
  context.observe(b, batch);
  scorer.on_masks_computed(a);
  scorer.on_masks_computed(b);
  ASSERT_EQ(context.collector_count(), 0u) << "round 1 over";

  scorer.on_masks_computed(a);  // round 2: conv1 prunes nothing this epoch
  EXPECT_FALSE(scorer.filter_scores(b).has_value()) << "conv2 restarts collection";
  EXPECT_EQ(context.collector_count(), 1u);
  context.observe(b, batch);
  ASSERT_TRUE(scorer.filter_scores(b).has_value());
  scorer.on_masks_computed(b);
  EXPECT_EQ(context.collector_count(), 0u) << "conv1 already reported: the round is over";

  // Round 3: neither layer prunes anything (both report without collecting). Round 4: conv1's
  // masks must not end the round while conv2 still waits for its statistics.
  scorer.on_masks_computed(a);
  scorer.on_masks_computed(b);
  EXPECT_FALSE(scorer.filter_scores(a).has_value());
  context.observe(a, batch);
  context.observe(b, batch);
  ASSERT_TRUE(scorer.filter_scores(a).has_value());
  scorer.on_masks_computed(a);
  EXPECT_EQ(context.collector_count(), 1u) << "conv2 has not reported in this round";
  EXPECT_EQ(scorer.batches_seen("conv2"), 1) << "conv2's statistics survive conv1's masks";
}

TEST_F(ActivationRankTest, MaskerForSchedulesGathersFreshStatisticsForEveryRequest) {
  // As AGP uses it: the masker (empty options) is asked at growing sparsities; each answer uses
  // the activations seen since the previous one.
  auto masker = registry_.make_masker("apoz", sdk::Options());
  sdk::LayerView layer(0, "conv", "Conv2d", case13_weight(), std::nullopt, config(0.25));
  test::FakeContext context({&layer}, registry_);
  masker->attach(context);
  EXPECT_FALSE(masker->calc_mask(layer, 0.25).has_value());
  context.observe(layer, case13_output());
  auto masks = masker->calc_mask(layer, 0.25);  // scores [.5, .25, .5, .5] -> filter 1
  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(masks->weight.flatten().equal(at::tensor({1.f, 0.f, 1.f, 1.f})));
  EXPECT_EQ(context.collector_count(), 0u);
  layer.set_masks(*masks);

  EXPECT_FALSE(masker->calc_mask(layer, 0.5).has_value()) << "collector re-registered";
  EXPECT_EQ(context.collector_count(), 1u);
  // Filter 1 was pruned before and goes first (monotone schedules); of the others, filter 3 is
  // the only one that is ever zero in the new batches.
  context.observe(layer, at::tensor({1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 0.f}).reshape({2, 4, 1, 1}));
  masks = masker->calc_mask(layer, 0.5);
  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(masks->weight.flatten().equal(at::tensor({1.f, 0.f, 1.f, 0.f})));
}

// --- options -----------------------------------------------------------------------------------

TEST_F(ActivationRankTest, OptionsAreValidatedWithPathRuleAndValue) {
  for (const char* algorithm : {"apoz", "mean_activation"}) {
    EXPECT_THAT(
        [&] { registry_.make_pruner(algorithm, options_json({{"activation", "tanh"}})); },
        ThrowsMessage<sdk::Error>(
            HasSubstr("/options/activation must be one of \"relu\", \"relu6\", got \"tanh\"")));
    EXPECT_EQ(error_code([&] {
                registry_.make_pruner(algorithm, options_json({{"statistics_batch_num", 0}}));
              }),
              sdk::Errc::kInvalidConfig);
    EXPECT_THAT(
        [&] { registry_.make_pruner(algorithm, options_json({{"statistics_batch_num", -3}})); },
        ThrowsMessage<sdk::Error>(
            HasSubstr("/options/statistics_batch_num must be an integer > 0, got -3")));
    EXPECT_THAT(
        [&] { registry_.make_masker(algorithm, options_json({{"statistics_batch_num", 1.5}})); },
        ThrowsMessage<sdk::Error>(HasSubstr("/options/statistics_batch_num")));
  }
  const sdk::Options ok = options_json({{"activation", "relu6"},
                                          {"statistics_batch_num", 3},
                                          {"dependency_aware", false},
                                          {"optimizer", "sgd"}});
  EXPECT_NE(registry_.make_pruner("apoz", ok), nullptr);
  EXPECT_EQ(sdk::unread_option_paths(ok), std::vector<std::string>{"/options/optimizer"})
      << "Lithe's host owns the optimizer: NNI's optimizer argument is not an option";
  const ActivationRankOptions read = read_options(options_json({{"activation", "relu6"}}));
  EXPECT_EQ(read.activation, Activation::kRelu6);
  EXPECT_EQ(read.statistics_batch_num, 1);
}

TEST_F(ActivationRankTest, PrunersAcceptConv2dOnlyConfigs) {
  auto pruner = registry_.make_pruner("mean_activation", sdk::Options());
  EXPECT_EQ(error_code([&] {
              pruner->validate_config(
                  test::config_entry({{"sparsity", 0.5}, {"op_types", {"Linear"}}}, 1));
            }),
            sdk::Errc::kInvalidConfig);
  EXPECT_NO_THROW(pruner->validate_config(config(0.5)));
}

TEST_F(ActivationRankTest, RegistersMaskersAndPrunersUnderTheNamesUsersType) {
  for (const char* name : {"apoz", "mean_activation"}) {
    EXPECT_NE(registry_.find(host::AlgorithmKind::kPruner, name), nullptr) << name;
    EXPECT_NE(registry_.find(host::AlgorithmKind::kMasker, name), nullptr) << name;
  }
  EXPECT_THAT([&] { register_algorithms(registry_); },
              ThrowsMessage<sdk::Error>(HasSubstr("duplicate masker 'apoz'")));
}

// --- NNI's golden cases, through a real PruningSession -----------------------------------------

// Records the scores the real scorer hands to the SDK, to compare them with NNI's stat.<layer>.
class RecordingScorer final : public sdk::FilterScorer {
 public:
  explicit RecordingScorer(std::shared_ptr<ActivationRankScorer> inner)
      : inner_(std::move(inner)) {}
  void attach(sdk::CompressionContext& context) override { inner_->attach(context); }
  std::optional<at::Tensor> filter_scores(sdk::LayerView& layer) override {
    auto scores = inner_->filter_scores(layer);
    if (scores.has_value()) {
      recorded[layer.name()] = *scores;
    }
    return scores;
  }
  void on_masks_computed(const sdk::LayerView& layer) override {
    inner_->on_masks_computed(layer);
  }
  std::map<std::string, at::Tensor> recorded;
  std::shared_ptr<ActivationRankScorer> inner_;
};

void load_state(torch::jit::Module& module, const std::map<std::string, at::Tensor>& state) {
  torch::NoGradGuard no_grad;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    p.value.copy_(state.at(p.name));
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    b.value.copy_(state.at(b.name));
  }
}

class ActivationGoldenTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ActivationGoldenTest, StatisticsAndMasksMatchNni) {
  const auto& [algorithm, model_name] = GetParam();
  const auto conformance = test::nni_data_dir();
  ASSERT_TRUE(std::filesystem::exists(conformance / "golden")) << "in-repo test data missing: " << conformance;
  const std::string case_name = algorithm + "_" + model_name + "_s0.5";
  const auto golden = test::load_tensor_dict(conformance / "golden" / case_name / "tensors.pt");
  torch::jit::Module module =
      torch::jit::load((conformance / "models" / (model_name + ".pt")).string());
  const auto state =
      test::load_tensor_dict(conformance / "models" / (model_name + "_state.pt"));
  auto model = host::make_torchscript_model(module);
  model->train(false);  // NNI's case: statistics gathered in eval mode

  host::PluginRegistry registry;
  register_algorithms(registry);
  const Criterion criterion = algorithm == "apoz" ? Criterion::kApoz : Criterion::kMean;
  auto scorer = std::make_shared<RecordingScorer>(std::make_shared<ActivationRankScorer>(
      criterion, read_options(options_json({{"statistics_batch_num", 2}}))));
  registry.add_pruner({"recording", "test"}, [scorer, algorithm = algorithm](
                                                 const sdk::Options& options, const sdk::Registry&) {
    return sdk::make_filter_pruner(scorer, algorithm, options);
  });

  for (const std::string& name : {std::string("recording"), algorithm}) {
    SCOPED_TRACE(name);
    load_state(module, state);  // the previous run applied its masks to the weights
    host::CompressionConfig cfg{name, R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])",
                                name == algorithm ? R"({"statistics_batch_num": 2})" : "{}",
                                "<test>"};
    host::PruningSession session(*model, registry, cfg);
    session.compress();  // nothing seen yet: all ones, retried later
    for (const auto& [layer, masks] : session.masks()) {
      EXPECT_TRUE(masks.weight.eq(1).all().item<bool>()) << layer;
    }
    {
      torch::NoGradGuard no_grad;
      model->forward(golden.at("batch.0"));
      model->forward(golden.at("batch.1"));
    }
    session.update_masks();
    int layers = 0;
    for (const auto& [layer, masks] : session.masks()) {
      ++layers;
      EXPECT_TRUE(masks.weight.equal(golden.at(layer + ".weight_mask"))) << layer;
      ASSERT_TRUE(masks.bias.has_value());
      EXPECT_TRUE(masks.bias->equal(golden.at(layer + ".bias_mask"))) << layer;
      if (name == "recording") {
        const at::Tensor stat = golden.at("stat." + layer).to(at::kDouble);
        const at::Tensor& mine = scorer->recorded.at(layer);
        // NNI took a float32 mean of the concatenated batches; APoZ counts are exact.
        EXPECT_TRUE(at::allclose(mine, stat, 1e-6, 1e-12))
            << layer << ": max |diff| " << (mine - stat).abs().max().item<double>();
        if (criterion == Criterion::kApoz) {
          EXPECT_TRUE(mine.equal(stat)) << layer << ": 1 − APoZ is bit-identical";
        }
      }
    }
    EXPECT_EQ(layers, model_name == "lenet" ? 2 : 3);
    if (name == "recording") {
      EXPECT_FALSE(scorer->inner_->collecting()) << "hooks removed once every layer is done";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ActivationGoldenTest,
    ::testing::Combine(::testing::Values("apoz", "mean_activation"),
                       ::testing::Values("lenet", "vgg_bn")),
    [](const ::testing::TestParamInfo<ActivationGoldenTest::ParamType>& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param);
    });

}  // namespace
}  // namespace lithe::plugins::activation_rank
