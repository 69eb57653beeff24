// AutoCompress (search, ADMM, speedup per round) on the bundled LeNet with the filter, level and
// ADMM plugins linked directly: every round fits its share of the budget and starts from the
// model the round before left, the run is reproducible (at a given thread count) and when resumed
// after a round or in the middle of one, the state file round-trips and names what is wrong,
// and bad options are refused by name.
#include "lithe/host/pipeline/auto_compress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/model/model.h"
#include "lithe/host/model/trainable_clone.h"
#include "lithe/host/pipeline/auto_compress_state.h"
#include "lithe/host/pipeline/search_report.h"
#include "lithe/host/train/batchnorm_recalibration.h"
#include "lithe/sdk/error.h"
#include "plugins/admm/admm.h"
#include "plugins/filter_norm/filter_norm.h"
#include "plugins/level/level.h"
#include "support/fashion_data.h"
#include "support/paths.h"
#include "support/registry.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

PluginRegistry& admm_registry() {
  return test::registry_of({&plugins::filter_norm::register_algorithms,
                            &plugins::level::register_algorithms,
                            &plugins::admm::register_algorithms});
}

AutoCompressOptions lenet_options() {
  AutoCompressOptions o;
  o.search.algorithm = "l1_filter";
  o.search.budget = parse_resource_budget(ResourceKind::kFlops, "0.5x", "--flops-budget");
  o.search.trials = 3;
  o.search.seed = 3;
  o.search.latency.input_shape = {1, 1, 28, 28};
  o.search.latency.runs = 3;
  o.search.latency.warmup = 1;
  o.search.bisection_steps = 6;
  o.search.train.batch_size = 50;
  o.search.train.lr = 0.01;
  o.search.train.progress = false;
  o.rounds = 2;
  o.round_algorithm = "admm";
  o.round_options_json =
      R"({"base_algo": "l1", "num_iterations": 2, "training_epochs": 1, "row": 0.0001})";
  return o;
}

// The parameters of two models, tensor by tensor.
void expect_same_weights(const torch::jit::Module& a, const torch::jit::Module& b) {
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  auto ib = pb.begin();
  for (const auto& p : pa) {
    EXPECT_EQ(p.name, (*ib).name);
    EXPECT_TRUE(at::equal(p.value, (*ib).value)) << p.name;
    ++ib;
  }
}

void expect_same_rounds(const AutoCompressResult& a, const AutoCompressResult& b) {
  ASSERT_EQ(a.rounds.size(), b.rounds.size());
  for (size_t i = 0; i < a.rounds.size(); ++i) {
    EXPECT_EQ(a.rounds[i].sparsities, b.rounds[i].sparsities) << i;
    EXPECT_EQ(a.rounds[i].use.flops, b.rounds[i].use.flops) << i;
    EXPECT_EQ(a.rounds[i].accuracy, b.rounds[i].accuracy) << i;
    EXPECT_EQ(a.rounds[i].search.trials.size(), b.rounds[i].search.trials.size()) << i;
  }
  expect_same_weights(a.model, b.model);
}

struct Interrupted {};

class AutoCompressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::fashion_installed()) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
    dense_ = load_torchscript_module(test::lenet_model());
    test_ = test::fashion("test", 300);
    train_ = test::fashion("train", 300);
  }
  SearchData data() const { return {&test_, &train_}; }
  torch::jit::Module dense_;
  Dataset test_;
  Dataset train_;
};

