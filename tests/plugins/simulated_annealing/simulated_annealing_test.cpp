// NNI's SimulatedAnnealingPruner through a real PruningSession on the bundled LeNet: NumPy's
// random numbers, the overall sparsity reached with bigger layers pruned more, the best
// candidate kept in either optimize mode, the same seed giving the same masks, and the errors.
// (The search's path against NNI's, draw for draw, is the golden cases' job:
// tests/data/nni/golden/sa_lenet_*.)
#include "plugins/simulated_annealing/simulated_annealing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

namespace lithe::plugins::simulated_annealing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

host::PluginRegistry& annealing_registry() {
  return test::registry_of({&level::register_algorithms,
                            &filter_norm::register_algorithms,
                            &register_algorithms});
}

const char* kLevelAll = R"([{"sparsity": 0.6, "op_types": ["default"]}])";

TEST(NumpyRandomTest, DrawsWhatNumpyDrawsAfterSeeding) {
  // np.random.seed(0); np.random.uniform(0, 1, 3)
  NumpyRandom zero(0);
  EXPECT_EQ(zero.uniform(0, 1), 0.5488135039273248);
  EXPECT_EQ(zero.uniform(0, 1), 0.7151893663724195);
  EXPECT_EQ(zero.uniform(0, 1), 0.6027633760716439);
  // np.random.seed(42); np.random.uniform(-2, 3)
  NumpyRandom answer(42);
  EXPECT_EQ(answer.uniform(-2, 3), -2 + 5 * 0.3745401188473625);
}

class SimulatedAnnealingTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = host::load_torchscript_model(test::lenet_model()); }

  std::unique_ptr<host::PruningSession> session(const std::string& options_json,
                                                const std::string& config_list = kLevelAll) {
    return std::make_unique<host::PruningSession>(
        *model_, annealing_registry(),
        host::CompressionConfig{"simulated_annealing", config_list, options_json, "t"});
  }

  // Each layer's share of zero weights now (the masks are applied to the weights).
  std::map<std::string, double> zero_shares() const {
    std::map<std::string, double> out;
    for (const host::ModuleRecord& m : model_->modules()) {
      if (m.weight.has_value()) {
        out[m.name] = m.weight->eq(0).sum().item<double>() / static_cast<double>(m.weight->numel());
      }
    }
    return out;
  }

  std::unique_ptr<host::Model> model_;
};

// A fast schedule: 100 · 0.5^k > 10 gives 4 temperatures.
const char* kFast =
    R"({"base_algo": "level", "cool_down_rate": 0.5, "stop_temperature": 10, "seed": 5)";

TEST_F(SimulatedAnnealingTest, ReachesTheOverallSparsityWithBiggerLayersPrunedMore) {
  const std::map<std::string, at::Tensor> dense = [&] {
    std::map<std::string, at::Tensor> w;
    for (const host::ModuleRecord& m : model_->modules()) {
      if (m.weight.has_value()) w[m.name] = m.weight->clone();
    }
    return w;
  }();
  auto pruning = session(std::string(kFast) + "}");
  int64_t evaluations = 0;
  pruning->set_evaluator([&] {
    ++evaluations;
    return zero_shares().at("fc1");  // any function of the masks
  });
  pruning->compress();
  EXPECT_GE(evaluations, 4);  // one accepted candidate per temperature at least
  int64_t zeros = 0;
  int64_t total = 0;
  std::vector<std::pair<int64_t, double>> by_size;
  for (const auto& [name, masks] : pruning->masks()) {
    zeros += masks.weight.eq(0).sum().item<int64_t>();
    total += masks.weight.numel();
    by_size.emplace_back(masks.weight.numel(),
                         masks.weight.eq(0).sum().item<double>() / masks.weight.numel());
    // The weights are the dense ones under the final masks: every candidate started from them.
    const at::Tensor weight = *model_->find_module(name)->weight;
    EXPECT_TRUE(weight.equal(dense.at(name) * masks.weight)) << name;
  }
  // NNI's rescale makes Σ int(n_k · s_k) the target before scaling: within 1% of it after.
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(total), 0.6, 0.01);
  std::sort(by_size.begin(), by_size.end());
  for (size_t k = 1; k < by_size.size(); ++k) {
    EXPECT_GE(by_size[k].second + 0.01, by_size[k - 1].second)
        << "a layer of " << by_size[k].first << " weights is pruned less than one of "
        << by_size[k - 1].first;
  }
}

