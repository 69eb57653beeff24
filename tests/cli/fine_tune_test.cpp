// End-to-end: `lithe compress --epochs` fine-tunes while a schedule prunes, on a small slice
// of Debian's Fashion-MNIST saved as tensor files; and bad training inputs fail before any work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lithe/host/train/dataset.h"
#include "lithe/host/model/model.h"
#include "support/cli_run.h"
#include "support/fashion_data.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
    write_fashion_files(*dir_, 2000, 500);
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
       "--lr has no effect without --epochs, --calibration-batches or --recalibrate-bn"},
      {"--config " + (source_dir() / "samples/configs/level.json").string() + data_flags(),
       "--data has no effect without --epochs, --calibration-batches or --recalibrate-bn"},
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

namespace lithe::test {
namespace {

std::string quant_config(const std::string& name) {
  return (source_dir() / "samples/configs" / (name + ".json")).string();
}

// Quantization-aware training end to end: the model learns under int8 weights and outputs,
// and the run writes the model with its quantization state and the calibration file.
TEST_F(FineTuneCliTest, QatTrainsAndWritesTheModelAndTheCalibration) {
  const auto out = scratch_dir("cli_qat");
  const CliRun run = run_lithe("compress --json --model " + lenet_model().string() +
                               " --config " + quant_config("qat") + " --epochs 2" + data_flags() +
                               " --output " + (out / "qat.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  const double before = summary.at("accuracy_before").at("accuracy").get<double>();
  const double after = summary.at("accuracy_after").at("accuracy").get<double>();
  EXPECT_GT(after, before + 0.3) << "the untrained LeNet learns under quantization";
  EXPECT_EQ(summary.at("calibration").get<std::string>(), (out / "qat.calibration.json").string());

  const auto calibration = nlohmann::json::parse(read_text(out / "qat.calibration.json"));
  EXPECT_EQ(calibration.at("algorithm"), "qat");
  ASSERT_EQ(calibration.at("layers").size(), 5u);
  for (const auto& [name, layer] : calibration.at("layers").items()) {
    EXPECT_EQ(layer.at("weight").at("bits"), 8) << name;
    EXPECT_EQ(layer.at("output").at("bits"), 8) << name;
    const double lo = layer.at("output").at("tracked_min").get<double>();
    const double hi = layer.at("output").at("tracked_max").get<double>();
    EXPECT_LT(lo, hi) << name << ": ranges were tracked from real data";
    EXPECT_NEAR(layer.at("output").at("scale").get<double>(),
                (std::max(hi, 0.0) - std::min(lo, 0.0)) / 255, 1e-6)
        << name;
  }
  // The written model is plain TorchScript whose modules carry the state as buffers.
  const auto saved = host::load_torchscript_model(out / "qat.pt");
  bool found = false;
  for (const auto& [key, tensor] : saved->module_buffers("fc1")) {
    if (key == "lithe_q_output_scale") {
      found = true;
      EXPECT_NEAR(tensor.item<double>(),
                  calibration["layers"]["fc1"]["output"]["scale"].get<double>(), 1e-9);
    }
  }
  EXPECT_TRUE(found) << "fc1.lithe_q_output_scale is saved with the model";
}

TEST_F(FineTuneCliTest, QuantizerCalibrationTracksRangesWithoutChangingWeights) {
  const auto out = scratch_dir("cli_qat_calibration");
  const CliRun run = run_lithe("compress --json --model " + lenet_model().string() +
                               " --config " + quant_config("qat") + " --calibration-batches 2" +
                               data_only_flags() + " --output " + (out / "qat.pt").string() +
                               " --calibration " + (out / "ranges.json").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto calibration = nlohmann::json::parse(read_text(out / "ranges.json"));
  EXPECT_LT(calibration["layers"]["conv1"]["output"]["tracked_min"].get<double>(),
            calibration["layers"]["conv1"]["output"]["tracked_max"].get<double>());
  const auto original = host::load_torchscript_model(lenet_model());
  const auto written = host::load_torchscript_model(out / "qat.pt");
  for (const host::ModuleRecord& m : original->modules()) {
    if (m.weight) {
      EXPECT_TRUE(written->find_module(m.name)->weight->equal(*m.weight)) << m.name;
    }
  }
}

TEST_F(FineTuneCliTest, QuantizerBadInputsFailBeforeAnyWorkAndWriteNothing) {
  const auto out = scratch_dir("cli_quant_bad");
  write_text(out / "existing.pt", "previous output");
  auto config = [&](const std::string& name, const std::string& entry) {
    write_text(out / name, R"({"algorithm": "qat", "config_list": [)" + entry + "]}");
    return (out / name).string();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--config " + config("bits.json", R"({"quant_types": ["weight"], "quant_bits": 40, "op_types": ["Linear"]})"),
       "/config_list/0/quant_bits: bits must be in 1..32, got 40"},
      {"--config " + config("type.json", R"({"quant_types": ["weights"], "quant_bits": 8, "op_types": ["Linear"]})"),
       "/config_list/0/quant_types: unknown quant type 'weights'"},
      {"--config " + config("relu.json", R"({"quant_types": ["weight"], "quant_bits": 8, "op_types": ["ReLU"]})"),
       "which has no weight tensor to quantize"},
      {"--config " + config("dict.json", R"({"quant_types": ["weight"], "quant_bits": {"weight": 8, "input": 8}, "op_types": ["Linear"]})"),
       "/config_list/0/quant_bits/input: gives bits for \"input\", which is not in quant_types"},
      {"--config " + quant_config("qat") + " --masks " + (out / "masks.pt").string(),
       "--masks: 'qat' is a quantizer, which computes no masks"},
      {"--config " + quant_config("qat") + " --epochs 0" + data_flags(), "epochs must be > 0"},
      {"--config " + quant_config("qat") + " --calibration " + (out / "." / "existing.pt").string(),
       "is the same file as --output"},
      {"--config " + quant_config("qat") + " --calibration " + lenet_model().string(),
       "is the same file as --model"},
      {"--config " + (source_dir() / "samples/configs/level.json").string() + " --calibration " +
           (out / "c.json").string(),
       "--calibration: 'level' is not a quantizer, so there is no calibration to write"},
  };
  for (const auto& [args, message] : cases) {
    const CliRun run = run_lithe("compress --model " + lenet_model().string() + " " + args +
                                 " --output " + (out / "existing.pt").string());
    EXPECT_EQ(run.exit_code, 1) << args << "\n" << run.out;
    EXPECT_THAT(run.out, HasSubstr(message)) << args;
    EXPECT_EQ(read_text(out / "existing.pt"), "previous output") << args;
    EXPECT_FALSE(std::filesystem::exists(out / "existing.calibration.json")) << args;
  }
}

}  // namespace
}  // namespace lithe::test

namespace lithe::test {
namespace {

// A data-driven pruner that saw fewer batches than it needs fails at the end of the data,
// naming itself, the layer and the rule, and writes nothing (it used to write an unpruned
// model and exit 0).
TEST_F(FineTuneCliTest, DataDrivenPrunerStarvedOfBatchesFailsNamingLayerAndRule) {
  for (const std::string algorithm : {"apoz", "taylor_fo"}) {
    const auto out = scratch_dir("cli_starved_" + algorithm);
    const auto config = out / "config.json";
    {
      std::ofstream file(config);
      file << R"({"algorithm": ")" << algorithm
           << R"(", "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}],
                "options": {"statistics_batch_num": 4}})";
    }
    const CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                                 config.string() + " --calibration-batches 2" +
                                 data_only_flags() + " --output " +
                                 (out / "pruned.pt").string());
    EXPECT_EQ(run.exit_code, 1) << algorithm << "\n" << run.out;
    EXPECT_THAT(run.out, HasSubstr("pruner '" + algorithm + "'")) << run.out;
    EXPECT_THAT(run.out, HasSubstr("layer 'conv1'")) << run.out;
    EXPECT_THAT(run.out, HasSubstr("statistics_batch_num = 4")) << run.out;
    EXPECT_THAT(run.out, HasSubstr("the data ended after 2")) << run.out;
    EXPECT_FALSE(std::filesystem::exists(out / "pruned.pt")) << algorithm;
  }
}

