#include "plugins/lottery_ticket/lottery_ticket.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <vector>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "plugins/level/level.h"
#include "support/fake_context.h"
#include "support/paths.h"
#include "support/plugin_test.h"

namespace lithe::plugins::lottery_ticket {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

class LotteryTicketTest : public ::testing::Test {
 protected:
  LotteryTicketTest() {
    level::register_algorithms(registry_);
    register_algorithms(registry_);
  }
  std::unique_ptr<sdk::Pruner> pruner(const nlohmann::ordered_json& options = {}) {
    return registry_.make_pruner(
        "lottery_ticket",
        sdk::options_from_json(options.is_null() ? nlohmann::ordered_json::object() : options,
                               "/options"));
  }
  host::PluginRegistry registry_;
};

sdk::Options entry(double sparsity, int64_t iterations, int index = 0) {
  return test::config_entry(
      {{"sparsity", sparsity}, {"prune_iterations", iterations}, {"op_types", {"default"}}},
      index);
}

TEST(LotteryTicketScheduleTest, RoundSparsitiesAreNnisToTheLastBit) {
  // conformance README item 12 (5 iterations, 0.8).
  const std::vector<double> nni = {0.0, 0.27522033632230447, 0.4746944391192466,
                                   0.6192692122568243, 0.724054067707757, 0.8};
  for (int64_t round = 0; round <= 5; ++round) {
    EXPECT_EQ(round_sparsity(0.8, 5, round), nni[static_cast<size_t>(round)]) << round;
  }
}

TEST_F(LotteryTicketTest, EachRoundPrunesItsShareAndRewindsTheWeights) {
  // reference §7 case 19: Linear(10, 10), W = 1..100, s = 0.8, 5 iterations.
  auto lt = pruner();
  const sdk::Options config = entry(0.8, 5);
  lt->validate_config(config);
  sdk::LayerView layer(0, "fc", "Linear", at::arange(1, 101, at::kFloat).reshape({10, 10}),
                       at::zeros({10}), config);
  test::FakeContext context({&layer}, registry_);
  lt->attach(context);
  EXPECT_EQ(context.saved_states, 1) << "the initial state is saved before any training";
  EXPECT_FALSE(lt->calc_mask(layer).has_value()) << "compress() changes nothing";
  std::vector<int64_t> pruned;
  for (int64_t round = 0; round <= 5; ++round) {
    lt->update_epoch(round);
    EXPECT_EQ(context.mask_updates_requested, round + 1);
    auto masks = lt->calc_mask(layer);  // what the host's update_masks_now() asks for
    ASSERT_TRUE(masks.has_value()) << round;
    EXPECT_FALSE(masks->bias.has_value()) << "the bias is never pruned";
    layer.set_masks(std::move(*masks));
    EXPECT_FALSE(lt->calc_mask(layer).has_value()) << "masks change only when a round starts";
    pruned.push_back(layer.masks().weight.eq(0).sum().item<int64_t>());
    EXPECT_EQ(context.restored, std::vector<int64_t>(static_cast<size_t>(round + 1), 1));
  }
  EXPECT_EQ(pruned, (std::vector<int64_t>{0, 27, 47, 61, 72, 80}));
  lt->update_epoch(6);
  EXPECT_EQ(context.mask_updates_requested, 6) << "after the last round: fine-tuning only";
}

TEST_F(LotteryTicketTest, RoundsSpanEpochsPerIterationAndRewindingCanBeOff) {
  auto lt = pruner({{"epochs_per_iteration", 3}, {"reset_weights", false}});
  const sdk::Options config = entry(0.5, 2);
  lt->validate_config(config);
  sdk::LayerView layer(0, "fc", "Linear", at::arange(1, 17, at::kFloat).reshape({4, 4}),
                       std::nullopt, config);
  test::FakeContext context({&layer}, registry_);
  lt->attach(context);
  EXPECT_EQ(context.saved_states, 0);
  for (int64_t epoch = 0; epoch < 9; ++epoch) {
    lt->update_epoch(epoch);
    if (auto masks = lt->calc_mask(layer)) {
      layer.set_masks(std::move(*masks));
    }
  }
  EXPECT_EQ(context.mask_updates_requested, 3) << "rounds start at epochs 0, 3 and 6";
  EXPECT_TRUE(context.restored.empty());
  // The last round's sparsity is 1 − (√0.5)² = 0.4999999999999999 in double, so int(16 · s)
  // = 7, exactly as NNI computes it.
  EXPECT_LT(round_sparsity(0.5, 2, 2), 0.5);
  EXPECT_EQ(layer.masks().weight.eq(0).sum().item<int64_t>(), 7);
}

TEST_F(LotteryTicketTest, ConfigAndOptionErrorsNameTheirPlace) {
  auto lt = pruner();
  EXPECT_THAT([&] { lt->validate_config(entry(0.0, 5)); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/sparsity must be a number in (0, 1), got 0")));
  EXPECT_THAT([&] { lt->validate_config(entry(0.5, 0)); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/prune_iterations must be an integer > 0, got 0")));
  auto fresh = pruner();
  fresh->validate_config(entry(0.5, 3, 0));
  EXPECT_THAT([&] { fresh->validate_config(entry(0.5, 4, 1)); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("/config_list/1/prune_iterations must equal every other entry's"),
                  HasSubstr("/config_list/0/prune_iterations is 3"), HasSubstr("got 4"))));
  EXPECT_THAT([&] { pruner({{"epochs_per_iteration", 0}}); },
              ThrowsMessage<sdk::Error>(HasSubstr("/options/epochs_per_iteration must be an integer > 0, got 0")));
}

// The host side of a round: a real TorchScript model in a real PruningSession.
TEST_F(LotteryTicketTest, HostRewindsEveryParameterAndBufferAndRestartsTheOptimizer) {
  torch::jit::Module module = torch::jit::load(test::lenet_model().string());
  auto model = host::make_torchscript_model(module);
  host::CompressionConfig config = host::parse_compression_config(
      R"({"algorithm": "lottery_ticket", "options": {},
          "config_list": [{"sparsity": 0.8, "prune_iterations": 2, "op_types": ["default"]}]})",
      "<test>");
  host::PruningSession session(*model, registry_, config);
  std::vector<at::Tensor> initial;
  for (const at::Tensor& t : model->state_tensors()) {
    initial.push_back(t.detach().clone());
  }
  session.compress();
  session.update_epoch(0);
  auto params = model->parameters();
  torch::optim::SGD optimizer(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  // "Training": a loss with real gradients, two steps, so momentum buffers exist.
  for (int step = 0; step < 2; ++step) {
    optimizer.zero_grad();
    model->forward(at::ones({2, 1, 28, 28})).pow(2).sum().backward();
    session.optimizer_step(optimizer);
  }
  ASSERT_FALSE(model->parameters()[0].equal(initial[0])) << "training moved the weights";
  session.update_epoch(1);  // round 1: prune 55.3% on trained weights, rewind
  const auto masks = session.masks();
  const auto states = model->state_tensors();
  for (size_t i = 0; i < states.size(); ++i) {
    at::Tensor expected = initial[i];
    for (const auto& [name, m] : masks) {
      if (model->find_module(name)->weight->is_same(states[i])) {
        expected = initial[i] * m.weight;
      }
    }
    EXPECT_TRUE(states[i].equal(expected)) << "state tensor " << i << " not rewound";
  }
  for (const auto& [name, m] : masks) {
    const int64_t n = m.weight.numel();
    EXPECT_EQ(m.weight.eq(0).sum().item<int64_t>(),
              static_cast<int64_t>(static_cast<double>(n) * round_sparsity(0.8, 2, 1)))
        << name;
  }
  // The optimizer restarts: the next step's momentum buffer is the fresh gradient alone.
  optimizer.zero_grad();
  model->forward(at::ones({2, 1, 28, 28})).pow(2).sum().backward();
  const at::Tensor grad = params[0].grad().clone();
  session.optimizer_step(optimizer);
  auto& state = static_cast<torch::optim::SGDParamState&>(
      *optimizer.state().at(params[0].unsafeGetTensorImpl()));
  EXPECT_TRUE(state.momentum_buffer().equal(grad * masks[0].second.weight))
      << "momentum from before the rewind leaked into the new round";
}

}  // namespace
}  // namespace lithe::plugins::lottery_ticket
