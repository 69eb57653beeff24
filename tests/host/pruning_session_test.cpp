#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "lithe/host/pipeline/pruned_cost_meter.h"
#include "lithe/host/session/config_list.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "plugins/filter_norm/filter_norm.h"
#include "support/model_snapshot.h"
#include "support/paths.h"
#include "support/registry.h"
#include "support/sped_up_flops.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

CompressionConfig level_config(const std::string& config_list,
                               const std::string& options = "{}") {
  return make_compression_config("level", config_list, options, "<test>");
}

TEST(PruningSessionTest, CompressPrunesExactlyKPerLayerAndZeroesTheWeights) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, test::level_registry(),
                         level_config(R"([{"sparsity": 0.82, "op_types": ["default"]}])"));
  session.compress();
  for (const auto& [name, masks] : session.masks()) {
    const int64_t numel = masks.weight.numel();
    const auto k = static_cast<int64_t>(static_cast<double>(numel) * 0.82);
    EXPECT_EQ(masks.weight.eq(0).sum().item<int64_t>(), k) << name;
    const at::Tensor weight = *model->find_module(name)->weight;
    EXPECT_TRUE(weight.masked_select(masks.weight.eq(0)).eq(0).all().item<bool>()) << name;
    ASSERT_TRUE(masks.bias.has_value());
    EXPECT_TRUE(masks.bias->eq(1).all().item<bool>()) << "level never prunes biases: " << name;
  }
  EXPECT_EQ(session.report().size(), 5u);
  EXPECT_DOUBLE_EQ(session.report()[0].sparsity_target, 0.82);
}

// SDK 1.10: measure_cost is the cost meter's; without one a plugin's call says what provides it.
// The meter counts the model as the session found it (NNI's LeNet figures) and the sped-up one.
// l1_filter removes half of conv1's filters (weights and biases), which speedup takes out.
TEST(PruningSessionTest, MeasureCostNeedsAMeterAndCountsTheSpedUpModel) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(
      *model, test::registry_of({&plugins::filter_norm::register_algorithms}),
      make_compression_config("l1_filter", R"([{"sparsity": 0.5, "op_names": ["conv1"]}])",
                              "{}", "<test>"));
  EXPECT_FALSE(session.can_measure_cost());
  EXPECT_THAT([&] { (void)session.measure_cost(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("pruner 'l1_filter'"),
                                              HasSubstr("session.set_cost_meter"))));
  session.set_cost_meter(pruned_cost_meter(load_torchscript_module(test::lenet_model()),
                                           session, {1, 1, 28, 28}));
  ASSERT_TRUE(session.can_measure_cost());
  const sdk::ModelCost before = session.measure_cost();
  EXPECT_EQ(before.dense_flops, 281640);  // `lithe flops` and NNI's count_flops_params
  EXPECT_EQ(before.dense_params, 44426);
  EXPECT_EQ(before.flops, before.dense_flops);  // no mask yet
  session.compress();
  const sdk::ModelCost after = session.measure_cost();
  EXPECT_EQ(after.dense_flops, 281640);
  EXPECT_LT(after.flops, after.dense_flops);
  EXPECT_LT(after.params, after.dense_params);
  // The same count as an independent speedup of the session's masks.
  EXPECT_DOUBLE_EQ(static_cast<double>(after.flops) / static_cast<double>(after.dense_flops),
                   test::sped_up_flops_share(load_torchscript_module(test::lenet_model()),
                                             session.masks(), {1, 1, 28, 28}));
}

