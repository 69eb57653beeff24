// NNI's NetAdaptPruner through a real PruningSession on the bundled LeNet: steps until the
// overall sparsity, the evaluator's best candidate chosen at each step (in either mode), every
// candidate fine-tuned from the state the last step left, NNI's whole-model arithmetic when only
// some modules are compressed, and the errors. (The path against NNI's, fine-tuning included,
// is the golden cases' job: golden/net_adapt_lenet_level_s0.3, net_adapt_lenet_l1_conv_s0.3.)
#include "plugins/net_adapt/net_adapt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/pipeline/pruned_cost_meter.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/sdk/error.h"
#include "plugins/filter_norm/filter_norm.h"
#include "plugins/level/level.h"
#include "support/paths.h"
#include "support/registry.h"
#include "support/sped_up_flops.h"

namespace lithe::plugins::net_adapt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

host::PluginRegistry& net_adapt_registry() {
  return test::registry_of({&level::register_algorithms,
                            &filter_norm::register_algorithms,
                            &register_algorithms});
}

class NetAdaptTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = host::load_torchscript_model(test::lenet_model()); }

  std::unique_ptr<host::PruningSession> session(const std::string& options_json,
                                                const std::string& config_list) {
    return std::make_unique<host::PruningSession>(
        *model_, net_adapt_registry(),
        host::CompressionConfig{"net_adapt", config_list, options_json, "t"});
  }

  // Zero weights per layer now (masks are applied to the weights).
  std::map<std::string, int64_t> zeros() const {
    std::map<std::string, int64_t> out;
    for (const host::ModuleRecord& m : model_->modules()) {
      if (m.weight.has_value()) {
        out[m.name] = m.weight->eq(0).sum().item<int64_t>();
      }
    }
    return out;
  }

  std::unique_ptr<host::Model> model_;
};

const char* kLevelAll = R"([{"sparsity": 0.3, "op_types": ["default"]}])";

TEST_F(NetAdaptTest, EachStepKeepsTheBestCandidateUntilTheOverallSparsity) {
  for (const std::string mode : {"maximize", "minimize"}) {
    SCOPED_TRACE(mode);
    model_ = host::load_torchscript_model(test::lenet_model());
    auto pruning = session(R"({"base_algo": "level", "sparsity_per_iteration": 0.1,
                               "optimize_mode": ")" + mode + "\"}",
                           kLevelAll);
    // The metric: how many weights fc1 lost. Maximizing picks fc1 whenever it can take a
    // step; minimizing never does.
    std::vector<int64_t> candidates;
    int64_t fine_tunes = 0;
    std::vector<std::map<std::string, int64_t>> at_fine_tune;
    pruning->set_fine_tuner([&](int64_t epochs) {
      EXPECT_EQ(epochs, 1);
      ++fine_tunes;
      at_fine_tune.push_back(zeros());
    });
    pruning->set_evaluator([&] {
      candidates.push_back(zeros().at("fc1"));
      return static_cast<double>(candidates.back());
    });
    pruning->compress();
    // 0.1 + 0.1 + 0.1 reaches 0.3 after 3 steps; conv1 (150 weights) and fc3 (840) can never
    // take a step of int(44190 · 0.1) weights, so 3 candidates per step.
    EXPECT_EQ(candidates.size(), 9U);
    EXPECT_EQ(fine_tunes, 9);
    // Maximizing fc1's losses picks fc1 at every step, minimizing picks conv2 (the first
    // candidate with none). The chosen layer's sparsity grows by delta / related each step,
    // related being its weights plus the weights the next layer keeps (NNI's chain estimate:
    // conv2 → fc1, fc1 → fc2).
    const std::string chosen = mode == "maximize" ? "fc1" : "conv2";
    const double numel = mode == "maximize" ? 30720 : 2400;
    const double related = numel + (mode == "maximize" ? 10080 : 30720);
    const double delta = static_cast<double>(static_cast<int64_t>(44190 * 0.1));
    std::vector<int64_t> expected_zeros;  // after each step
    int64_t z = 0;
    for (int step = 0; step < 3; ++step) {
      z = static_cast<int64_t>(numel * (static_cast<double>(z) / numel + delta / related));
      expected_zeros.push_back(z);
    }
    const std::map<std::string, int64_t> final_zeros = zeros();
    for (const auto& [name, zeros_now] : final_zeros) {
      EXPECT_EQ(zeros_now, name == chosen ? expected_zeros.back() : 0) << name;
    }
    // Every candidate starts from the last step's state: the chosen layer keeps what it lost.
    for (size_t k = 3; k < at_fine_tune.size(); ++k) {
      EXPECT_GE(at_fine_tune[k].at(chosen), expected_zeros[k / 3 - 1]) << "candidate " << k;
    }
  }
}

