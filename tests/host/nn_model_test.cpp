#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "support/registry.h"

namespace lithe::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

torch::nn::Sequential make_net() {
  torch::manual_seed(5);
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
                               torch::nn::ReLU(), torch::nn::Flatten(),
                               torch::nn::Linear(4 * 6 * 6, 10));
}

struct Net : torch::nn::Module {
  Net() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)));
    head = register_module("head", torch::nn::Sequential(torch::nn::Flatten(),
                                                          torch::nn::Linear(2 * 6 * 6, 3)));
  }
  at::Tensor forward(const at::Tensor& x) { return head->forward(torch::relu(conv->forward(x))); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Sequential head{nullptr};
};

TEST(NnModelTest, NamesAndOpTypesFollowNni) {
  auto model = make_nn_model(make_net().ptr());
  std::vector<std::string> names;
  std::vector<std::string> types;
  for (const ModuleRecord& m : model->modules()) {
    names.push_back(m.name);
    types.push_back(m.op_type);
  }
  EXPECT_THAT(names, ElementsAre("0", "1", "2", "3"));
  EXPECT_THAT(types, ElementsAre("Conv2d", "ReLU", "Flatten", "Linear"));
  EXPECT_TRUE(model->modules()[0].weight.has_value());
  EXPECT_FALSE(model->modules()[1].weight.has_value());
}

// nn::MultiheadAttention holds q, k and v in one parameter, in_proj_weight: that is the weight
// algorithms see (and mask in place), in_proj_bias its bias.
TEST(NnModelTest, MultiheadAttentionShowsItsFusedProjectionAsItsWeight) {
  struct Attention : torch::nn::Module {
    Attention() { attn = register_module("attn", torch::nn::MultiheadAttention(8, 2)); }
    torch::nn::MultiheadAttention attn{nullptr};
  };
  auto net = std::make_shared<Attention>();
  auto model = make_nn_model(net, [net](const at::Tensor& x) {
    return std::get<0>(net->attn->forward(x, x, x));
  });
  const ModuleRecord& record = model->modules().at(0);
  EXPECT_EQ(record.name, "attn");
  EXPECT_EQ(record.op_type, "MultiheadAttention");
  ASSERT_TRUE(record.weight.has_value());
  EXPECT_TRUE(record.weight->is_same(net->attn->in_proj_weight));
  ASSERT_TRUE(record.bias.has_value());
  EXPECT_TRUE(record.bias->is_same(net->attn->in_proj_bias));
  PruningSession session(*model, test::level_registry(),
                         {"level", R"([{"sparsity": 0.5, "op_names": ["attn"]}])", "{}", "t"});
  session.compress();
  EXPECT_EQ(net->attn->in_proj_weight.eq(0).sum().item<int64_t>(), 24 * 8 / 2);
}

TEST(NnModelTest, LevelPruningKeepsWeightsZeroWhileTrainingWithAdam) {
  torch::nn::Sequential net = make_net();
  auto model = make_nn_model(net.ptr());
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-2));
  PruningSession session(*model, test::level_registry(),
                         {"level", R"([{"sparsity": 0.75, "op_types": ["default"]}])", "{}", "t"});
  session.compress();
  for (int i = 0; i < 10; ++i) {
    adam.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(torch::randn({4, 1, 8, 8})),
                                         torch::randint(0, 10, {4}))
        .backward();
    session.optimizer_step(adam);
  }
  for (const auto& [name, masks] : session.masks()) {
    const at::Tensor weight = *model->find_module(name)->weight;
    EXPECT_EQ(weight.eq(0).sum().item<int64_t>(),
              static_cast<int64_t>(static_cast<double>(weight.numel()) * 0.75))
        << name;
  }
}

TEST(NnModelTest, CollectorsWorkInsideSequentialAndRemoveCleanly) {
  torch::nn::Sequential net = make_net();
  auto model = make_nn_model(net.ptr());
  const at::Tensor input = torch::randn({2, 1, 8, 8});
  const at::Tensor plain = model->forward(input);
  std::vector<std::string> seen;
  model->set_taps({"0", "3"}, [&](const std::string& name, const at::Tensor&) {
    seen.push_back(name);
  });
  EXPECT_TRUE(model->forward(input).equal(plain));
  EXPECT_THAT(seen, ElementsAre("0", "3"));
  EXPECT_EQ(net->named_modules().size(), 5u) << "taps must not register modules";
  model->set_taps({}, {});
  seen.clear();
  model->forward(input);
  EXPECT_TRUE(seen.empty());
}

TEST(NnModelTest, CollectorsOutsideSequentialAreUnsupported) {
  auto net = std::make_shared<Net>();
  auto model = make_nn_model(net, [net](const at::Tensor& x) { return net->forward(x); });
  EXPECT_THAT([&] { model->set_taps({"conv"}, [](auto&, auto&) {}); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "module 'conv' cannot be observed: activation collectors on C++-frontend "
                  "models need the module to sit inside a torch::nn::Sequential")));
  std::vector<std::string> seen;
  model->set_taps({"head.1"}, [&](const std::string& name, const at::Tensor&) {
    seen.push_back(name);
  });
  model->forward(torch::randn({1, 1, 8, 8}));
  EXPECT_THAT(seen, ElementsAre("head.1"));
}

TEST(NnModelTest, NonSequentialWithoutForwardFunctionIsUnsupported) {
  auto model = make_nn_model(std::make_shared<Net>());
  EXPECT_THAT([&] { model->forward(torch::randn({1, 1, 8, 8})); },
              ThrowsMessage<sdk::Error>(HasSubstr("pass a forward function to make_nn_model")));
}

}  // namespace
}  // namespace lithe::host