TEST(PruningSessionTest, OneParsedConfigServesSeveralSessionsEachCheckingItsOwnKeys) {
  const CompressionConfig config = parse_compression_config(
      R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]},
                                                {"sparsity": 0.7, "op_types": ["Linear"]}]})",
      "level.json");
  ASSERT_EQ(config.config_list.size(), 2u);
  std::vector<std::pair<std::string, sdk::Masks>> first;
  for (int run = 0; run < 2; ++run) {
    auto model = load_torchscript_model(test::lenet_model());
    PruningSession session(*model, test::level_registry(), config);
    session.compress();
    if (run == 0) {
      first = session.masks();
      continue;
    }
    ASSERT_EQ(session.masks().size(), first.size());
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_TRUE(session.masks()[i].second.weight.equal(first[i].second.weight)) << first[i].first;
    }
  }
  // Every session checks the keys itself: a config whose first use failed fails the same way.
  CompressionConfig misspelled = parse_compression_config(
      R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "sparsty": 1, "op_types": ["Conv2d"]}]})",
      "level.json");
  auto model = load_torchscript_model(test::lenet_model());
  for (int run = 0; run < 2; ++run) {
    EXPECT_THAT([&] { PruningSession(*model, test::level_registry(), misspelled); },
                ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/sparsty: unknown key")));
  }
}

TEST(PruningSessionTest, ConfigBuiltFromJsonTextAsIn13StillWorks) {
  // SDK/host 1.3 embedders filled the JSON text fields by hand; 1.4 parses them once in the
  // session (deprecated, removed in 2.0). Same masks as the parsed form.
  CompressionConfig text_config;
  text_config.algorithm = "level";
  text_config.config_list_json = R"([{"sparsity": 0.6, "op_types": ["default"]}])";
  text_config.options_json = "{}";
  auto text_model = load_torchscript_model(test::lenet_model());
  PruningSession text_session(*text_model, test::level_registry(), text_config);
  text_session.compress();
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, test::level_registry(),
                         level_config(R"([{"sparsity": 0.6, "op_types": ["default"]}])"));
  session.compress();
  ASSERT_EQ(text_session.masks().size(), 5u);
  for (size_t i = 0; i < session.masks().size(); ++i) {
    EXPECT_TRUE(text_session.masks()[i].second.weight.equal(session.masks()[i].second.weight));
  }
  CompressionConfig empty;
  empty.algorithm = "level";
  EXPECT_THAT([&] { PruningSession(*model, test::level_registry(), empty); },
              ThrowsMessage<sdk::Error>(HasSubstr("the config has no config_list")));
}

