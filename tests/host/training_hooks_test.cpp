// SDK 1.7's training-time services, through a real PruningSession on the bundled LeNet and
// Fashion-MNIST: loss terms, before-optimizer-step callbacks, the host's fine-tuner and evaluator.
// A probe pruner (defined here, registered into a test registry) uses each service from attach.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/pruner.h"
#include "support/fashion_data.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// What the probe does in attach; set by each test before the session is made.
struct ProbePlan {
  std::function<void(sdk::CompressionContext&)> on_attach;
  int64_t update_epochs = 0;  // update_epoch calls the probe received
  int64_t steps = 0;          // step calls
};
ProbePlan& plan() {
  static ProbePlan p;
  return p;
}

class ProbePruner final : public sdk::Pruner {
 public:
  void validate_config(const sdk::Options& entry) const override {
    (void)entry.get_or<double>("sparsity", 0.0);
  }
  void attach(sdk::CompressionContext& context) override {
    if (plan().on_attach) {
      plan().on_attach(context);
    }
  }
  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    return sdk::Masks::keep_all(layer);
  }
  void update_epoch(int64_t) override { ++plan().update_epochs; }
  void step() override { ++plan().steps; }
};

PluginRegistry& probe_registry() {
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();
    r->add_pruner({"probe", "uses the SDK 1.7 services (test)"},
                  [](const sdk::Options&, const sdk::Registry&) {
                    return std::make_unique<ProbePruner>();
                  });
    return r;
  }();
  return *registry;
}

class TrainingHooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::fashion_installed()) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
    train_ = test::fashion("train", 640);
    test_ = test::fashion("test", 500);
    options_.progress = false;
    options_.batch_size = 64;  // 10 steps per epoch
    options_.lr = 0.05;
    plan() = ProbePlan();
    model_ = load_torchscript_model(test::lenet_model());
  }
  std::unique_ptr<PruningSession> session() {
    return std::make_unique<PruningSession>(
        *model_, probe_registry(),
        CompressionConfig{"probe", R"([{"op_types": ["Conv2d", "Linear"]}])", "{}", "t"});
  }
  at::Tensor fc1() { return *model_->find_module("fc1")->weight; }

  Dataset train_;
  Dataset test_;
  TrainOptions options_;
  std::unique_ptr<Model> model_;
};

TEST_F(TrainingHooksTest, LossTermGradientTrainsTheWeights) {
  const double before = fc1().norm().item<double>();
  // Weight decay through a loss term: 5 · ||fc1||² pulls fc1 toward zero.
  plan().on_attach = [this](sdk::CompressionContext& context) {
    const at::Tensor weight = fc1();
    context.add_loss_term([weight] { return weight.pow(2).sum() * 5.0; });
  };
  auto with_term = session();
  with_term->compress();
  options_.weight_decay = 0;
  train(*model_, train_, nullptr, options_, with_term.get());
  const double shrunk = fc1().norm().item<double>();

  // The same training without the term barely moves the norm.
  plan().on_attach = nullptr;
  model_ = load_torchscript_model(test::lenet_model());
  auto without = session();
  without->compress();
  train(*model_, train_, nullptr, options_, without.get());
  const double plain = fc1().norm().item<double>();
  EXPECT_LT(shrunk, 0.2 * before);
  EXPECT_GT(plain, 0.8 * before);
}

TEST_F(TrainingHooksTest, LossTermMustBeAScalarAndErrorsNameThePlugin) {
  plan().on_attach = [this](sdk::CompressionContext& context) {
    const at::Tensor weight = fc1();
    context.add_loss_term([weight] { return weight.abs(); });  // not reduced
  };
  auto s = session();
  s->compress();
  EXPECT_THAT([&] { train(*model_, train_, nullptr, options_, s.get()); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("pruner 'probe' (loss term) 1"),
                                              HasSubstr("defined floating scalar tensor"),
                                              HasSubstr("[120, 256]"))));
}

