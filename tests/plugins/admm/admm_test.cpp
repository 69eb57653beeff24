// ADMM (NNI v2.0 ADMMPruner) through a real PruningSession on the bundled LeNet and
// Fashion-MNIST, its fine-tuning done by Lithe's trainer as `lithe compress` does it.
#include "plugins/admm/admm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "plugins/filter_norm/filter_norm.h"
#include "plugins/level/level.h"
#include "support/fashion_data.h"
#include "support/paths.h"

namespace lithe::plugins::admm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

host::PluginRegistry& admm_registry() {
  static host::PluginRegistry* registry = [] {
    auto* r = new host::PluginRegistry();
    level::register_algorithms(*r);
    filter_norm::register_algorithms(*r);
    register_algorithms(*r);
    return r;
  }();
  return *registry;
}

class AdmmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::fashion_installed()) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
    train_ = test::fashion("train", 1280);
    options_.progress = false;
    options_.batch_size = 64;
    options_.optimizer = "adam";  // NNI's choice
    options_.lr = 1e-3;
    options_.weight_decay = 5e-5;
  }

  // Runs admm with `options_json` on a fresh LeNet; returns the session (masks applied).
  std::unique_ptr<host::PruningSession> run(const std::string& options_json,
                                            const std::string& config_list) {
    model_ = host::load_torchscript_model(test::lenet_model());
    auto session = std::make_unique<host::PruningSession>(
        *model_, admm_registry(), host::CompressionConfig{"admm", config_list, options_json, "t"});
    host::PruningSession* raw = session.get();
    session->set_fine_tuner([this, raw](int64_t epochs) {
      host::TrainOptions tune = options_;
      tune.epochs = epochs;
      tune.seed = 7 + static_cast<uint64_t>(tunes_++);
      host::train(*model_, train_, nullptr, tune, raw);
    });
    session->compress();
    return session;
  }

  // Share of the squared weight norm that sits where the final mask prunes, before masking:
  // what ADMM's proximal steps drive toward zero.
  double energy_in_pruned(const host::PruningSession& session) {
    double pruned = 0;
    double total = 0;
    for (const auto& [name, masks] : session.masks()) {
      const at::Tensor w = unmasked_.at(name);
      pruned += (w * (1 - masks.weight)).pow(2).sum().item<double>();
      total += w.pow(2).sum().item<double>();
    }
    return pruned / total;
  }

  host::Dataset train_;
  host::TrainOptions options_;
  std::unique_ptr<host::Model> model_;
  int64_t tunes_ = 0;
  std::map<std::string, at::Tensor> unmasked_;
};

const char* kLevelAll = R"([{"sparsity": 0.8, "op_types": ["default"]}])";

TEST_F(AdmmTest, LevelBaseGivesExactSparsityAndPullsWeightsTowardTheProjection) {
  // Record the weights ADMM ends with, just before the final masks are applied: a second
  // session's level masker sees them through its own attach.
  std::map<std::string, double> pulled;
  for (const std::string row : {"1e-9", "0.3"}) {
    tunes_ = 0;
    const std::string options =
        R"({"num_iterations": 3, "training_epochs": 1, "base_algo": "level", "row": )" + row + "}";
    model_ = host::load_torchscript_model(test::lenet_model());
    auto session = std::make_unique<host::PruningSession>(
        *model_, admm_registry(), host::CompressionConfig{"admm", kLevelAll, options, "t"});
    host::PruningSession* raw = session.get();
    int64_t calls = 0;
    session->set_fine_tuner([&, raw](int64_t epochs) {
      EXPECT_EQ(epochs, 1);
      ++calls;
      host::TrainOptions tune = options_;
      tune.epochs = epochs;
      tune.seed = 7 + static_cast<uint64_t>(calls);
      host::train(*model_, train_, nullptr, tune, raw);
      unmasked_.clear();
      for (const char* name : {"conv1", "conv2", "fc1", "fc2", "fc3"}) {
        unmasked_[name] = model_->find_module(name)->weight->detach().clone();
      }
    });
    session->compress();
    EXPECT_EQ(calls, 3);
    for (const auto& [name, masks] : session->masks()) {
      const at::Tensor weight = *model_->find_module(name)->weight;
      EXPECT_EQ(masks.weight.eq(0).sum().item<int64_t>(),
                static_cast<int64_t>(static_cast<double>(weight.numel()) * 0.8))
          << name;
      EXPECT_EQ(weight.eq(0).sum().item<int64_t>(), masks.weight.eq(0).sum().item<int64_t>());
    }
    pulled[row == "0.3" ? "admm" : "none"] = energy_in_pruned(*session);
  }
  // With a real penalty, the weights the masks remove hold far less of the norm.
  EXPECT_LT(pulled["admm"], 0.5 * pulled["none"]) << pulled["admm"] << " vs " << pulled["none"];
}

TEST_F(AdmmTest, FilterBaseGivesExactFilterCounts) {
  auto session = run(R"({"num_iterations": 2, "training_epochs": 1, "base_algo": "l1"})",
                     R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  EXPECT_EQ(tunes_, 2);
  for (const auto& [name, masks] : session->masks()) {
    const at::Tensor kept = masks.weight.flatten(1).amax(1);
    EXPECT_EQ(kept.eq(0).sum().item<int64_t>(), masks.weight.size(0) / 2) << name;
  }
}

TEST_F(AdmmTest, WithoutAFineTunerTheErrorNamesAdmmAndTheData) {
  model_ = host::load_torchscript_model(test::lenet_model());
  host::PruningSession session(*model_, admm_registry(),
                               {"admm", kLevelAll, R"({"base_algo": "level"})", "t"});
  EXPECT_THAT([&] { session.compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("pruner 'admm'"), HasSubstr("--data"))));
}

TEST_F(AdmmTest, OptionsAreCheckedAgainstTheirRules) {
  model_ = host::load_torchscript_model(test::lenet_model());
  EXPECT_THAT(
      [&] {
        host::PruningSession session(*model_, admm_registry(),
                                     {"admm", kLevelAll, R"({"base_algo": "taylor"})", "t"});
      },
      ThrowsMessage<sdk::Error>(AllOf(HasSubstr("/options/base_algo"), HasSubstr("taylor"))));
  EXPECT_THAT(
      [&] {
        host::PruningSession session(*model_, admm_registry(),
                                     {"admm", kLevelAll, R"({"num_iterations": 0})", "t"});
      },
      ThrowsMessage<sdk::Error>(HasSubstr("/options/num_iterations")));
}

}  // namespace
}  // namespace lithe::plugins::admm