TEST(PruningSessionTest, ConfigListShapeIsCheckedWhenTheFileIsParsed) {
  // Rules that need no model fail at parse time, naming the file and the JSON path.
  const auto parse = [](const std::string& list) {
    return parse_compression_config(R"({"algorithm": "level", "config_list": )" + list + "}",
                                    "cfg.json");
  };
  EXPECT_THAT([&] { parse(R"([{"sparsity": 0.5}])"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0 must contain op_types or op_names")));
  EXPECT_THAT([&] { parse("[]"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list is empty")));
  EXPECT_THAT([&] { parse(R"([{"op_types": "Conv2d"}])"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/op_types must be a list of strings")));
  EXPECT_THAT([&] { parse(R"([{"op_types": ["Conv2d"], "exclude": "yes"}])"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/exclude must be true or false")));
  const CompressionConfig config = parse(R"([{"op_types": ["default"], "sparsity": 0.5}])");
  ASSERT_EQ(config.config_list.size(), 1u);
  EXPECT_TRUE(config.config_list[0].op_types_default);
  EXPECT_EQ(config.config_list[0].op_types, default_op_types());
  EXPECT_EQ(config.options.path(), "/options");
}

TEST(PruningSessionTest, AnOptimizerStepOutsideTheSessionIsReportedNotSilent) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, test::level_registry(),
                         level_config(R"([{"sparsity": 0.5, "op_types": ["default"]}])"));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  const at::Tensor input = torch::randn({4, 1, 28, 28});
  auto train_step = [&] {
    optimizer.zero_grad();
    model->forward(input).sum().backward();
  };
  // Before compress() the session has not touched the weights: plain training is fine.
  train_step();
  optimizer.step();
  session.step();
  session.compress();
  // The contract: optimizer_step, then step.
  train_step();
  session.optimizer_step(optimizer);
  session.step();
  session.update_epoch(1);
  // optimizer.step() in its place is reported at the next step() and update_epoch().
  train_step();
  optimizer.step();
  EXPECT_THAT([&] { session.step(); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("pruner 'level': session.step() found the weights of layer 'conv1' "
                            "changed since the session last saw them"),
                  HasSubstr("Call session.optimizer_step(optimizer) instead of optimizer.step()"))));
  EXPECT_THAT([&] { session.update_epoch(2); },
              ThrowsMessage<sdk::Error>(HasSubstr("session.update_epoch() found the weights")));
  // Weights changed on purpose are accepted when the session is told so, or once the masks
  // are applied again.
  session.accept_weight_changes();
  session.step();
  train_step();
  optimizer.step();
  session.apply_masks();
  session.step();
  session.update_epoch(2);
}

// A test algorithm: follows the epoch (SDK 1.4 require_epoch_updates) and, when `starving`,
// registers an end-of-data callback that reports a layer still waiting for data.
class EpochFollowingPruner final : public sdk::Pruner {
 public:
  explicit EpochFollowingPruner(bool starving) : starving_(starving) {}
  void validate_config(const sdk::Options& entry) const override {
    (void)entry.get_or<double>("sparsity", 0.0);
  }
  void attach(sdk::CompressionContext& context) override {
    context.require_epoch_updates();
    if (starving_) {
      const int64_t id = context.add_end_of_data_callback([] {
        LITHE_CHECK(false, sdk::Errc::kInvalidConfig,
                    "layer 'conv1': needs 4 batches, the data ended after 2");
      });
      EXPECT_EQ(id, 1);
    }
  }
  std::optional<sdk::Masks> calc_mask(sdk::LayerView&) override { return std::nullopt; }

 private:
  bool starving_;
};

PluginRegistry& epoch_registry() {
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();
    r->set_current_plugin("test_epochs", "");
    r->add_pruner({"epochal", "follows the epoch"}, [](const sdk::Options&, const sdk::Registry&) {
      return std::make_unique<EpochFollowingPruner>(false);
    });
    r->add_pruner({"starving", "never gets enough data"},
                  [](const sdk::Options&, const sdk::Registry&) {
                    return std::make_unique<EpochFollowingPruner>(true);
                  });
    r->set_current_plugin("", "");
    return r;
  }();
  return *registry;
}

TEST(PruningSessionTest, AScheduleWhoseUpdateEpochWasNeverCalledFailsAtItsFirstOptimizerStep) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(
      *model, epoch_registry(),
      make_compression_config("epochal", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])"));
  session.compress();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  // A calibration pass is not training: no epoch is needed yet.
  session.set_calibrating(true);
  session.optimizer_step(optimizer);
  session.set_calibrating(false);
  EXPECT_THAT([&] { session.optimizer_step(optimizer); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("pruner 'epochal' follows the epoch, but optimizer_step() came "
                            "before any update_epoch()"),
                  HasSubstr("call session.update_epoch(epoch) at the start of every epoch"))));
  session.update_epoch(0);
  session.optimizer_step(optimizer);
  session.step();
}

TEST(PruningSessionTest, EndOfDataRunsThePluginsChecksNamingThePlugin) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession starving(
      *model, epoch_registry(),
      make_compression_config("starving", R"([{"sparsity": 0.5, "op_types": ["Conv2d"]}])"));
  starving.end_of_data();  // before compress() nothing is registered: nothing to check
  starving.compress();
  EXPECT_THAT([&] { starving.end_of_data(); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "pruner 'starving' (end-of-data callback): layer 'conv1': needs 4 batches, "
                  "the data ended after 2")));
  // An algorithm that registered nothing has nothing to say.
  auto other = load_torchscript_model(test::lenet_model());
  PruningSession fed(*other, test::level_registry(),
                     level_config(R"([{"sparsity": 0.5, "op_types": ["default"]}])"));
  fed.compress();
  fed.end_of_data();
  EXPECT_THAT([&] { fed.remove_end_of_data_callback(7); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "remove_end_of_data_callback: no end-of-data callback with id 7")));
}

TEST(PruningSessionTest, UnknownAlgorithmListsTheKnownOnes) {
  auto model = load_torchscript_model(test::lenet_model());
  CompressionConfig config = level_config(R"([{"sparsity": 0.5, "op_types": ["default"]}])");
  config.algorithm = "levle";
  EXPECT_THAT([&] { PruningSession(*model, test::level_registry(), config); },
              ThrowsMessage<sdk::Error>(HasSubstr("unknown pruner 'levle'; known pruners: level")));
}

TEST(PruningSessionTest, MisspelledConfigKeyIsRejectedInsteadOfIgnored) {
  auto model = load_torchscript_model(test::lenet_model());
  EXPECT_THAT(
      [&] {
        PruningSession(*model, test::level_registry(),
                       level_config(R"([{"sparsity": 0.5, "sparsty": 0.9, "op_types": ["default"]}])"));
      },
      ThrowsMessage<sdk::Error>(AllOf(
          HasSubstr("/config_list/0/sparsty: unknown key for pruner 'level'"),
          // level declares its keys (SDK 1.4): the message says what is accepted.
          HasSubstr("it accepts sparsity, total_sparsity, max_sparsity_per_layer, op_types, "
                    "op_names, exclude in each entry "
                    "(`lithe plugins --describe level`)"))));
}

TEST(PruningSessionTest, UnknownOptionIsRejectedWithItsPath) {
  auto model = load_torchscript_model(test::lenet_model());
  EXPECT_THAT(
      [&] {
        PruningSession(*model, test::level_registry(),
                       level_config(R"([{"sparsity": 0.5, "op_types": ["default"]}])",
                                    R"({"dependency_aware": true})"));
      },
      ThrowsMessage<sdk::Error>(AllOf(HasSubstr("/options/dependency_aware: unknown key"),
                                      HasSubstr("it accepts no keys in \"options\""))));
}

TEST(PruningSessionTest, DeclaredRulesAreCheckedBeforeTheAlgorithmSeesTheEntry) {
  auto model = load_torchscript_model(test::lenet_model());
  EXPECT_THAT(
      [&] {
        PruningSession(*model, test::level_registry(),
                       level_config(R"([{"sparsity": 0.5, "op_types": ["Conv2d"]},
                                        {"sparsity": 1.25, "op_types": ["Linear"]}])"));
      },
      ThrowsMessage<sdk::Error>(AllOf(
          HasSubstr("/config_list/1/sparsity must be a number in [0, 1), got 1.25"),
          HasSubstr("(sparsity: fraction of each selected layer's weights (or filters) to "
                    "prune)"))));
}

TEST(PruningSessionTest, BadSparsityFailsBeforeTouchingTheModel) {
  auto model = load_torchscript_model(test::lenet_model());
  const auto before = test::snapshot_weights(*model);
  EXPECT_THAT(
      [&] {
        PruningSession(*model, test::level_registry(),
                       level_config(R"([{"sparsity": 0.5, "op_types": ["default"]},
                                        {"sparsity": 1.5, "op_names": ["fc1"]}])"));
      },
      ThrowsMessage<sdk::Error>(HasSubstr(
          "pruner 'level': /config_list/1/sparsity must be a number in [0, 1), got 1.5")));
  for (const auto& [name, weight] : test::snapshot_weights(*model)) {
    EXPECT_TRUE(weight.equal(before.at(name))) << name;
  }
}

TEST(PruningSessionTest, ConfigThatSelectsNothingIsAnError) {
  auto model = load_torchscript_model(test::lenet_model());
  EXPECT_THAT(
      [&] {
        PruningSession(*model, test::level_registry(),
                       level_config(R"([{"sparsity": 0.5, "op_types": ["BatchNorm2d"]}])"));
      },
      ThrowsMessage<sdk::Error>(HasSubstr("/config_list selects no layer of the model")));
}

// Pruning in the middle of training, with optimizer state already built up: the pruned
// weights must stay exactly zero, while training still changes the kept ones.
void expect_pruned_weights_stay_zero(torch::optim::Optimizer& optimizer, Model& model) {
  torch::manual_seed(3);
  model.train(true);
  auto train_step = [&] {
    optimizer.zero_grad();
    const at::Tensor input = torch::randn({8, 1, 28, 28});
    const at::Tensor target = torch::randint(0, 10, {8});
    torch::nn::functional::cross_entropy(model.forward(input), target).backward();
  };
  for (int i = 0; i < 3; ++i) {  // momentum / Adam moments exist before pruning
    train_step();
    optimizer.step();
  }
  PruningSession session(model, test::level_registry(),
                         level_config(R"([{"sparsity": 0.6, "op_types": ["default"]}])"));
  session.compress();
  const auto pruned_at_start = test::snapshot_weights(model);
  for (int i = 0; i < 15; ++i) {
    train_step();
    session.optimizer_step(optimizer);
    for (const auto& [name, masks] : session.masks()) {
      const at::Tensor weight = *model.find_module(name)->weight;
      ASSERT_TRUE(weight.masked_select(masks.weight.eq(0)).eq(0).all().item<bool>())
          << name << " after step " << i;
    }
  }
  for (const auto& [name, masks] : session.masks()) {
    const at::Tensor weight = *model.find_module(name)->weight;
    EXPECT_FALSE(weight.equal(pruned_at_start.at(name))) << "training did not change " << name;
    EXPECT_EQ(masks.weight.eq(0).sum().item<int64_t>(),
              static_cast<int64_t>(static_cast<double>(masks.weight.numel()) * 0.6));
  }
}

TEST(PruningSessionTest, PrunedWeightsStayZeroUnderSgdWithMomentumAndWeightDecay) {
  auto model = load_torchscript_model(test::lenet_model());
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(5e-4));
  expect_pruned_weights_stay_zero(sgd, *model);
}

TEST(PruningSessionTest, PrunedWeightsStayZeroUnderAdam) {
  auto model = load_torchscript_model(test::lenet_model());
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3).weight_decay(1e-4));
  expect_pruned_weights_stay_zero(adam, *model);
}