TEST_F(AutoCompressTest, EachRoundFitsItsShareStartsFromTheLastAndTheRunReproduces) {
  // Reproducible at a given thread count (ADMM trains: at another count libtorch's float
  // reductions sum in another order, as for every training).
  const AutoCompressOptions options = lenet_options();
  const AutoCompressResult one = run_auto_compress(dense_, admm_registry(), options, data());
  const AutoCompressResult two = run_auto_compress(dense_, admm_registry(), options, data());
  expect_same_rounds(one, two);

  const int64_t dense_flops = count_flops(dense_, {1, 1, 28, 28}, FlopsMode::kDefault).total_flops;
  EXPECT_EQ(one.dense.flops, dense_flops);
  ASSERT_EQ(one.rounds.size(), 2U);
  // Round 1 aims at 0.5^(1/2) of the dense FLOPs, round 2 at half.
  EXPECT_EQ(one.rounds[0].budget.value, std::floor(std::sqrt(0.5) * dense_flops));
  EXPECT_EQ(one.rounds[1].budget.value, std::floor(0.5 * dense_flops));
  for (const AutoCompressRound& round : one.rounds) {
    EXPECT_FALSE(round.budget.relative);
    EXPECT_LE(static_cast<double>(round.use.flops), round.budget.value);
    ASSERT_TRUE(round.search.best.has_value());
    EXPECT_EQ(round.sparsities, round.search.trials[*round.search.best].sparsities);
  }
  // Round 2 searched the model round 1 left, and the result is that model shrunk again.
  EXPECT_EQ(one.rounds[1].search.dense.flops, one.rounds[0].use.flops);
  EXPECT_LT(one.rounds[1].use.flops, one.rounds[0].use.flops);
  EXPECT_EQ(count_flops(one.model, {1, 1, 28, 28}, FlopsMode::kDefault).total_flops,
            one.rounds[1].use.flops);
  const int64_t conv2_filters = one.model.attr("conv2").toModule().attr("weight").toTensor().size(0);
  EXPECT_LT(conv2_filters, 16);
  torch::jit::Module shrunk = one.model;
  const at::Tensor out = shrunk.forward({at::zeros({2, 1, 28, 28})}).toTensor();
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
  const std::unique_ptr<Model> last = make_torchscript_model(shrunk);
  EXPECT_EQ(evaluate(*last, test_).accuracy, one.rounds[1].accuracy);

  // ADMM trained the round's model: its weights are not the one-shot pruned candidate's.
  const torch::jit::Module one_shot = build_search_candidate(
      dense_, admm_registry(), options.search, one.rounds[0].search.layers,
      one.rounds[0].sparsities, {});
  const at::Tensor admm_conv1 = one.model.attr("conv1").toModule().attr("weight").toTensor();
  const at::Tensor shot_conv1 = one_shot.attr("conv1").toModule().attr("weight").toTensor();
  EXPECT_FALSE(admm_conv1.sizes() == shot_conv1.sizes() && at::equal(admm_conv1, shot_conv1));

  // The report carries every round and every trial of each.
  const std::string html = auto_compress_html(one, {"lenet.pt", "l1_filter", options.search.budget,
                                                    "auto_compress", 1.0});
  EXPECT_THAT(html, HasSubstr("<h2>Round 2</h2>"));
  EXPECT_THAT(html, HasSubstr("AutoCompress to a measured budget"));
}

TEST_F(AutoCompressTest, ResumedAfterARoundOrWithinOneItContinuesAsAnUninterruptedRun) {
  const AutoCompressOptions options = lenet_options();
  const AutoCompressResult whole = run_auto_compress(dense_, admm_registry(), options, data());

  // Killed once round 1 finished: the state keeps the rounds and the model they left.
  std::optional<AutoCompressResume> after_round;
  EXPECT_THROW(run_auto_compress(dense_, admm_registry(), options, data(), nullptr,
                                 [&](const AutoCompressResult& r, const SearchResult* flight) {
                                   if (flight == nullptr) {
                                     after_round = AutoCompressResume{r.dense, r.dense_accuracy,
                                                                      r.rounds, r.model.clone(),
                                                                      std::nullopt};
                                     throw Interrupted{};
                                   }
                                 }),
               Interrupted);
  ASSERT_TRUE(after_round.has_value());
  ASSERT_EQ(after_round->rounds.size(), 1U);
  std::vector<size_t> rounds_seen;
  const AutoCompressResult resumed = run_auto_compress(
      dense_, admm_registry(), options, data(), &*after_round,
      [&](const AutoCompressResult& r, const SearchResult*) {
        rounds_seen.push_back(r.rounds.size());
      });
  expect_same_rounds(whole, resumed);
  EXPECT_EQ(rounds_seen.front(), 1U);  // round 1 was not run again

  // Killed after two trials of round 2: those are taken as recorded.
  std::optional<AutoCompressResume> mid_round;
  EXPECT_THROW(run_auto_compress(dense_, admm_registry(), options, data(), nullptr,
                                 [&](const AutoCompressResult& r, const SearchResult* flight) {
                                   if (flight != nullptr && r.rounds.size() == 1 &&
                                       flight->trials.size() == 2) {
                                     mid_round = AutoCompressResume{r.dense, r.dense_accuracy,
                                                                    r.rounds, r.model.clone(),
                                                                    *flight};
                                     throw Interrupted{};
                                   }
                                 }),
               Interrupted);
  ASSERT_TRUE(mid_round.has_value());
  const AutoCompressResult continued =
      run_auto_compress(dense_, admm_registry(), options, data(), &*mid_round);
  expect_same_rounds(whole, continued);
  EXPECT_EQ(continued.rounds[1].search.trials[1].use.latency_ms,
            mid_round->in_flight->trials[1].use.latency_ms);  // recorded, not measured again

  // Through the state file: written, read back, the same rounds and trials.
  const nlohmann::ordered_json fingerprint =
      auto_compress_fingerprint(options, "0123456789abcdef", "test data");
  const std::string text = auto_compress_state_json(
      whole, &*mid_round->in_flight, {"00000000000000aa", "00000000000000bb"}, fingerprint);
  const AutoCompressState state = read_auto_compress_state(text, "state.json", fingerprint);
  ASSERT_EQ(state.resume.rounds.size(), 2U);
  EXPECT_EQ(state.model_digests, (std::vector<std::string>{"00000000000000aa", "00000000000000bb"}));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(state.resume.rounds[i].sparsities, whole.rounds[i].sparsities);
    EXPECT_EQ(state.resume.rounds[i].search.best, whole.rounds[i].search.best);
    EXPECT_EQ(state.resume.rounds[i].use.flops, whole.rounds[i].use.flops);
    EXPECT_EQ(state.resume.rounds[i].accuracy, whole.rounds[i].accuracy);
  }
  ASSERT_TRUE(state.resume.in_flight.has_value());
  EXPECT_EQ(state.resume.in_flight->trials.size(), 2U);
}