TEST_F(SimulatedAnnealingTest, KeepsTheBestCandidateForEitherModeAndASeedRepeatsItself) {
  for (const std::string mode : {"maximize", "minimize"}) {
    SCOPED_TRACE(mode);
    std::map<std::string, at::Tensor> first;
    for (int run = 0; run < 2; ++run) {
      model_ = host::load_torchscript_model(test::lenet_model());
      auto pruning = session(std::string(kFast) + R"(, "optimize_mode": ")" + mode + "\"}");
      std::vector<double> seen;
      pruning->set_evaluator([&] {
        seen.push_back(zero_shares().at("fc1"));
        return seen.back();
      });
      pruning->compress();
      const double best = mode == "maximize" ? *std::max_element(seen.begin(), seen.end())
                                             : *std::min_element(seen.begin(), seen.end());
      EXPECT_EQ(zero_shares().at("fc1"), best) << "the result is not the best candidate";
      for (const auto& [name, masks] : pruning->masks()) {
        if (run == 0) {
          first[name] = masks.weight.clone();
        } else {
          EXPECT_TRUE(masks.weight.equal(first.at(name))) << name << ": same seed, other masks";
        }
      }
    }
  }
}

TEST_F(SimulatedAnnealingTest, FilterPruningUnderTheSearchAndBoundedEvaluations) {
  auto pruning = session(R"({"base_algo": "l1", "seed": 1, "max_evaluations": 3})",
                         R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  int64_t evaluations = 0;
  pruning->set_evaluator([&] { return static_cast<double>(++evaluations); });
  pruning->compress();
  EXPECT_EQ(evaluations, 3);
  for (const auto& [name, masks] : pruning->masks()) {
    // Whole filters: every filter's mask is all zeros or all ones.
    const at::Tensor per_filter = masks.weight.reshape({masks.weight.size(0), -1});
    EXPECT_TRUE(per_filter.amin(1).eq(per_filter.amax(1)).all().item<bool>()) << name;
  }
}

// short_term_fine_tune_epochs (Lithe's): every candidate is fine-tuned before the evaluator sees
// it, and the next candidate and the result start again from the original weights.
TEST_F(SimulatedAnnealingTest, ShortTermFineTuningComesBeforeEveryEvaluationAndIsUndone) {
  const at::Tensor dense_fc1 = model_->find_module("fc1")->weight->clone();
  auto pruning = session(R"({"base_algo": "l1", "seed": 1, "max_evaluations": 4,
                             "short_term_fine_tune_epochs": 2})",
                         R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  std::vector<int64_t> epochs;
  pruning->set_fine_tuner([&](int64_t n) {
    epochs.push_back(n);
    at::NoGradGuard no_grad;
    model_->find_module("fc1")->weight->add_(1.0);  // what training would change
  });
  int64_t evaluations = 0;
  pruning->set_evaluator([&] {
    ++evaluations;
    EXPECT_EQ(epochs.size(), static_cast<size_t>(evaluations));
    // Fine-tuned once from the original weights: never twice.
    EXPECT_TRUE(model_->find_module("fc1")->weight->equal(dense_fc1 + 1.0));
    return static_cast<double>(evaluations);
  });
  pruning->compress();
  EXPECT_EQ(evaluations, 4);
  EXPECT_EQ(epochs, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_TRUE(model_->find_module("fc1")->weight->equal(dense_fc1));

  auto no_tuner = session(R"({"short_term_fine_tune_epochs": 1})",
                          R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  no_tuner->set_evaluator([] { return 0.0; });
  EXPECT_THAT([&] { no_tuner->compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("short_term_fine_tune_epochs (1)"),
                                              HasSubstr("the host cannot fine-tune"))));
}

TEST_F(SimulatedAnnealingTest, ErrorsNameTheRuleAndTheValue) {
  auto no_evaluator = session(R"({"seed": 1})");
  EXPECT_THAT([&] { no_evaluator->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("there is none (lithe compress: --data DIR")));
  EXPECT_THAT([&] { session(R"({"start_temperature": 10, "stop_temperature": 20})"); },
              ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("start_temperature must exceed stop_temperature (20)"),
                        HasSubstr("got 10"))));
  auto mixed = session("{}", R"([{"sparsity": 0.5, "op_names": ["conv1"]},
                                 {"sparsity": 0.7, "op_names": ["fc1"]}])");
  mixed->set_evaluator([] { return 0.0; });
  EXPECT_THAT([&] { mixed->compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("layer 'fc1'"),
                                              HasSubstr("conv1' has 0.5, this one 0.7"))));
  // 0.999 of all weights: no random vector rescales below 1 in every layer (NNI would
  // draw forever).
  auto tight = session(std::string(kFast) + "}",
                       R"([{"sparsity": 0.999, "op_types": ["default"]}])");
  tight->set_evaluator([] { return 0.0; });
  EXPECT_THAT([&] { tight->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("none of 1000 random sparsity vectors "
                                                  "rescaled to the overall sparsity")));
  auto nan = session(std::string(kFast) + "}");
  nan->set_evaluator([] { return std::numeric_limits<double>::quiet_NaN(); });
  EXPECT_THAT([&] { nan->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("the evaluator returned nan")));
}