TEST(PruningSessionTest, GradientsOfPrunedWeightsAreMasked) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, test::level_registry(),
                         level_config(R"([{"sparsity": 0.5, "op_types": ["Linear"]}])"));
  session.compress();
  model->train(true);
  model->forward(torch::randn({4, 1, 28, 28})).sum().backward();
  for (const auto& [name, masks] : session.masks()) {
    const at::Tensor grad = model->find_module(name)->weight->grad();
    ASSERT_TRUE(grad.defined()) << name;
    EXPECT_TRUE(grad.masked_select(masks.weight.eq(0)).eq(0).all().item<bool>()) << name;
    EXPECT_TRUE(grad.masked_select(masks.weight.ne(0)).ne(0).any().item<bool>()) << name;
  }
}

// A pruner that records the calls the host makes, to check the forwarding contract.
class RecordingPruner final : public sdk::Pruner {
 public:
  explicit RecordingPruner(std::vector<std::string>* log) : log_(log) {}
  void validate_config(const sdk::Options& entry) const override {
    (void)entry.require<double>("sparsity");
  }
  void attach(sdk::CompressionContext& context) override {
    log_->push_back("attach " + std::to_string(context.layers().size()));
  }
  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    log_->push_back("calc_mask " + layer.name());
    return std::nullopt;
  }
  void update_epoch(int64_t epoch) override { log_->push_back("epoch " + std::to_string(epoch)); }
  void step() override { log_->push_back("step"); }
  void after_optimizer_step() override { log_->push_back("after_optimizer_step"); }

 private:
  std::vector<std::string>* log_;
};