// Only the convolutions compressed: as in NNI, the step counts every Conv2d/Linear weight of
// the model (LeNet: 44,190, so 4,419 per step of 0.1) and a layer's neighbours are the model's
// Conv2d/Linear modules (SDK 1.9 weighted_modules). conv1's step would remove 4,419 of the
// 150 + 2,400 weights it touches, so it is never a candidate; conv2's touches its 2,400 and
// fc1's 30,720 (not compressed: all kept), 0.1334 per step. Its filters go 2, 4, then 6 of 16
// (NNI's config 0.3834: golden case net_adapt_lenet_l1_conv_s0.3).
TEST_F(NetAdaptTest, OnlyTheConvolutionsCompressedTheStepCountsTheWholeModelAsNni) {
  auto conv = session(R"({"base_algo": "l1", "sparsity_per_iteration": 0.1,
                          "short_term_fine_tune_epochs": 0})",
                      R"([{"sparsity": 0.3, "op_types": ["Conv2d"]}])");
  const std::vector<sdk::ModuleSummary> modules = conv->weighted_modules();
  ASSERT_EQ(modules.size(), 5U);
  EXPECT_EQ(modules[0].name, "conv1");
  EXPECT_EQ(modules[0].type, "Conv2d");
  EXPECT_EQ(modules[0].weight_shape, (std::vector<int64_t>{6, 1, 5, 5}));
  EXPECT_TRUE(modules[0].compressed);
  EXPECT_EQ(modules[2].name, "fc1");
  EXPECT_EQ(modules[2].type, "Linear");
  EXPECT_FALSE(modules[2].compressed);
  int evaluations = 0;
  conv->set_evaluator([&] { return static_cast<double>(++evaluations); });
  conv->compress();
  EXPECT_EQ(evaluations, 3);  // one candidate (conv2) per step
  const std::map<std::string, int64_t> z = zeros();
  EXPECT_EQ(z.at("conv1"), 0);
  EXPECT_EQ(z.at("conv2"), 6 * 6 * 5 * 5);  // 6 of 16 filters
}

TEST_F(NetAdaptTest, ErrorsNameTheRuleAndTheValue) {
  auto no_evaluator = session("{}", kLevelAll);
  EXPECT_THAT([&] { no_evaluator->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("net_adapt scores every candidate")));
  auto no_trainer = session(R"({"base_algo": "level"})", kLevelAll);
  no_trainer->set_evaluator([] { return 0.0; });
  EXPECT_THAT([&] { no_trainer->compress(); },
              ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("short_term_fine_tune_epochs (1)"),
                        HasSubstr("the host cannot fine-tune"))));
  auto mixed = session(R"({"base_algo": "level", "short_term_fine_tune_epochs": 0})",
                       R"([{"sparsity": 0.5, "op_names": ["conv1"]},
                           {"sparsity": 0.7, "op_names": ["fc1"]}])");
  mixed->set_evaluator([] { return 0.0; });
  EXPECT_THAT([&] { mixed->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("conv1' has 0.5, this one 0.7")));
  auto nan = session(R"({"base_algo": "level", "short_term_fine_tune_epochs": 0})", kLevelAll);
  nan->set_evaluator([] { return std::nan(""); });
  EXPECT_THAT([&] { nan->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("the evaluator returned nan")));
  EXPECT_THAT([&] { session(R"({"sparsity_per_iteration": 1.5})", kLevelAll); },
              ThrowsMessage<sdk::Error>(HasSubstr("sparsity_per_iteration")));
}

