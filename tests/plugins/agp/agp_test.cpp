#include "plugins/agp/agp.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "plugins/agp/schedule.h"
#include "plugins/level/level.h"
#include "support/plugin_test.h"

namespace lithe::plugins::agp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

nlohmann::ordered_json schedule_json(double initial, double final_sparsity, int64_t start,
                                     int64_t end, int64_t frequency) {
  return {{"initial_sparsity", initial}, {"final_sparsity", final_sparsity},
          {"start_epoch", start},        {"end_epoch", end},
          {"frequency", frequency},      {"op_types", {"default"}}};
}

Schedule schedule(double initial, double final_sparsity, int64_t start, int64_t end,
                  int64_t frequency) {
  return read_schedule(
      test::config_entry(schedule_json(initial, final_sparsity, start, end, frequency), 0));
}

TEST(AgpScheduleTest, TargetsAreNnisToTheLastBit) {
  // reference §2.9 / conformance README item 11 (start 0, end 10, frequency 1).
  const std::vector<double> nni = {0.0,
                                   0.23813443072702345,
                                   0.4235939643347051,
                                   0.5629629629629629,
                                   0.6628257887517147,
                                   0.729766803840878,
                                   0.7703703703703704,
                                   0.7912208504801098,
                                   0.7989026063100138,
                                   0.8,
                                   0.8,
                                   0.8};
  const Schedule s = schedule(0.0, 0.8, 0, 10, 1);
  for (size_t epoch = 0; epoch < nni.size(); ++epoch) {
    EXPECT_TRUE(is_pruning_epoch(s, static_cast<int64_t>(epoch)));
    EXPECT_EQ(target_sparsity(s, static_cast<int64_t>(epoch)), nni[epoch]) << "epoch " << epoch;
  }
}

TEST(AgpScheduleTest, FrequencyGridAndStartEpoch) {
  // span = ((10 - 2 - 1) / 3) * 3 = 6: pruning epochs 2, 5, 8, 11, ... with 0, 0.7, 0.8, 0.8.
  const Schedule s = schedule(0.0, 0.8, 2, 10, 3);
  std::vector<int64_t> pruning;
  for (int64_t e = 0; e < 12; ++e) {
    if (is_pruning_epoch(s, e)) {
      pruning.push_back(e);
    }
  }
  EXPECT_EQ(pruning, (std::vector<int64_t>{2, 5, 8, 11}));
  EXPECT_EQ(target_sparsity(s, 2), 0.0);
  EXPECT_DOUBLE_EQ(target_sparsity(s, 5), 0.7);
  EXPECT_DOUBLE_EQ(target_sparsity(s, 8), 0.8);
  EXPECT_EQ(target_sparsity(s, 11), 0.8);
}

TEST(AgpScheduleTest, DefaultsAndBadSchedulesNameTheKeyAndValue) {
  const Schedule d = read_schedule(test::config_entry(
      {{"final_sparsity", 0.5}, {"end_epoch", 4}, {"op_types", {"default"}}}, 0));
  EXPECT_EQ(d.initial_sparsity, 0.0);
  EXPECT_EQ(d.start_epoch, 0);
  EXPECT_EQ(d.frequency, 1);
  auto fails = [](const nlohmann::ordered_json& json, const std::string& text) {
    EXPECT_THAT([&] { read_schedule(test::config_entry(json, 2)); },
                ThrowsMessage<sdk::Error>(HasSubstr(text)))
        << json.dump();
  };
  fails({{"end_epoch", 4}}, "/config_list/2: missing required key 'final_sparsity'");
  fails(schedule_json(0, 1.0, 0, 10, 1), "/config_list/2/final_sparsity must be a number in [0, 1), got 1");
  fails(schedule_json(0.5, 0.4, 0, 10, 1), "initial_sparsity must not exceed final_sparsity");
  fails(schedule_json(0, 0.8, 5, 5, 1), "/end_epoch must be greater than start_epoch (5), got 5");
  fails(schedule_json(0, 0.8, 0, 10, 0), "/frequency must be an integer > 0, got 0");
  fails(schedule_json(0, 0.8, -1, 10, 1), "/start_epoch must be an integer >= 0, got -1");
  fails(schedule_json(0, 0.8, 0, 3, 3),
        "end_epoch - start_epoch - 1 must be at least frequency");
}

class AgpPrunerTest : public ::testing::Test {
 protected:
  AgpPrunerTest() {
    level::register_algorithms(registry_);
    register_algorithms(registry_);
  }

