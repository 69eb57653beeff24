// End-to-end: `lithe compress --epochs` fine-tunes while a schedule prunes, on a small slice
// of Debian's Fashion-MNIST saved as tensor files; and bad training inputs fail before any work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "lithe/host/dataset.h"
#include "lithe/host/model.h"
#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

using ::testing::HasSubstr;

class FineTuneCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::error_code ec;
    if (!std::filesystem::is_directory(host::kDefaultDataDir, ec)) {
      return;
    }
    // CTest runs every test in its own process, in parallel: one data folder per process.
    dir_ = new std::filesystem::path(
        scratch_dir("cli_fine_tune_data_" + std::to_string(::getpid())));
    auto slice = [](host::Dataset d, int64_t n) {
      d.images = d.images.narrow(0, 0, n).clone();
      d.labels = d.labels.narrow(0, 0, n).clone();
      return d;
    };
    host::save_tensor_file(slice(host::load_mnist_directory(host::kDefaultDataDir, "train"), 2000),
                           *dir_ / "train.pt");
    host::save_tensor_file(slice(host::load_mnist_directory(host::kDefaultDataDir, "test"), 500),
                           *dir_ / "test.pt");
    host::Dataset wrong;  // 3 x 32 x 32 samples: LeNet takes 1 x 28 x 28
    wrong.images = at::zeros({8, 3, 32, 32});
    wrong.labels = at::zeros({8}, at::kLong);
    host::save_tensor_file(wrong, *dir_ / "wrong_shape.pt");
  }
  void SetUp() override {
    if (dir_ == nullptr) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
  }
  static std::string data_only_flags() {
    return " --data " + (*dir_ / "train.pt").string() + " --test-data " +
           (*dir_ / "test.pt").string();
  }
  static std::string data_flags() { return " --lr 0.05" + data_only_flags(); }
  static std::string agp_config() { return (source_dir() / "samples/configs/agp.json").string(); }
  static inline std::filesystem::path* dir_ = nullptr;
};

TEST_F(FineTuneCliTest, AgpReachesExactFinalSparsityWhileFineTuning) {
  const auto out = scratch_dir("cli_fine_tune_agp");
  const CliRun run = run_lithe("compress --json --model " + lenet_model().string() +
                               " --config " + agp_config() + " --epochs 3" + data_flags() +
                               " --output " + (out / "agp.pt").string() + " --masks " +
                               (out / "masks.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  ASSERT_EQ(summary.at("layers").size(), 5u);
  for (const auto& layer : summary.at("layers")) {
    const auto params = layer.at("params").get<int64_t>();
    EXPECT_EQ(layer.at("pruned").get<int64_t>(), static_cast<int64_t>(params * 0.8))
        << layer.dump();
    EXPECT_EQ(layer.at("target").get<double>(), 0.8);
  }
  ASSERT_EQ(summary.at("epochs").size(), 3u);
  EXPECT_EQ(summary.at("accuracy_before").at("samples").get<int64_t>(), 500);
  const double after = summary.at("epochs").back().at("test").at("accuracy").get<double>();
  // The bundled LeNet is untrained (~10%); 3 epochs over 2000 samples teach it a lot even
  // while 80% of every layer goes.
  EXPECT_GT(after, summary.at("accuracy_before").at("accuracy").get<double>() + 0.3);
  EXPECT_TRUE(std::filesystem::is_regular_file(out / "agp.pt"));
  EXPECT_TRUE(std::filesystem::is_regular_file(out / "masks.pt"));

  // The saved model evaluates to the accuracy the run reported.
  const CliRun eval = run_lithe("eval --json --model " + (out / "agp.pt").string() + " --data " +
                                (*dir_ / "test.pt").string());
  ASSERT_EQ(eval.exit_code, 0) << eval.out;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(eval.out).at("accuracy").get<double>(), after);
}

TEST_F(FineTuneCliTest, TableShowsAccuracyBeforeAndAfter) {
  const auto out = scratch_dir("cli_fine_tune_table");
  const CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                               agp_config() + " --epochs 3" + data_flags() + " --output " +
                               (out / "agp.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("test accuracy: "));
  EXPECT_THAT(run.out, HasSubstr(" after 3 epochs of fine-tuning"));
  EXPECT_THAT(run.out, HasSubstr("conv2                        Conv2d             2400         1920     0.8000   0.8000"));
}

// Every bad input fails with one line naming the problem, before any work, leaving an
// existing output file untouched.
TEST_F(FineTuneCliTest, BadInputsFailBeforeAnyWorkAndWriteNothing) {
  const auto out = scratch_dir("cli_fine_tune_bad");
  write_text(out / "existing.pt", "previous output");
  auto config = [&](const std::string& name, const std::string& text) {
    write_text(out / name, text);
    return (out / name).string();
  };
  const std::string schedule =
      R"("initial_sparsity": 0, "start_epoch": 0, "end_epoch": 3, "frequency": 1, "op_types": ["default"])";
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--config " + agp_config() + " --epochs 0" + data_flags(), "epochs must be > 0, got 0"},
      {"--config " + agp_config() + " --epochs -2" + data_flags(), "epochs must be > 0, got -2"},
      {"--config " +
           config("unknown_masker.json",
                  R"({"algorithm": "agp", "options": {"pruning_algorithm": "nope"},
                      "config_list": [{"final_sparsity": 0.8, )" + schedule + "}]}") +
           " --epochs 3" + data_flags(),
       "/options/pruning_algorithm 'nope': unknown masker 'nope'"},
      {"--config " +
           config("sparsity_one.json",
                  R"({"algorithm": "agp", "config_list": [{"final_sparsity": 1.0, )" + schedule +
                      "}]}") +
           " --epochs 3" + data_flags(),
       "/config_list/0/final_sparsity must be a number in [0, 1), got 1"},
      {"--config " + agp_config() + " --epochs 3 --data " + (*dir_ / "wrong_shape.pt").string(),
       "has samples of shape [3, 32, 32], which the model does not accept"},
      {"--config " + agp_config() + " --epochs 3 --data " + (out / "missing").string(),
       "missing"},
      {"--config " + (source_dir() / "samples/configs/level.json").string() + " --lr 0.1",
       "--lr has no effect without --epochs or --calibration-batches"},
      {"--config " + (source_dir() / "samples/configs/level.json").string() + data_flags(),
       "--data has no effect without --epochs or --calibration-batches"},
  };
  for (const Case& c : cases) {
    const CliRun run = run_lithe("compress --model " + lenet_model().string() + " " + c.args +
                                 " --output " + (out / "existing.pt").string());
    EXPECT_EQ(run.exit_code, 1) << c.args << "\n" << run.out;
    EXPECT_THAT(run.out, HasSubstr(c.message)) << c.args;
    EXPECT_THAT(run.out, ::testing::Not(HasSubstr("epoch 1/"))) << "training started: " << c.args;
    EXPECT_EQ(read_text(out / "existing.pt"), "previous output") << c.args;
  }
}

}  // namespace
}  // namespace lithe::test