TEST(PruningSessionTest, ForwardsTheTrainingHooksInNniOrder) {
  std::vector<std::string> log;
  PluginRegistry registry;
  registry.add_pruner({"recording", "test"}, [&log](const sdk::Options&, const sdk::Registry&) {
    return std::make_unique<RecordingPruner>(&log);
  });
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, registry,
                         {"recording", R"([{"sparsity": 0.1, "op_names": ["fc1", "fc3"]}])", "{}", "t"});
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
  session.update_epoch(0);
  session.optimizer_step(sgd);
  session.step();
  EXPECT_EQ(log, (std::vector<std::string>{"epoch 0", "attach 2", "calc_mask fc1",
                                           "calc_mask fc3", "after_optimizer_step", "step"}));
}

}  // namespace
}  // namespace lithe::host

namespace lithe::host {
namespace {

// A pruner that misbehaves on purpose: calls back into the session from calc_mask, or throws
// from attach the first time.
class MisbehavingPruner final : public sdk::Pruner {
 public:
  enum class Mode { kReenterFromCalcMask, kAttachThrowsOnce, kReturnsSaliencies };
  explicit MisbehavingPruner(Mode mode) : mode_(mode) {}
  void validate_config(const sdk::Options& entry) const override { entry.mark_read("sparsity"); }
  void attach(sdk::CompressionContext& context) override {
    context_ = &context;
    ++attaches;
    if (mode_ == Mode::kAttachThrowsOnce && attaches == 1) {
      context.add_activation_collector([](auto&, auto&) { ++observed; });
      throw sdk::Error(sdk::Errc::kUnsupported, "no graph here");
    }
  }
  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    if (mode_ == Mode::kReenterFromCalcMask) {
      context_->update_masks_now();
    }
    if (mode_ == Mode::kReturnsSaliencies) {
      // The SNIP bug of the embedders' issue: |w| normalised as the "mask".
      const at::Tensor w = layer.weight().detach().abs();
      return sdk::Masks{w / w.sum(), std::nullopt};
    }
    return std::nullopt;
  }
  static inline int attaches = 0;
  static inline int observed = 0;  // forwards seen by a collector of a failed attach

