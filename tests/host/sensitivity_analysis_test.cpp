// Sensitivity analysis (NNI's SensitivityAnalysis) on the bundled LeNet with the level pruner:
// every trial measures one layer pruned alone from its own weights, the model comes back bit
// for bit, early stops cut a row where NNI's modes say, and the CSV has NNI's layout. (Parity
// with NNI's numbers is the conformance cases' job: tests/data/nni/golden/sensitivity_*.)
#include "lithe/host/pipeline/sensitivity_analysis.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/sdk/error.h"
#include "support/model_snapshot.h"
#include "support/paths.h"
#include "support/registry.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

class SensitivityAnalysisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = load_torchscript_model(test::lenet_model());
    input_ = at::randn({8, 1, 28, 28}, at::TensorOptions().dtype(at::kFloat));
  }
  double output_sum(Model& model) {
    model.train(false);
    at::NoGradGuard no_grad;
    return model.forward(input_).sum().item<double>();
  }
  SensitivityOptions level() {
    SensitivityOptions o;
    o.algorithm = "level";
    return o;
  }

  std::unique_ptr<Model> model_;
  at::Tensor input_;
};

TEST_F(SensitivityAnalysisTest, EachTrialIsOneLayerPrunedAloneAndTheModelComesBack) {
  const auto before = test::snapshot_weights(*model_);
  const SensitivityResult result = analyse_sensitivity(
      *model_, test::level_registry(), level(), [&](const std::string&) { return output_sum(*model_); });
  EXPECT_EQ(result.sparsities,
            (std::vector<double>{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}));
  ASSERT_EQ(result.rows.size(), 2U);  // conv1, conv2: NNI analyses Conv2d
  EXPECT_EQ(result.rows[0].layer, "conv1");
  EXPECT_EQ(result.rows[1].layer, "conv2");
  EXPECT_EQ(result.evaluations, 1 + 2 * 9);
  EXPECT_DOUBLE_EQ(result.original, output_sum(*model_));
  for (const auto& [name, weight] : test::snapshot_weights(*model_)) {
    EXPECT_TRUE(weight.equal(before.at(name))) << name << " was left changed";
  }
  // Every figure is what a fresh one-shot pruning of that layer alone gives.
  for (const SensitivityRow& row : result.rows) {
    ASSERT_EQ(row.metrics.size(), 9U);
    for (const auto& [sparsity, value] : row.metrics) {
      auto fresh = load_torchscript_model(test::lenet_model());
      PruningSession session(
          *fresh, test::level_registry(),
          make_compression_config("level",
                                  "[{\"sparsity\": " + std::to_string(sparsity) +
                                      ", \"op_names\": [\"" + row.layer + "\"]}]",
                                  "{}", "t"));
      session.compress();
      EXPECT_DOUBLE_EQ(value, output_sum(*fresh)) << row.layer << " at " << sparsity;
    }
  }
}

TEST_F(SensitivityAnalysisTest, EarlyStopRecordsTheSparsityThatTriggeredItAndNoMore) {
  // A scripted metric: 1.0 originally; conv1 falls fast, conv2 slowly.
  std::vector<double> script = {1.0, 0.99, 0.97, 0.90, 0.99, 0.98, 0.97, 0.96};
  size_t call = 0;
  SensitivityOptions o = level();
  o.sparsities = {0.5, 0.25, 0.75, 0.9};  // sorted by the analysis
  o.stop = SensitivityStop::kDropped;
  o.stop_value = 0.05;
  const SensitivityResult result = analyse_sensitivity(
      *model_, test::level_registry(), o, [&](const std::string&) { return script.at(call++); });
  EXPECT_EQ(result.sparsities, (std::vector<double>{0.25, 0.5, 0.75, 0.9}));
  ASSERT_EQ(result.rows.size(), 2U);
  ASSERT_EQ(result.rows[0].metrics.size(), 3U);  // 0.90 < 1.0 − 0.05 at 0.75: stop
  EXPECT_DOUBLE_EQ(result.rows[0].metrics[2].first, 0.75);
  EXPECT_DOUBLE_EQ(result.rows[0].metrics[2].second, 0.90);
  EXPECT_EQ(result.rows[1].metrics.size(), 4U);  // never more than 0.05 below
  EXPECT_EQ(sensitivity_csv(result),
            "layername,0.25,0.5,0.75,0.9\n"
            "conv1,0.99,0.97,0.9\n"
            "conv2,0.99,0.98,0.97,0.96\n");
}

TEST_F(SensitivityAnalysisTest, ChosenLayersOtherTypesAndRoundedSparsities) {
  SensitivityOptions o = level();
  o.op_types = {"Linear"};
  o.layers = {"fc3", "fc1"};
  o.sparsities = {0.333, 0.5};
  const SensitivityResult result =
      analyse_sensitivity(*model_, test::level_registry(), o, [&](const std::string&) { return 0.0; });
  EXPECT_EQ(result.sparsities, (std::vector<double>{0.33, 0.5}));
  ASSERT_EQ(result.rows.size(), 2U);
  EXPECT_EQ(result.rows[0].layer, "fc3");  // in the order asked for
  EXPECT_EQ(result.rows[1].layer, "fc1");
}