// SDK 1.10: a FLOPs budget instead of a sparsity. Every candidate the evaluator sees is scaled
// to the least pruning whose sped-up model fits (checked here by an independent speedup and
// count), the result fits and is close to the budget, and a seed repeats its masks.
TEST_F(SimulatedAnnealingTest, AFlopsBudgetFitsEveryCandidateAndTheResultToTheSpedUpModel) {
  const torch::jit::Module dense = host::load_torchscript_module(test::lenet_model());
  const std::vector<int64_t> shape = {1, 1, 28, 28};
  std::vector<std::pair<std::string, sdk::Masks>> first;
  for (int run = 0; run < 2; ++run) {
    model_ = host::load_torchscript_model(test::lenet_model());
    auto pruning = session(R"({"base_algo": "l1", "flops_budget": 0.5, "seed": 3,
                               "max_evaluations": 5})",
                           R"([{"op_types": ["Conv2d"]}])");
    pruning->set_cost_meter(host::pruned_cost_meter(dense, *pruning, shape));
    std::vector<double> shares;
    pruning->set_evaluator([&] {
      shares.push_back(test::sped_up_flops_share(dense, pruning->masks(), shape));
      return zero_shares().at("conv2");  // any function of the masks
    });
    pruning->compress();
    ASSERT_EQ(shares.size(), 5U);
    for (const double share : shares) {
      EXPECT_LE(share, 0.5);
      // The least pruning that fits: one more conv1 filter (the coarsest step, about 14% of
      // LeNet's FLOPs with the inputs of conv2 it feeds) would be too many.
      EXPECT_GT(share, 0.35);
    }
    const double result = test::sped_up_flops_share(dense, pruning->masks(), shape);
    EXPECT_LE(result, 0.5);
    // The result is one of the evaluated candidates.
    EXPECT_NE(std::find(shares.begin(), shares.end(), result), shares.end());
    if (run == 0) {
      first = pruning->masks();
    } else {
      ASSERT_EQ(pruning->masks().size(), first.size());
      for (size_t i = 0; i < first.size(); ++i) {
        EXPECT_TRUE(pruning->masks()[i].second.weight.equal(first[i].second.weight))
            << first[i].first << ": same seed, other masks";
      }
    }
  }
}

TEST_F(SimulatedAnnealingTest, BudgetErrorsNameTheKeyTheRuleAndTheValue) {
  const torch::jit::Module dense = host::load_torchscript_module(test::lenet_model());
  // No cost meter: the host cannot measure.
  auto no_meter = session(R"({"flops_budget": 0.5})", R"([{"op_types": ["Conv2d"]}])");
  no_meter->set_evaluator([] { return 0.0; });
  EXPECT_THAT([&] { no_meter->compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("flops_budget needs the sped-up"),
                                              HasSubstr("session.set_cost_meter"))));
  // A sparsity beside the budget.
  EXPECT_THAT([&] {
    session(R"({"flops_budget": 0.5})", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])");
  }, ThrowsMessage<sdk::Error>(AllOf(HasSubstr("/config_list/0/sparsity"),
                                     HasSubstr("flops_budget (0.5)"))));
  // A budget that pruning every layer to 0.99 does not reach, said before any search.
  auto tight = session(R"({"flops_budget": 0.01})", R"([{"op_types": ["Conv2d"]}])");
  tight->set_cost_meter(host::pruned_cost_meter(dense, *tight, {1, 1, 28, 28}));
  int64_t evaluations = 0;
  tight->set_evaluator([&] { return static_cast<double>(++evaluations); });
  EXPECT_THAT([&] { tight->compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("flops_budget 0.01 cannot be reached"),
                                              HasSubstr("at sparsity 0.99"))));
  EXPECT_EQ(evaluations, 0);
}

}  // namespace
}  // namespace lithe::plugins::simulated_annealing