// Knowledge distillation end to end: a teacher trained on the real labels teaches a model
// whose training labels are scrambled; with --kd-alpha 1 the labels are ignored and the model
// learns the teacher's predictions, without the teacher it learns noise.
TEST_F(FineTuneCliTest, ATeacherTeachesThroughScrambledLabels) {
  const auto out = scratch_dir("cli_fine_tune_teacher");
  CliRun run = run_lithe("train --model " + lenet_model().string() +
                         " --epochs 3 --batch-size 32" + data_flags() + " --output " +
                         (out / "teacher.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  host::Dataset scrambled = host::load_tensor_file(*dir_ / "train.pt");
  scrambled.labels = at::randint(0, 10, {scrambled.size()},
                                 at::detail::createCPUGenerator(3), at::kLong);
  host::save_tensor_file(scrambled, out / "scrambled.pt");
  const std::string scrambled_flags = " --lr 0.05 --batch-size 32 --data " +
                                      (out / "scrambled.pt").string() +
                                      " --test-data " + (*dir_ / "test.pt").string();
  write_text(out / "level.json", R"({"algorithm": "level", "config_list": [
      {"sparsity": 0.5, "op_types": ["default"]}]})");

  run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                  (out / "level.json").string() + " --epochs 2 --teacher " +
                  (out / "teacher.pt").string() + " --kd-alpha 1 --kd-temperature 2 --json" +
                  scrambled_flags + " --output " + (out / "taught.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto taught = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  run = run_lithe("train --model " + lenet_model().string() + " --epochs 2 --json" +
                  scrambled_flags + " --output " + (out / "untaught.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto untaught = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  const double with_teacher = taught["accuracy_after"]["accuracy"].get<double>();
  const double without = untaught["epochs"].back()["test"]["accuracy"].get<double>();
  // The teacher reaches about 0.7 on these 500 test images; chance is 0.1.
  EXPECT_GT(with_teacher, 0.55) << "taught by the teacher through scrambled labels";
  EXPECT_LT(without, 0.25) << "the scrambled labels alone teach nothing";

  // Flags that need a teacher, and a teacher that cannot teach LeNet: one line, no file.
  run = run_lithe("train --model " + lenet_model().string() + " --epochs 1 --kd-alpha 0.5" +
                  data_flags() + " --output " + (out / "x.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--kd-alpha has no effect without --teacher"));
  run = run_lithe("train --model " + lenet_model().string() + " --epochs 1 --teacher " +
                  (nni_data_dir() / "models/vgg_bn.pt").string() + data_flags() + " --output " +
                  (out / "x.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("the teacher model: dataset"));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  run = run_lithe("train --model " + lenet_model().string() + " --epochs 1 --teacher " +
                  (out / "teacher.pt").string() + " --kd-temperature 0" + data_flags() +
                  " --output " + (out / "x.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("distillation temperature must be > 0, got 0"));
  EXPECT_FALSE(std::filesystem::exists(out / "x.pt"));
}

}  // namespace
}  // namespace lithe::test

namespace lithe::test {
namespace {

// SDK 1.7: an algorithm that trains while it compresses (admm) gets the training options
// without --epochs; the same options for one that does not are still an error, and nothing is
// written.
TEST_F(FineTuneCliTest, AdmmTrainsWithTheTrainingOptionsWithoutEpochs) {
  const auto out = scratch_dir("cli_admm");
  const std::string config = (source_dir() / "samples/configs/admm.json").string();
  const CliRun run = run_lithe("compress --json --model " + lenet_model().string() +
                               " --config " + config +
                               " --optimizer adam --lr 0.001 --weight-decay 5e-5" +
                               data_only_flags() + " --output " + (out / "admm.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  for (const auto& layer : summary.at("layers")) {
    EXPECT_EQ(layer.at("pruned").get<int64_t>(),
              static_cast<int64_t>(layer.at("params").get<int64_t>() * 0.8))
        << layer.dump();
  }
  EXPECT_EQ(summary.at("algorithm_training_epochs").get<int64_t>(), 4);  // 4 iterations × 1
  // Measured before the algorithm trained (the data is read on its first use), and trained
  // (4 epochs over 2000 samples) before the cut: far above the untrained model even at 80%.
  EXPECT_EQ(summary.at("accuracy_before").at("samples").get<int64_t>(), 500);
  EXPECT_GT(summary.at("accuracy_after").at("accuracy").get<double>(),
            summary.at("accuracy_before").at("accuracy").get<double>() + 0.2);

  write_text(out / "existing.pt", "previous output");
  const CliRun level = run_lithe(
      "compress --model " + lenet_model().string() + " --config " +
      (source_dir() / "samples/configs/level.json").string() + " --lr 0.1" + data_only_flags() +
      " --output " + (out / "existing.pt").string());
  EXPECT_EQ(level.exit_code, 1) << level.out;
  EXPECT_THAT(level.out, HasSubstr("has no effect without --epochs, --calibration-batches or "
                                   "--recalibrate-bn, and 'level' does not train while it "
                                   "compresses"));
  EXPECT_EQ(read_text(out / "existing.pt"), "previous output");
}

}  // namespace
}  // namespace lithe::test

namespace lithe::test {
namespace {

// NNI's LinearPruner: the rounds fine-tune with the training options on --data and log the
// test metric of each round; the last round's sparsity is exact.
TEST_F(FineTuneCliTest, LinearPrunesInRoundsFineTunedOnTheData) {
  const auto out = scratch_dir("cli_linear");
  const std::string config = (source_dir() / "samples/configs/linear.json").string();
  const CliRun run =
      run_lithe("compress --json --log-level info --model " + lenet_model().string() +
                " --config " + config + " --optimizer adam --lr 0.001" + data_only_flags() +
                " --output " + (out / "linear.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto summary = nlohmann::json::parse(run.out.substr(run.out.find("{\n")));
  for (const auto& layer : summary.at("layers")) {
    EXPECT_EQ(layer.at("pruned").get<int64_t>(),
              static_cast<int64_t>(layer.at("params").get<int64_t>() * 0.8))
        << layer.dump();
  }
  EXPECT_EQ(summary.at("algorithm_training_epochs").get<int64_t>(), 4);  // 4 rounds × 1
  EXPECT_THAT(run.out, HasSubstr("linear: round 4 of 4 (100% of the target sparsity): metric"));
  EXPECT_GT(summary.at("accuracy_after").at("accuracy").get<double>(),
            summary.at("accuracy_before").at("accuracy").get<double>() + 0.2);

  // A --data file without --test-data has nothing to evaluate on: the host offers no
  // evaluator (can_evaluate() is false), and linear prunes and fine-tunes without a metric.
  const CliRun no_test =
      run_lithe("compress --json --log-level info --model " + lenet_model().string() +
                " --config " + config + " --optimizer adam --lr 0.001 --data " +
                (*dir_ / "train.pt").string() + " --output " + (out / "no_test.pt").string());
  ASSERT_EQ(no_test.exit_code, 0) << no_test.out;
  EXPECT_THAT(no_test.out, HasSubstr("linear: round 4 of 4 done (100% of the target sparsity)"));
  EXPECT_THAT(no_test.out, Not(HasSubstr("metric")));
  EXPECT_TRUE(std::filesystem::exists(out / "no_test.pt"));
}

// SDK 1.10 through the CLI: the sample config's flops_budget (no sparsity), the cost counted on
// one sample of --data; the masks `lithe speedup` turns into a model `lithe flops` counts at
// half the FLOPs or less.
TEST_F(FineTuneCliTest, SimulatedAnnealingToAFlopsBudgetSpeedsUpWithinIt) {
  const auto out = scratch_dir("cli_simulated_annealing_flops");
  const std::string config =
      (source_dir() / "samples/configs/simulated_annealing_flops.json").string();
  const CliRun run = run_lithe("compress --log-level info --model " + lenet_model().string() +
                               " --config " + config + data_only_flags() + " --output " +
                               (out / "sa.pt").string() + " --masks " +
                               (out / "masks.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("flops_budget used 0."));
  const CliRun sped = run_lithe("speedup --model " + lenet_model().string() + " --masks " +
                                (out / "masks.pt").string() + " --output " +
                                (out / "small.pt").string() + " --input-shape 1,1,28,28");
  ASSERT_EQ(sped.exit_code, 0) << sped.out;
  const auto total_flops = [&](const std::filesystem::path& model) {
    const CliRun flops =
        run_lithe("flops --json --model " + model.string() + " --input-shape 1,1,28,28");
    EXPECT_EQ(flops.exit_code, 0) << flops.out;
    return nlohmann::json::parse(flops.out).at("total_flops").get<double>();
  };
  const double share = total_flops(out / "small.pt") / total_flops(lenet_model());
  EXPECT_LE(share, 0.5);
  EXPECT_GT(share, 0.35);  // the least pruning that fits, not any pruning
  // A budget with a sparsity beside it is refused in one line, and nothing is written.
  const auto bad = out / "bad.json";
  write_text(bad, R"({"algorithm": "simulated_annealing", "options": {"flops_budget": 0.5},
                      "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]})");
  const CliRun both = run_lithe("compress --model " + lenet_model().string() + " --config " +
                                bad.string() + data_only_flags() + " --output " +
                                (out / "bad.pt").string());
  EXPECT_NE(both.exit_code, 0);
  EXPECT_THAT(both.out, HasSubstr("/config_list/0/sparsity: simulated_annealing searches"));
  EXPECT_FALSE(std::filesystem::exists(out / "bad.pt"));
}

TEST_F(FineTuneCliTest, SimulatedAnnealingSearchesSparsitiesOnTheTestData) {
  const auto out = scratch_dir("cli_simulated_annealing");
  // A trained model: an untrained one scores every candidate alike.
  const CliRun trained = run_lithe("train --model " + lenet_model().string() + " --epochs 1" +
                                   data_flags() + " --output " + (out / "trained.pt").string());
  ASSERT_EQ(trained.exit_code, 0) << trained.out;
  const std::string config = (source_dir() / "samples/configs/simulated_annealing.json").string();
  const std::string command = "compress --json --log-level info --model " +
                              (out / "trained.pt").string() + " --config " + config +
                              data_only_flags() + " --output ";
  const CliRun run = run_lithe(command + (out / "sa.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto summary = nlohmann::json::parse(run.out.substr(run.out.find("{\n")));
  const int64_t evaluations = summary.at("algorithm_evaluations").get<int64_t>();
  // 0.05 · 0.8^k > 0.005: 11 temperatures, one accepted candidate each at least.
  EXPECT_GE(evaluations, 11);
  EXPECT_THAT(run.out, HasSubstr("simulated_annealing: best of " + std::to_string(evaluations) +
                                 " candidates"));
  // Half of the convolutions' weights overall, whole filters, within NNI's rescaling.
  int64_t pruned = 0;
  int64_t params = 0;
  for (const auto& layer : summary.at("layers")) {
    pruned += layer.at("pruned").get<int64_t>();
    params += layer.at("params").get<int64_t>();
  }
  EXPECT_NEAR(static_cast<double>(pruned) / static_cast<double>(params), 0.5, 0.06);
  // "Before" is the model as it came, measured before the search's first masks.
  const CliRun dense = run_lithe("eval --json --model " + (out / "trained.pt").string() +
                                 " --data " + (*dir_ / "test.pt").string());
  ASSERT_EQ(dense.exit_code, 0) << dense.out;
  EXPECT_DOUBLE_EQ(summary.at("accuracy_before").at("accuracy").get<double>(),
                   nlohmann::json::parse(dense.out.substr(dense.out.find('{')))
                       .at("accuracy").get<double>());
  // The same seed gives the same masks.
  const CliRun again = run_lithe(command + (out / "sa_again.pt").string());
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(nlohmann::json::parse(again.out.substr(again.out.find("{\n"))).at("layers"),
            summary.at("layers"));
  // An option the search does not read is still an error.
  const CliRun lr = run_lithe(command + (out / "sa_lr.pt").string() + " --lr 0.1");
  EXPECT_NE(lr.exit_code, 0);
  EXPECT_THAT(lr.out, HasSubstr("--lr has no effect without --epochs"));
  EXPECT_THAT(lr.out, HasSubstr("'simulated_annealing' does not train (it only evaluates)"));
  EXPECT_FALSE(std::filesystem::exists(out / "sa_lr.pt"));
}

}  // namespace
}  // namespace lithe::test