TEST_F(SensitivityAnalysisTest, BadSelectionsAndSparsitiesNameTheFieldAndTheValue) {
  const auto metric = [](const std::string&) { return 0.0; };
  SensitivityOptions o = level();
  o.sparsities = {0.5, 1.0};
  EXPECT_THAT([&] { analyse_sensitivity(*model_, test::level_registry(), o, metric); },
              ThrowsMessage<FieldError>(AllOf(HasSubstr("`sparsities`"), HasSubstr("got 1"))));
  o.sparsities = {0.001};
  EXPECT_THAT([&] { analyse_sensitivity(*model_, test::level_registry(), o, metric); },
              ThrowsMessage<sdk::Error>(HasSubstr("rounds to 2 decimals as 0 or 1")));
  o = level();
  o.layers = {"fc1"};
  EXPECT_THAT([&] { analyse_sensitivity(*model_, test::level_registry(), o, metric); },
              ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("`layers`"), HasSubstr("'fc1' is a Linear"))));
  o.layers = {"conv9"};
  EXPECT_THAT([&] { analyse_sensitivity(*model_, test::level_registry(), o, metric); },
              ThrowsMessage<sdk::Error>(HasSubstr("the model has no module 'conv9'")));
  o = level();
  o.op_types = {"Conv3d"};
  EXPECT_THAT([&] { analyse_sensitivity(*model_, test::level_registry(), o, metric); },
              ThrowsMessage<sdk::Error>(HasSubstr("no module of the analysed types")));
  o = level();
  o.algorithm = "no_such_pruner";
  const auto before = test::snapshot_weights(*model_);
  EXPECT_THROW(analyse_sensitivity(*model_, test::level_registry(), o, metric), sdk::Error);
  for (const auto& [name, weight] : test::snapshot_weights(*model_)) {
    EXPECT_TRUE(weight.equal(before.at(name))) << name;
  }
}

// NNI's CSV layout reads back to the same table (short rows included), and what is not that
// layout is refused with the line, the column and the value.
TEST(SensitivityCsvTest, ReadsBackWhatItWritesAndRefusesWhatIsNotTheLayout) {
  SensitivityResult written;
  written.sparsities = {0.25, 0.5, 0.75};
  written.rows = {{"conv1", {{0.25, 0.8501}, {0.5, 0.7713}, {0.75, 0.1 + 0.2}}},
                  {"layer1.conv2", {{0.25, 0.8577}}}};
  const SensitivityResult read = read_sensitivity_csv(sensitivity_csv(written), "s.csv");
  EXPECT_EQ(read.sparsities, written.sparsities);
  ASSERT_EQ(read.rows.size(), 2U);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(read.rows[i].layer, written.rows[i].layer);
    EXPECT_EQ(read.rows[i].metrics, written.rows[i].metrics);  // bit for bit
  }
  EXPECT_TRUE(std::isnan(read.original));
  // Windows line ends and blank lines are fine.
  EXPECT_EQ(read_sensitivity_csv("\r\nlayername,0.5\r\nfc,0.9\r\n", "w.csv").rows[0].metrics,
            (std::vector<std::pair<double, double>>{{0.5, 0.9}}));
  const auto error = [](const std::string& text) {
    try {
      (void)read_sensitivity_csv(text, "s.csv");
    } catch (const sdk::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error(""), HasSubstr("s.csv: empty (no header)"));
  EXPECT_THAT(error("layer,0.5\n"), HasSubstr("s.csv:1: the header must be layername,<sparsities>"));
  EXPECT_THAT(error("layername,0.5,x\n"),
              HasSubstr("s.csv:1: column 3: a sparsity must be a finite number, got 'x'"));
  EXPECT_THAT(error("layername,0.5,1\n"), HasSubstr("s.csv:1: column 3: a sparsity must be in (0, 1)"));
  EXPECT_THAT(error("layername,0.5,0.25\n"), HasSubstr("the sparsities must ascend, got 0.25 after 0.5"));
  EXPECT_THAT(error("layername,0.5\n"), HasSubstr("s.csv: no layer row after the header"));
  EXPECT_THAT(error("layername,0.5\nconv1,0.9,0.8\n"),
              HasSubstr("s.csv:2: 2 metrics for 1 sparsities in the header"));
  EXPECT_THAT(error("layername,0.5\nconv1,nan\n"),
              HasSubstr("s.csv:2: column 2: a metric must be a finite number, got 'nan'"));
  EXPECT_THAT(error("layername,0.5\nconv1,0.9\nconv1,0.8\n"),
              HasSubstr("s.csv:3: layer 'conv1' has a row already"));
  EXPECT_THAT(error("layername,0.5\n,0.9\n"), HasSubstr("s.csv:2: column 1: the layer name is empty"));
}

}  // namespace
}  // namespace lithe::host