  // reference §7 case 16: Linear(10, 10) with W = 1..100; pruned counts per epoch with two
  // optimizer steps (mask updates) per epoch.
  std::vector<int64_t> pruned_per_epoch(const nlohmann::ordered_json& entry, int64_t epochs) {
    auto pruner = registry_.make_pruner("agp", sdk::Options());
    const sdk::Options config = test::config_entry(entry, 0);
    pruner->validate_config(config);
    sdk::LayerView layer(0, "fc", "Linear", at::arange(1, 101, at::kFloat).reshape({10, 10}),
                         at::zeros({10}), config);
    auto update = [&] {
      if (auto masks = pruner->calc_mask(layer)) {
        layer.set_masks(std::move(*masks));
      }
    };
    std::vector<int64_t> counts;
    update();  // compress(): the epoch-0 masks
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      pruner->update_epoch(epoch);
      update();
      update();
      counts.push_back(layer.masks().weight.eq(0).sum().item<int64_t>());
    }
    return counts;
  }

  host::PluginRegistry registry_;
};

TEST_F(AgpPrunerTest, PrunesExactlyTheScheduledCountEachEpoch) {
  EXPECT_EQ(pruned_per_epoch(schedule_json(0, 0.8, 0, 10, 1), 12),
            (std::vector<int64_t>{0, 23, 42, 56, 66, 72, 77, 79, 79, 80, 80, 80}));
}

TEST_F(AgpPrunerTest, MasksChangeOnlyOnTheFrequencyGrid) {
  // reference §7 case 17.
  EXPECT_EQ(pruned_per_epoch(schedule_json(0, 0.8, 2, 10, 3), 12),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 70, 70, 70, 80, 80, 80, 80}));
}

TEST_F(AgpPrunerTest, UpdateEpochZeroKeepsTheCompressMasks) {
  auto pruner = registry_.make_pruner("agp", sdk::Options());
  const sdk::Options config = test::config_entry(schedule_json(0.5, 0.8, 0, 10, 1), 0);
  sdk::LayerView layer(0, "fc", "Linear", at::arange(1, 101, at::kFloat).reshape({10, 10}),
                       std::nullopt, config);
  ASSERT_TRUE(pruner->calc_mask(layer).has_value());
  pruner->update_epoch(0);
  EXPECT_FALSE(pruner->calc_mask(layer).has_value()) << "NNI: update_epoch(0) is a no-op";
}

TEST_F(AgpPrunerTest, MasksOnlyGrowAndPreviouslyPrunedWeightsStayPruned) {
  // Weights change between epochs (training); already pruned weights count as zeros.
  auto pruner = registry_.make_pruner("agp", sdk::Options());
  const sdk::Options config = test::config_entry(schedule_json(0.0, 0.9, 0, 5, 1), 0);
  at::manual_seed(3);
  at::Tensor weight = at::randn({32, 16});
  sdk::LayerView layer(0, "fc", "Linear", weight, std::nullopt, config);
  at::Tensor previous = at::ones({32, 16});
  for (int64_t epoch = 0; epoch < 6; ++epoch) {
    pruner->update_epoch(epoch);
    if (auto masks = pruner->calc_mask(layer)) {
      layer.set_masks(std::move(*masks));
    }
    const at::Tensor now = layer.masks().weight;
    EXPECT_TRUE(now.le(previous).all().item<bool>()) << "epoch " << epoch;
    previous = now.clone();
    weight.mul_(now).add_(at::randn({32, 16}) * 0.1 * now);  // training moves kept weights
  }
  EXPECT_EQ(previous.eq(0).sum().item<int64_t>(), static_cast<int64_t>(512 * 0.9));
}

TEST_F(AgpPrunerTest, UnknownMaskerFailsWhenThePrunerIsBuilt) {
  const sdk::Options options =
      sdk::options_from_json({{"pruning_algorithm", "nope"}}, "/options");
  EXPECT_THAT([&] { registry_.make_pruner("agp", options); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("/options/pruning_algorithm 'nope'"),
                                              HasSubstr("unknown masker 'nope'"),
                                              HasSubstr("level"))));
}

TEST(AgpNamesTest, NniShortNamesMapToLitheMaskers) {
  EXPECT_EQ(masker_name_for("l1"), "l1_filter");
  EXPECT_EQ(masker_name_for("l2"), "l2_filter");
  EXPECT_EQ(masker_name_for("taylorfo"), "taylor_fo");
  EXPECT_EQ(masker_name_for("level"), "level");
  EXPECT_EQ(masker_name_for("apoz"), "apoz");
}

}  // namespace
}  // namespace lithe::plugins::agp