// SDK 1.10: steps of the sped-up model's FLOPs instead of weights. Each step's candidates are
// the least pruning of one layer that lowers the FLOPs by the step (checked by an independent
// speedup and count); the evaluator's favourite layer is the one pruned; the last step lands on
// the budget.
TEST_F(NetAdaptTest, AFlopsBudgetStepsTheSpedUpModelsFlopsDownToTheBudget) {
  const torch::jit::Module dense = host::load_torchscript_module(test::lenet_model());
  const std::vector<int64_t> shape = {1, 1, 28, 28};
  auto pruning = session(R"({"base_algo": "l1", "flops_budget": 0.6,
                             "sparsity_per_iteration": 0.25, "short_term_fine_tune_epochs": 0})",
                         R"([{"op_types": ["Conv2d"]}])");
  pruning->set_cost_meter(host::pruned_cost_meter(dense, *pruning, shape));
  // The metric: how many weights conv2 lost, so conv2 is chosen whenever it can take the step.
  std::vector<double> shares;
  pruning->set_evaluator([&] {
    shares.push_back(test::sped_up_flops_share(dense, pruning->masks(), shape));
    return static_cast<double>(zeros().at("conv2"));
  });
  pruning->compress();
  // Step 1 aims at 0.75, step 2 at 0.6 (the budget, not 0.5); two layers each.
  ASSERT_EQ(shares.size(), 4U) << "candidates evaluated";
  EXPECT_LE(shares[0], 0.75);
  EXPECT_LE(shares[1], 0.75);
  EXPECT_LE(shares[2], 0.6);
  EXPECT_LE(shares[3], 0.6);
  const double result = test::sped_up_flops_share(dense, pruning->masks(), shape);
  EXPECT_LE(result, 0.6);
  EXPECT_GT(result, 0.5);  // one conv2 filter is about 4% of the FLOPs: the least that fits
  EXPECT_EQ(zeros().at("conv1"), 0) << "conv1 was never the evaluator's choice";
  EXPECT_GT(zeros().at("conv2"), 0);
}

TEST_F(NetAdaptTest, BudgetErrorsNameTheKeyAndWhatIsMissing) {
  auto no_meter = session(R"({"params_budget": 0.5, "short_term_fine_tune_epochs": 0})",
                          R"([{"op_types": ["Conv2d"]}])");
  no_meter->set_evaluator([] { return 0.0; });
  EXPECT_THAT([&] { no_meter->compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("params_budget needs the sped-up"),
                                              HasSubstr("session.set_cost_meter"))));
  EXPECT_THAT([&] { session(R"({"flops_budget": 0.5})", kLevelAll); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("/config_list/0/sparsity"),
                                              HasSubstr("net_adapt searches every layer"))));
  // A budget that every layer at 0.99 does not reach: refused before any candidate.
  const torch::jit::Module dense = host::load_torchscript_module(test::lenet_model());
  auto tight = session(R"({"flops_budget": 0.05, "short_term_fine_tune_epochs": 0})",
                       R"([{"op_types": ["Conv2d"]}])");
  tight->set_cost_meter(host::pruned_cost_meter(dense, *tight, {1, 1, 28, 28}));
  int64_t evaluations = 0;
  tight->set_evaluator([&] { return static_cast<double>(++evaluations); });
  EXPECT_THAT([&] { tight->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("net_adapt: flops_budget 0.05 cannot be "
                                                  "reached")));
  EXPECT_EQ(evaluations, 0);
  EXPECT_THAT([&] { session(R"({"flops_budget": 0.5, "params_budget": 0.5})",
                            R"([{"op_types": ["Conv2d"]}])"); },
              ThrowsMessage<sdk::Error>(HasSubstr("got both")));
}

}  // namespace
}  // namespace lithe::plugins::net_adapt