namespace lithe::test {
namespace {

// One-shot data-driven pruning: statistics from a few batches, no training, so every weight
// that survives is exactly the original one.
TEST_F(FineTuneCliTest, CalibrationPrunesDataDrivenPrunersWithoutChangingWeights) {
  const auto original = host::load_torchscript_model(lenet_model());
  for (const std::string algorithm : {"apoz", "taylor_fo"}) {
    const auto out = scratch_dir("cli_calibration_" + algorithm);
    const CliRun run = run_lithe(
        "compress --json --model " + lenet_model().string() + " --config " +
        (source_dir() / "samples/configs" / (algorithm + ".json")).string() +
        " --calibration-batches 3" + data_only_flags() + " --output " + (out / "pruned.pt").string());
    ASSERT_EQ(run.exit_code, 0) << algorithm << "\n" << run.out;
    const auto summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
    for (const auto& layer : summary.at("layers")) {
      EXPECT_EQ(layer.at("pruned").get<int64_t>(), layer.at("params").get<int64_t>() / 2)
          << algorithm << " " << layer.dump();
    }
    EXPECT_TRUE(summary.at("epochs").empty());
    EXPECT_EQ(summary.at("accuracy_after").at("samples").get<int64_t>(), 500);
    const auto pruned = host::load_torchscript_model(out / "pruned.pt");
    for (const host::ModuleRecord& m : original->modules()) {
      if (!m.weight) {
        continue;
      }
      const at::Tensor now = *pruned->find_module(m.name)->weight;
      EXPECT_TRUE(now.equal(*m.weight * now.ne(0))) << algorithm << " " << m.name;
    }
  }
}

TEST_F(FineTuneCliTest, CalibrationInputsAreCheckedBeforeAnyWork) {
  const auto out = scratch_dir("cli_calibration_bad");
  const std::string base = "compress --model " + lenet_model().string() + " --config " +
                           (source_dir() / "samples/configs/apoz.json").string() + " --output " +
                           (out / "pruned.pt").string() + " --data " +
                           (*dir_ / "train.pt").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --calibration-batches -1", "--calibration-batches must be > 0, got -1"},
      {" --calibration-batches 1000",
       "1000 calibration batches asked for, but dataset '"},  // 2000 samples = 32 batches
      {" --calibration-batches 2 --lr 0.1", "--lr has no effect without --epochs"},
      {" --calibration-batches 2 --batch-size 0", "batch size must be > 0, got 0"},
  };
  for (const auto& [args, message] : cases) {
    const CliRun run = run_lithe(base + args);
    EXPECT_EQ(run.exit_code, 1) << args << "\n" << run.out;
    EXPECT_THAT(run.out, HasSubstr(message)) << args;
    EXPECT_FALSE(std::filesystem::exists(out / "pruned.pt")) << args;
  }
  EXPECT_THAT(run_lithe(base + " --calibration-batches 1000").out,
              HasSubstr("holds only 32 batches of 64 samples"));
}

}  // namespace
}  // namespace lithe::test