TEST_F(TrainingHooksTest, BeforeStepCallbackSeesGradientsAndWeightsBeforeTheStep) {
  int64_t calls = 0;
  at::Tensor last_after_step;  // fc1 as the previous step left it
  plan().on_attach = [&](sdk::CompressionContext& context) {
    context.add_before_optimizer_step_callback([&] {
      const at::Tensor weight = fc1();
      ASSERT_TRUE(weight.grad().defined());
      EXPECT_GT(weight.grad().abs().sum().item<double>(), 0.0);
      if (last_after_step.defined()) {
        EXPECT_TRUE(weight.equal(last_after_step));  // the optimizer has not stepped yet
      }
      ++calls;
    });
    context.add_optimizer_step_callback([&] { last_after_step = fc1().detach().clone(); });
  };
  auto s = session();
  s->compress();
  calibrate(*model_, train_, *s, 3, options_.batch_size);
  EXPECT_EQ(calls, 0);  // calibration passes do not train
  train(*model_, train_, nullptr, options_, s.get());
  EXPECT_EQ(calls, 10);
}

TEST_F(TrainingHooksTest, FineTuneFromAttachTrainsWithoutThePrunersOwnEpochs) {
  int64_t tuned_epochs = 0;
  double accuracy_before = -1;
  double accuracy_after = -1;
  at::Tensor weight_before;
  plan().on_attach = [&](sdk::CompressionContext& context) {
    ASSERT_TRUE(context.can_fine_tune());
    ASSERT_TRUE(context.can_evaluate());
    weight_before = fc1().detach().clone();
    accuracy_before = context.evaluate();
    context.fine_tune(2);
    accuracy_after = context.evaluate();
  };
  auto s = session();
  s->set_fine_tuner([&](int64_t epochs) {
    tuned_epochs += epochs;
    TrainOptions tune = options_;
    tune.epochs = epochs;
    train(*model_, train_, nullptr, tune, s.get());
  });
  s->set_evaluator([&] { return evaluate(*model_, test_).accuracy; });
  s->compress();
  EXPECT_EQ(tuned_epochs, 2);
  EXPECT_FALSE(fc1().equal(weight_before));
  EXPECT_LT(accuracy_before, 0.3);  // random weights
  EXPECT_GT(accuracy_after, accuracy_before + 0.2);
  EXPECT_EQ(plan().update_epochs, 0);  // the fine-tune's epochs are not the pruner's
  EXPECT_EQ(plan().steps, 0);
  // Afterwards, a normal training drives the pruner again.
  train(*model_, train_, nullptr, options_, s.get());
  EXPECT_EQ(plan().update_epochs, 1);
  EXPECT_EQ(plan().steps, 10);
}

TEST_F(TrainingHooksTest, WithoutFineTunerOrEvaluatorTheCallsSayWhatWouldProvideThem) {
  plan().on_attach = [](sdk::CompressionContext& context) {
    EXPECT_FALSE(context.can_fine_tune());
    context.fine_tune(1);
  };
  EXPECT_THAT([&] { session()->compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("pruner 'probe'"),
                                              HasSubstr("no fine-tuner"), HasSubstr("--data"),
                                              HasSubstr("set_fine_tuner"))));
  plan().on_attach = [](sdk::CompressionContext& context) {
    EXPECT_FALSE(context.can_evaluate());
    (void)context.evaluate();
  };
  EXPECT_THAT([&] { session()->compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("no evaluator"),
                                              HasSubstr("set_evaluator"))));
}

TEST_F(TrainingHooksTest, FineTuneRefusesNonPositiveEpochsAndNesting) {
  auto s = session();
  s->set_fine_tuner([&](int64_t) { s->fine_tune(1); });
  plan().on_attach = [](sdk::CompressionContext& context) { context.fine_tune(0); };
  EXPECT_THAT([&] { s->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("epochs > 0, got 0")));
  auto nested = session();
  nested->set_fine_tuner([&](int64_t) { nested->fine_tune(1); });
  plan().on_attach = [](sdk::CompressionContext& context) { context.fine_tune(1); };
  EXPECT_THAT([&] { nested->compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("while a fine_tune() is running")));
}

}  // namespace
}  // namespace lithe::host