TEST_F(AutoCompressTest, AStateFileOfAnotherRunOrMalformedIsNamed) {
  const AutoCompressOptions options = lenet_options();
  AutoCompressResult empty;
  const nlohmann::ordered_json fingerprint =
      auto_compress_fingerprint(options, "0123456789abcdef", "test data");
  const std::string text = auto_compress_state_json(empty, nullptr, {}, fingerprint);
  AutoCompressOptions other = options;
  other.rounds = 3;
  EXPECT_THAT(
      [&] {
        read_auto_compress_state(text, "s.json",
                                 auto_compress_fingerprint(other, "0123456789abcdef", "test data"));
      },
      ThrowsMessage<sdk::Error>(HasSubstr("s.json: was written by another search: /search/rounds "
                                          "is 2 there and 3 now")));
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text);
  doc["rounds"] = nlohmann::ordered_json::array({{{"best", 0}}});
  EXPECT_THAT([&] { read_auto_compress_state(doc.dump(), "s.json", fingerprint); },
              ThrowsMessage<sdk::Error>(HasSubstr("s.json: /rounds/0: has no \"search\"")));
  doc = nlohmann::ordered_json::parse(text);
  doc["format"] = "lithe-search-state";
  EXPECT_THAT([&] { read_auto_compress_state(doc.dump(), "s.json", fingerprint); },
              ThrowsMessage<sdk::Error>(HasSubstr("not a state of --strategy auto_compress")));
}

// A BatchNorm network: ADMM masks its trained weights in one shot, so each round's model gets
// its statistics re-estimated (recalibrate_bn_batches) before it is scored and searched again:
// re-estimating them once more changes nothing.
TEST_F(AutoCompressTest, EachRoundsBatchNormStatisticsAreReestimated) {
  const torch::jit::Module resblock =
      load_torchscript_module(test::source_dir() / "tests/data/nni/models/resblock.pt");
  Dataset data;
  data.images = at::randn({64, 3, 16, 16}, at::detail::createCPUGenerator(1));
  data.labels = at::randint(0, 10, {64}, at::detail::createCPUGenerator(2), at::kLong);
  AutoCompressOptions options = lenet_options();
  options.search.latency.input_shape = {1, 3, 16, 16};
  options.search.budget = parse_resource_budget(ResourceKind::kFlops, "0.6x", "--flops-budget");
  options.search.recalibrate_bn_batches = 2;
  options.search.train.batch_size = 16;
  options.rounds = 1;
  const AutoCompressResult result =
      run_auto_compress(resblock, admm_registry(), options, {&data, &data});
  ASSERT_EQ(result.rounds.size(), 1U);
  EXPECT_LE(result.rounds[0].use.ratio(ResourceKind::kFlops, result.dense), 0.6);
  torch::jit::Module again = trainable_clone(result.model);
  const std::unique_ptr<Model> model = make_torchscript_model(again);
  (void)recalibrate_batchnorm(*model, data, 2, 16);
  const auto mean = [](const torch::jit::Module& m) {
    return m.attr("bn1").toModule().attr("running_mean").toTensor();
  };
  EXPECT_TRUE(at::equal(mean(again), mean(result.model)));
  EXPECT_EQ(evaluate(*model, data).accuracy, result.rounds[0].accuracy);
}

