// NNI's LinearPruner schedule through a real PruningSession on the bundled LeNet and
// Fashion-MNIST, fine-tuned between rounds by Lithe's trainer as `lithe compress` does it.
#include "plugins/linear/linear.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "plugins/filter_norm/filter_norm.h"
#include "plugins/level/level.h"
#include "support/fashion_data.h"
#include "support/paths.h"

namespace lithe::plugins::linear {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

host::PluginRegistry& linear_registry() {
  static host::PluginRegistry* registry = [] {
    auto* r = new host::PluginRegistry();
    level::register_algorithms(*r);
    filter_norm::register_algorithms(*r);
    register_algorithms(*r);
    return r;
  }();
  return *registry;
}

const char* kLevelAll = R"([{"sparsity": 0.8, "op_types": ["default"]}])";

// Zeros of every layer's weight mask, by layer.
std::map<std::string, at::Tensor> zero_masks(const host::PruningSession& session) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, masks] : session.masks()) {
    out[name] = masks.weight.eq(0);
  }
  return out;
}

class LinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = host::load_torchscript_model(test::lenet_model());
    options_.progress = false;
    options_.batch_size = 64;
    options_.lr = 0.01;
  }

  std::unique_ptr<host::PruningSession> session(const std::string& options_json,
                                                const std::string& config_list = kLevelAll) {
    return std::make_unique<host::PruningSession>(
        *model_, linear_registry(),
        host::CompressionConfig{"linear", config_list, options_json, "t"});
  }

  host::TrainOptions options_;
  std::unique_ptr<host::Model> model_;
};

TEST_F(LinearTest, RoundsPruneLinearlyGrowingSparsityAndFineTuneBetweenThem) {
  if (!test::fashion_installed()) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const host::Dataset train = test::fashion("train", 640);
  auto pruning = session(R"({"total_iteration": 4, "finetune_epochs": 1})");
  host::PruningSession* raw = pruning.get();
  std::vector<std::map<std::string, at::Tensor>> rounds;  // mask zeros seen by each fine-tune
  int64_t evaluations = 0;
  raw->set_fine_tuner([&](int64_t epochs) {
    EXPECT_EQ(epochs, 1);
    rounds.push_back(zero_masks(*raw));
    host::TrainOptions tune = options_;
    tune.epochs = epochs;
    tune.seed = 11 + rounds.size();
    host::train(*model_, train, nullptr, tune, raw);
  });
  raw->set_evaluator([&] {
    ++evaluations;
    return 0.5;
  });
  raw->compress();
  ASSERT_EQ(rounds.size(), 4U);
  EXPECT_EQ(evaluations, 4);
  for (size_t r = 0; r < rounds.size(); ++r) {
    for (const auto& [name, zeros] : rounds[r]) {
      const double share = 0.8 * static_cast<double>(r + 1) / 4.0;
      const auto want = static_cast<int64_t>(static_cast<double>(zeros.numel()) * share);
      EXPECT_EQ(zeros.sum().item<int64_t>(), want) << name << " in round " << r + 1;
      if (r > 0) {
        // Masks only grow: what a round pruned stays pruned through the next fine-tune.
        EXPECT_TRUE(rounds[r - 1].at(name).logical_and(zeros.logical_not()).any().item<bool>() ==
                    false)
            << name << " regained weights in round " << r + 1;
      }
    }
  }
  // The final masks are the last round's, exact, and stay through later mask updates even
  // though the last fine-tune moved the surviving weights.
  const auto final_zeros = zero_masks(*raw);
  raw->update_masks();
  for (const auto& [name, zeros] : zero_masks(*raw)) {
    EXPECT_TRUE(zeros.equal(final_zeros.at(name))) << name;
    EXPECT_TRUE(zeros.equal(rounds.back().at(name))) << name;
    const at::Tensor weight = *model_->find_module(name)->weight;
    EXPECT_EQ(weight.eq(0).logical_and(zeros).sum().item<int64_t>(), zeros.sum().item<int64_t>());
  }
}

TEST_F(LinearTest, WithoutTrainingTheRoundsGiveTheOneShotMasks) {
  // Nothing changes the scores between rounds, and maskers rank pruned (zero) weights first, so
  // four rounds end exactly where one-shot level pruning does; the default finetune_epochs
  // only warns when the host cannot train.
  auto rounds = session(R"({"total_iteration": 4})");
  rounds->compress();
  const auto iterative = zero_masks(*rounds);

  model_ = host::load_torchscript_model(test::lenet_model());
  host::PruningSession one_shot(*model_, linear_registry(),
                                host::CompressionConfig{"level", kLevelAll, "{}", "t"});
  one_shot.compress();
  for (const auto& [name, zeros] : zero_masks(one_shot)) {
    EXPECT_TRUE(zeros.equal(iterative.at(name))) << name;
  }
}

TEST_F(LinearTest, FilterRoundsPruneWholeFilters) {
  auto pruning = session(R"({"total_iteration": 3, "pruning_algorithm": "l1"})",
                         R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  pruning->compress();
  for (const auto& [name, masks] : pruning->masks()) {
    const at::Tensor rows = masks.weight.flatten(1);
    EXPECT_EQ(rows.amax(1).eq(0).sum().item<int64_t>(), rows.size(0) / 2) << name;
    EXPECT_EQ(rows.eq(0).sum().item<int64_t>(), (rows.size(0) / 2) * rows.size(1)) << name;
  }
}

TEST_F(LinearTest, FineTuningAskedForWithoutATrainerIsAnError) {
  auto pruning = session(R"({"total_iteration": 2, "finetune_epochs": 2})");
  EXPECT_THAT([&] { pruning->compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("pruner 'linear'"),
                                              HasSubstr("finetune_epochs is 2"),
                                              HasSubstr("--data"))));
}

TEST_F(LinearTest, OptionsAreCheckedAgainstTheirRules) {
  EXPECT_THAT([&] { session("{}"); },
              ThrowsMessage<sdk::Error>(HasSubstr("missing required key 'total_iteration'")));
  EXPECT_THAT([&] { session(R"({"total_iteration": 0})"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/options/total_iteration")));
  EXPECT_THAT(
      [&] { session(R"({"total_iteration": 2, "pruning_algorithm": "taylorfo"})"); },
      ThrowsMessage<sdk::Error>(AllOf(HasSubstr("/options/pruning_algorithm"),
                                      HasSubstr("taylorfo"))));
  EXPECT_THAT([&] { session(R"({"total_iteration": 2, "finetune_epochs": -1})"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/options/finetune_epochs")));
}

}  // namespace
}  // namespace lithe::plugins::linear