 private:
  Mode mode_;
  sdk::CompressionContext* context_ = nullptr;
};

PluginRegistry& misbehaving_registry() {
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();
    r->add_pruner({"reenter", "test"}, [](const sdk::Options&, const sdk::Registry&) {
      return std::make_unique<MisbehavingPruner>(MisbehavingPruner::Mode::kReenterFromCalcMask);
    });
    r->add_pruner({"attach_throws", "test"}, [](const sdk::Options&, const sdk::Registry&) {
      return std::make_unique<MisbehavingPruner>(MisbehavingPruner::Mode::kAttachThrowsOnce);
    });
    r->add_pruner({"saliencies", "test"}, [](const sdk::Options&, const sdk::Registry&) {
      return std::make_unique<MisbehavingPruner>(MisbehavingPruner::Mode::kReturnsSaliencies);
    });
    return r;
  }();
  return *registry;
}

TEST(PruningSessionTest, ANonBinaryMaskFromAPluginFailsNamingItAndTheLayerWeightsUntouched) {
  auto model = load_torchscript_model(test::lenet_model());
  const auto before = test::snapshot_weights(*model);
  PruningSession session(*model, misbehaving_registry(),
                         make_compression_config(
                             "saliencies", R"([{"sparsity": 0.5, "op_types": ["default"]}])"));
  EXPECT_THAT([&] { session.compress(); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("pruner 'saliencies' on layer 'conv1'"),
                  HasSubstr("the weight mask must hold only 0 and 1"),
                  HasSubstr("150 of 150 entries are other values"),
                  HasSubstr("bug in the algorithm"))));
  for (const auto& [name, weight] : test::snapshot_weights(*model)) {
    EXPECT_TRUE(weight.equal(before.at(name))) << name;
  }
}

TEST(PruningSessionTest, UpdateMasksNowFromCalcMaskIsRefusedNotRecursed) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, misbehaving_registry(),
                         {"reenter", R"([{"sparsity": 0.5, "op_types": ["default"]}])", "{}", "t"});
  EXPECT_THAT([&] { session.compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("pruner 'reenter'"),
                                              HasSubstr("would recurse"))));
}