TEST(AutoCompressBudgetTest, EveryRoundRemovesTheSameShareOfWhatIsLeft) {
  ResourceUse dense;
  dense.flops = 1000;
  dense.params = 400;
  dense.latency_ms = 8;
  const ResourceBudget flops = parse_resource_budget(ResourceKind::kFlops, "0.25x", "--b");
  EXPECT_EQ(auto_compress_round_budget(flops, dense, 1, 2).value, 500);
  EXPECT_FALSE(auto_compress_round_budget(flops, dense, 1, 2).relative);
  EXPECT_EQ(auto_compress_round_budget(flops, dense, 2, 2).value, 250);
  const ResourceBudget params = parse_resource_budget(ResourceKind::kParams, "100", "--b");
  EXPECT_EQ(auto_compress_round_budget(params, dense, 1, 2).value, 200);
  const ResourceBudget latency = parse_resource_budget(ResourceKind::kLatency, "0.25x", "--b");
  EXPECT_TRUE(auto_compress_round_budget(latency, dense, 1, 2).relative);
  EXPECT_DOUBLE_EQ(auto_compress_round_budget(latency, dense, 1, 2).value, 0.5);
  const ResourceBudget ms = parse_resource_budget(ResourceKind::kLatency, "2ms", "--b");
  EXPECT_FALSE(auto_compress_round_budget(ms, dense, 1, 2).relative);
  EXPECT_DOUBLE_EQ(auto_compress_round_budget(ms, dense, 1, 2).value, 4);
}

TEST_F(AutoCompressTest, BadOptionsAreNamed) {
  const auto refused = [&](AutoCompressOptions options, const SearchData& data,
                           const std::string& message) {
    EXPECT_THAT([&] { run_auto_compress(dense_, admm_registry(), options, data); },
                ThrowsMessage<sdk::Error>(HasSubstr(message)))
        << message;
  };
  AutoCompressOptions o = lenet_options();
  o.rounds = 0;
  refused(o, data(), "--rounds must be >= 1, got 0");
  o = lenet_options();
  o.search.alternatives = {"fpgm"};
  refused(o, data(), "auto_compress searches with one pruner, got l1_filter,fpgm");
  o = lenet_options();
  o.round_algorithm.clear();
  refused(o, data(), "auto_compress needs --round-algorithm");
  o = lenet_options();
  o.round_options_json = "[1]";
  refused(o, data(), "--round-options must be a JSON object, got '[1]'");
  o.round_options_json = R"({"num_iterations": 0})";
  refused(o, data(), "--round-algorithm, --round-options: ");  // the plugin's check, first
  o = lenet_options();
  o.round_algorithm = "no_such_pruner";
  refused(o, data(), "--round-algorithm, --round-options: ");
  refused(lenet_options(), {&test_, nullptr}, "auto_compress trains every round: give training data");
  o = lenet_options();
  o.search.budget = parse_resource_budget(ResourceKind::kFlops, "10", "--flops-budget");
  refused(o, data(), "auto_compress round 1 of 2: no trial of 3 fits the round's budget");

  // A resume that cannot be continued.
  AutoCompressResume resume;
  resume.rounds.resize(1);
  EXPECT_THAT([&] { run_auto_compress(dense_, admm_registry(), lenet_options(), data(), &resume); },
              ThrowsMessage<sdk::Error>(HasSubstr("after 1 rounds needs the model they left")));
  resume.rounds.resize(3);
  resume.model = dense_.clone();
  EXPECT_THAT([&] { run_auto_compress(dense_, admm_registry(), lenet_options(), data(), &resume); },
              ThrowsMessage<sdk::Error>(HasSubstr("ran 3 rounds; --rounds is 2")));
}

}  // namespace
}  // namespace lithe::host
