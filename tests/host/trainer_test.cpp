#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "support/fashion_data.h"
#include "support/paths.h"
#include "support/registry.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::fashion_installed()) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
    train_ = test::fashion("train", 6000);
    test_ = test::fashion("test", 1000);
    options_.progress = false;
    options_.batch_size = 32;  // ~190 steps per epoch: enough to learn, fast enough for a test
    options_.lr = 0.05;
  }
  Dataset train_;
  Dataset test_;
  TrainOptions options_;
};

TEST_F(TrainerTest, OneEpochOnRealDataLearnsWellAboveChance) {
  auto model = load_torchscript_model(test::lenet_model());
  const EvalResult before = evaluate(*model, test_);
  const auto results = train(*model, train_, &test_, options_);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].test.samples, 1000);
  EXPECT_LT(before.accuracy, 0.3);
  EXPECT_GT(results[0].test.accuracy, 0.6);
  EXPECT_LT(results[0].test.loss, before.loss);
}

TEST_F(TrainerTest, SameSeedGivesIdenticalWeights) {
  std::vector<at::Tensor> weights;
  for (int run = 0; run < 2; ++run) {
    auto model = load_torchscript_model(test::lenet_model());
    train(*model, first_samples(train_, 640), nullptr, options_);
    weights.push_back(model->find_module("fc1")->weight->clone());
  }
  EXPECT_TRUE(weights[0].equal(weights[1]));
}

TEST_F(TrainerTest, FineTuningWhilePruningKeepsExactSparsity) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, test::level_registry(),
                         {"level", R"([{"sparsity": 0.8, "op_types": ["default"]}])", "{}", "t"});
  session.compress();
  options_.epochs = 2;
  const auto results = train(*model, train_, &test_, options_, &session);
  EXPECT_GT(results.back().test.accuracy, 0.5);
  for (const auto& [name, masks] : session.masks()) {
    const at::Tensor weight = *model->find_module(name)->weight;
    EXPECT_EQ(weight.eq(0).sum().item<int64_t>(),
              static_cast<int64_t>(static_cast<double>(weight.numel()) * 0.8))
        << name;
  }
}

TEST_F(TrainerTest, BadInputsFailBeforeAnyWork) {
  auto model = load_torchscript_model(test::lenet_model());
  const at::Tensor before = model->find_module("fc1")->weight->clone();
  TrainOptions zero_epochs = options_;
  zero_epochs.epochs = 0;
  EXPECT_THAT([&] { train(*model, train_, nullptr, zero_epochs); },
              ThrowsMessage<sdk::Error>(HasSubstr("epochs must be > 0, got 0")));
  Dataset wrong_shape;
  wrong_shape.images = torch::randn({4, 3, 32, 32});
  wrong_shape.labels = torch::zeros({4}, torch::kLong);
  wrong_shape.source = "cifar.pt";
  EXPECT_THAT([&] { train(*model, wrong_shape, nullptr, options_); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "dataset 'cifar.pt' has samples of shape [3, 32, 32], which the model does not "
                  "accept")));
  Dataset too_many_classes = first_samples(train_, 8);
  too_many_classes.labels = torch::full({8}, 12, torch::kLong);
  EXPECT_THAT([&] { train(*model, too_many_classes, nullptr, options_); },
              ThrowsMessage<sdk::Error>(HasSubstr("sample 0 has label 12; labels must be in [0, 10)")));
  EXPECT_TRUE(model->find_module("fc1")->weight->equal(before));
}

}  // namespace
}  // namespace lithe::host

namespace lithe::host {
namespace {

// Calibration never changes weights: a batch whose gradient is not finite (lr 0 · NaN = NaN)
// is refused before its optimizer step, naming the batch and the dataset.
TEST(CalibrateTest, NonFiniteGradientsAreRefusedBeforeTheyReachTheWeights) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, test::level_registry(),
                         {"level", R"([{"sparsity": 0.5, "op_types": ["default"]}])", "{}", "t"});
  session.compress();
  std::vector<at::Tensor> before;
  for (const at::Tensor& p : model->parameters()) {
    before.push_back(p.detach().clone());
  }
  Dataset data;
  data.images = torch::zeros({8, 1, 28, 28});
  data.images[5].fill_(std::numeric_limits<float>::quiet_NaN());  // in the second batch of 4
  data.labels = torch::zeros({8}, torch::kLong);
  data.source = "<nan batch>";
  model->train(true);
  EXPECT_THAT([&] { calibrate(*model, data, session, 2, 4); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "calibration batch 1 of '<nan batch>' gives a non-finite gradient")));
  EXPECT_TRUE(model->is_training()) << "the model's mode is restored after the error";
  const auto after = model->parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(after[i].equal(before[i])) << "parameter " << i << " changed";
  }
  EXPECT_THAT([&] { calibrate(*model, data, session, 3, 4); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "3 calibration batches asked for, but dataset '<nan batch>' holds only 2 "
                  "batches of 4 samples")));
  EXPECT_THAT([&] { calibrate(*model, data, session, 0, 4); },
              ThrowsMessage<sdk::Error>(HasSubstr("calibration batches must be > 0, got 0")));
}

}  // namespace
}  // namespace lithe::host