TEST(PruningSessionTest, AFailedAttachIsNeverRetried) {
  MisbehavingPruner::attaches = 0;
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, misbehaving_registry(),
                         {"attach_throws", R"([{"sparsity": 0.5, "op_types": ["default"]}])",
                          "{}", "t"});
  EXPECT_THAT([&] { session.compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("pruner 'attach_throws': no graph here")));
  EXPECT_THAT([&] { session.update_masks(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("cannot continue"),
                                              HasSubstr("no graph here"))));
  EXPECT_EQ(MisbehavingPruner::attaches, 1) << "a second attach could register hooks twice";
  MisbehavingPruner::observed = 0;
  model->forward(torch::ones({1, 1, 28, 28}));
  EXPECT_EQ(MisbehavingPruner::observed, 0) << "the failed attach's collector was removed";
}

}  // namespace
}  // namespace lithe::host

namespace lithe::host {
namespace {

TEST(PruningSessionTest, ContextCallbackAndStateErrorsNameTheIdOrHandle) {
  auto model = load_torchscript_model(test::lenet_model());
  PruningSession session(*model, test::level_registry(),
                         level_config(R"([{"sparsity": 0.5, "op_types": ["default"]}])"));
  EXPECT_THAT([&] { session.add_optimizer_step_callback({}); },
              ThrowsMessage<sdk::Error>(HasSubstr("add_optimizer_step_callback: the callback is empty")));
  EXPECT_EQ(session.add_optimizer_step_callback([] {}), 1);
  EXPECT_THAT([&] { session.remove_optimizer_step_callback(7); },
              ThrowsMessage<sdk::Error>(HasSubstr("no optimizer-step callback with id 7")));
  session.remove_optimizer_step_callback(1);
  EXPECT_THAT([&] { session.restore_model_state(3); },
              ThrowsMessage<sdk::Error>(HasSubstr("no saved model state with handle 3")));
  EXPECT_EQ(session.save_model_state(), 1);
}

// SDK 1.8 snapshots put back weights *and* masks: a search tries a mask, then goes back.
TEST(PruningSessionTest, SnapshotRestoresWeightsAndMasksAndReleasedHandlesAreRefused) {
  auto model = load_torchscript_model(test::lenet_model());
  const auto dense = test::snapshot_weights(*model);
  PruningSession session(*model, test::level_registry(),
                         level_config(R"([{"sparsity": 0.5, "op_types": ["default"]}])"));
  const int64_t before = session.save_snapshot();  // all-ones masks, dense weights
  session.compress();
  const auto pruned = test::snapshot_weights(*model);
  std::vector<at::Tensor> pruned_masks;
  for (const auto& [name, masks] : session.masks()) {
    EXPECT_EQ(masks.weight.eq(0).sum().item<int64_t>(), masks.weight.numel() / 2) << name;
    pruned_masks.push_back(masks.weight.clone());
  }
  const int64_t after = session.save_snapshot();
  EXPECT_NE(before, after);

  session.restore_snapshot(before);
  for (const auto& [name, weight] : test::snapshot_weights(*model)) {
    EXPECT_TRUE(weight.equal(dense.at(name))) << name << ": the dense weights are back";
  }
  for (const auto& [name, masks] : session.masks()) {
    EXPECT_EQ(masks.weight.eq(0).sum().item<int64_t>(), 0) << name << ": all-ones masks are back";
  }
  session.restore_snapshot(after);
  size_t i = 0;
  for (const auto& [name, masks] : session.masks()) {
    EXPECT_TRUE(masks.weight.equal(pruned_masks.at(i++))) << name;
  }
  for (const auto& [name, weight] : test::snapshot_weights(*model)) {
    EXPECT_TRUE(weight.equal(pruned.at(name))) << name;
  }
  // Restoring is not consuming: the same snapshot restores twice; a released one is gone.
  session.restore_snapshot(before);
  session.release_snapshot(before);
  EXPECT_THAT([&] { session.restore_snapshot(before); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("restore_snapshot"),
                                              HasSubstr("handle 1 (released)"))));
  EXPECT_THAT([&] { session.release_snapshot(9); },
              ThrowsMessage<sdk::Error>(HasSubstr("release_snapshot: no snapshot with handle 9")));
  EXPECT_EQ(session.save_snapshot(), 3) << "handles are never reused";
}

}  // namespace
}  // namespace lithe::host
