#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/model/model.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "support/paths.h"
#include "support/registry.h"

namespace lithe::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Seen {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
};

TEST(ActivationCollectorTest, FiresForEveryCompressedLayerWithItsOutput) {
  auto model = load_torchscript_model(test::lenet_model());
  model->train(false);
  const at::Tensor input = torch::randn({2, 1, 28, 28});
  const at::Tensor plain = model->forward(input);
  PruningSession session(*model, test::level_registry(),
                         {"level", R"([{"sparsity": 0.0, "op_types": ["default"]}])", "{}", "t"});
  Seen seen;
  const int64_t id = session.add_activation_collector(
      [&](const sdk::LayerView& layer, const at::Tensor& output) {
        seen.names.push_back(layer.name());
        seen.shapes.push_back(output.sizes().vec());
      });
  EXPECT_EQ(id, 1);
  const at::Tensor observed = model->forward(input);
  EXPECT_TRUE(observed.equal(plain)) << "taps must not change the model's output";
  EXPECT_THAT(seen.names, ElementsAre("conv1", "conv2", "fc1", "fc2", "fc3"));
  EXPECT_EQ(seen.shapes[0], (std::vector<int64_t>{2, 6, 24, 24}));
  EXPECT_EQ(seen.shapes[2], (std::vector<int64_t>{2, 120}));
}

TEST(ActivationCollectorTest, RemovingTheLastCollectorRestoresTheGraph) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, test::level_registry(),
                         {"level", R"([{"sparsity": 0.0, "op_types": ["Linear"]}])", "{}", "t"});
  int calls = 0;
  const int64_t first = session.add_activation_collector([&](auto&, auto&) { ++calls; });
  const int64_t second = session.add_activation_collector([&](auto&, auto&) { ++calls; });
  EXPECT_EQ(second, first + 1);
  model->forward(torch::randn({1, 1, 28, 28}));
  EXPECT_EQ(calls, 6);  // 3 layers x 2 collectors

  // A model saved while taps are active contains none of them.
  const auto dir = test::scratch_dir("collectors_save");
  model->save(dir / "tapped.pt");
  EXPECT_EQ(file_bytes(dir / "tapped.pt").find("lithe"), std::string::npos);

  session.remove_activation_collector(first);
  model->forward(torch::randn({1, 1, 28, 28}));
  EXPECT_EQ(calls, 9);
  session.remove_activation_collector(second);
  model->forward(torch::randn({1, 1, 28, 28}));
  EXPECT_EQ(calls, 9);
  EXPECT_THAT([&] { session.remove_activation_collector(second); },
              ThrowsMessage<sdk::Error>(HasSubstr("no activation collector with id 2")));
}

TEST(ActivationCollectorTest, SharedClassTypesAreObservedPerInstance) {
  auto model = load_torchscript_model(test::shared_blocks_model());
  std::vector<std::string> names;
  std::vector<at::Tensor> outputs;
  auto record = [&](const std::string& name, const at::Tensor& output) {
    names.push_back(name);
    outputs.push_back(output.clone());
  };
  const at::Tensor input = torch::randn({3, 16});
  model->set_taps({"blocks.1.fc"}, record);
  model->forward(input);
  EXPECT_THAT(names, ElementsAre("blocks.1.fc"));  // blocks.0.fc shares the class type

  names.clear();
  outputs.clear();
  model->set_taps({"blocks.0.fc", "blocks.1.fc", "blocks.0"}, record);
  model->forward(input);
  EXPECT_THAT(names, ElementsAre("blocks.0.fc", "blocks.0", "blocks.1.fc"));
  EXPECT_FALSE(outputs[0].equal(outputs[2]));
  EXPECT_TRUE(outputs[1].equal(torch::relu(outputs[0])));

  names.clear();
  model->set_taps({}, {});
  model->forward(input);
  EXPECT_TRUE(names.empty());
}

TEST(ActivationCollectorTest, GradientsPassThroughTaps) {
  auto model = load_torchscript_model(test::lenet_model());
  model->train(true);
  const at::Tensor input = torch::randn({2, 1, 28, 28});
  const at::Tensor fc1_weight = *model->find_module("fc1")->weight;
  model->forward(input).pow(2).sum().backward();
  const at::Tensor plain_grad = fc1_weight.grad().clone();
  fc1_weight.grad().zero_();
  int calls = 0;
  model->set_taps({"conv1", "fc1", "fc2"}, [&](auto&, auto&) { ++calls; });
  model->forward(input).pow(2).sum().backward();
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(torch::allclose(fc1_weight.grad(), plain_grad, 1e-6, 1e-7));
  EXPECT_GT(plain_grad.abs().sum().item<double>(), 0.0);
}

TEST(ActivationCollectorTest, UnknownModuleIsRejected) {
  auto model = load_torchscript_model(test::lenet_model());
  EXPECT_THAT([&] { model->set_taps({"fc7"}, [](auto&, auto&) {}); },
              ThrowsMessage<sdk::Error>(HasSubstr("cannot observe module 'fc7'")));
}

}  // namespace
}  // namespace lithe::host

namespace lithe::host {
namespace {

// Evaluation and input probes must not count as statistics (APoZ/mean would otherwise learn
// from held-out data); the same holds for C++-frontend models.
TEST(ActivationCollectorTest, EvaluationAndInputChecksAreNotObserved) {
  Dataset data;
  data.images = torch::randn({10, 1, 28, 28});
  data.labels = torch::randint(0, 10, {10}, torch::kLong);
  data.source = "<random>";
  for (const bool torchscript : {true, false}) {
    std::unique_ptr<Model> model;
    torch::nn::Sequential seq(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 5)),
                              torch::nn::Flatten(), torch::nn::Linear(1152, 10));
    model = torchscript ? load_torchscript_model(test::lenet_model()) : make_nn_model(seq.ptr());
    PruningSession session(*model, test::level_registry(),
                           {"level", R"([{"sparsity": 0.0, "op_types": ["default"]}])", "{}", "t"});
    int calls = 0;
    session.add_activation_collector([&](auto&, auto&) { ++calls; });
    check_dataset_fits_model(*model, data);
    evaluate(*model, data, 4);
    EXPECT_EQ(calls, 0) << (torchscript ? "torchscript" : "nn");
    {
      const UnobservedForwards unobserved;
      const UnobservedForwards nested;
      model->forward(data.images);
    }
    EXPECT_EQ(calls, 0);
    model->forward(data.images);
    EXPECT_GT(calls, 0) << "a plain forward is observed again once the scopes ended";
  }
}

}  // namespace
}  // namespace lithe::host
