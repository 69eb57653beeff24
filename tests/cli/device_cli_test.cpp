// `--device` on the verbs that compute with a model (train, eval, compress): `--device cpu`
// gives the default's bytes (the golden and byte-identity tests elsewhere hold the default to
// what it always wrote); a spelling libtorch would misread, or a CUDA device this machine does
// not have, is one line before any work. The
// CudaPipelineTest cases run where libtorch sees a GPU (on a GPU machine: training, pruning and
// quantization on CUDA against the same runs on the CPU) and skip elsewhere, saying why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <torch/script.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lithe/host/io/mask_file.h"
#include "support/cli_run.h"
#include "support/fashion_data.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

using ::testing::HasSubstr;

class DeviceCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fashion_installed()) {
      return;
    }
    // CTest runs every test in its own process, in parallel: one data folder per process.
    dir_ = new std::filesystem::path(scratch_dir("cli_device_data_" + std::to_string(::getpid())));
    write_fashion_files(*dir_, 1000, 300);
  }
  void SetUp() override {
    if (dir_ == nullptr) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
  }
  static std::string data_flags() {
    return " --data " + (*dir_ / "train.pt").string() + " --test-data " +
           (*dir_ / "test.pt").string();
  }
  static std::string config(const std::string& name) {
    return (source_dir() / "samples/configs" / name).string();
  }
  static inline std::filesystem::path* dir_ = nullptr;
};

TEST_F(DeviceCliTest, TheCpuIsTheDefaultAndGivesTheSameBytes) {
  const auto out = scratch_dir("cli_device_cpu");
  std::vector<std::string> files;
  for (const std::string device : {"", " --device cpu"}) {
    const std::string tag = device.empty() ? "default" : "cpu";
    const CliRun train = run_lithe("train --model " + lenet_model().string() + " --epochs 1" +
                                   data_flags() + device + " --output " +
                                   (out / (tag + "_trained.pt")).string());
    ASSERT_EQ(train.exit_code, 0) << train.out;
    const CliRun compress = run_lithe(
        "compress --model " + lenet_model().string() + " --config " + config("agp.json") +
        " --epochs 1" + data_flags() + device + " --output " + (out / (tag + "_agp.pt")).string() +
        " --masks " + (out / (tag + "_masks.pt")).string());
    ASSERT_EQ(compress.exit_code, 0) << compress.out;
    const CliRun eval = run_lithe("eval --json --model " + (out / (tag + "_agp.pt")).string() +
                                  " --data " + (*dir_ / "test.pt").string() + device);
    ASSERT_EQ(eval.exit_code, 0) << eval.out;
    files.push_back(read_text(out / (tag + "_trained.pt")));
    files.push_back(read_text(out / (tag + "_agp.pt")));
    files.push_back(read_text(out / (tag + "_masks.pt")));
    files.push_back(eval.out);
  }
  ASSERT_EQ(files.size(), 8u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(files[i].empty()) << i;
    EXPECT_EQ(files[i], files[i + 4]) << "output " << i << " differs with --device cpu";
  }
}

TEST_F(DeviceCliTest, UnknownSpellingsAndAbsentDevicesAreOneLineBeforeAnyWork) {
  const auto out = scratch_dir("cli_device_bad");
  write_text(out / "out.pt", "sentinel");
  // c10's own parser takes "cuda:+1" and "cuda: 1"; Lithe's does not. Every spelling on eval
  // (the quickest verb to start), the first and the last on train and compress as well.
  std::vector<std::pair<std::string, std::string>> cases = {
      {"gpu", "--device must be cpu, cuda or cuda:N (N a device index), got 'gpu'"},
      {"CUDA", "got 'CUDA'"},
      {"cuda:", "got 'cuda:'"},
      {"cuda:-1", "got 'cuda:-1'"},
      {"cuda:+1", "got 'cuda:+1'"},
      {"cuda:1x", "got 'cuda:1x'"},
      {"cuda:1000", "got 'cuda:1000'"},
      {"cpu:0", "got 'cpu:0'"},
      {"cuda:999", at::hasCUDA() ? "--device cuda:999: libtorch sees "
                                 : "--device cuda:999: libtorch sees no CUDA device here"},
  };
  if (!at::hasCUDA()) {
    cases.push_back({"cuda", "--device cuda: libtorch sees no CUDA device here"});
    cases.push_back({"cuda:0", "--device cuda:0: libtorch sees no CUDA device here"});
  }
  const std::string model = " --model " + lenet_model().string();
  const std::string output = " --output " + (out / "out.pt").string();
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [device, message] = cases[i];
    std::vector<std::string> verbs = {"eval" + model + " --data " + (*dir_ / "test.pt").string()};
    if (i == 0 || i + 1 == cases.size()) {
      verbs.push_back("train" + model + " --epochs 1" + data_flags() + output);
      verbs.push_back("compress" + model + " --config " + config("level.json") + output);
    }
    for (const std::string& verb : verbs) {
      const CliRun run = run_lithe(verb + " --device '" + device + "'");
      EXPECT_EQ(run.exit_code, 1) << verb << " --device " << device << ": " << run.out;
      EXPECT_THAT(run.out, HasSubstr(message)) << verb;
      EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
      EXPECT_EQ(read_text(out / "out.pt"), "sentinel") << verb << " --device " << device;
    }
  }
}

// --- On a GPU: the same runs on CUDA and on the CPU. ---

#define LITHE_REQUIRE_GPU()                                                             \
  do {                                                                                  \
    if (!at::hasCUDA()) {                                                               \
      GTEST_SKIP() << "the CUDA pipeline is not checked: libtorch sees no CUDA device " \
                      "(a CPU-only libtorch, or no GPU on this machine)";               \
    }                                                                                   \
  } while (0)

class CudaPipelineTest : public DeviceCliTest {};

double accuracy_of(const CliRun& run) {
  return nlohmann::json::parse(run.out)["epochs"].back()["test"]["accuracy"].get<double>();
}

// Every tensor of a written model (parameters, buffers, the quantizers' state and Lithe's own
// attributes) lives on the CPU, whatever device computed it: loaded without map_location.
void expect_cpu_tensors(const std::filesystem::path& file) {
  const torch::jit::Module module = torch::jit::load(file.string());
  int64_t tensors = 0;
  for (const auto& child : module.named_modules()) {
    for (const auto& attribute : child.value.named_attributes(/*recurse=*/false)) {
      if (attribute.value.isTensor()) {
        ++tensors;
        EXPECT_TRUE(attribute.value.toTensor().is_cpu())
            << file << ": " << child.name << "." << attribute.name << " is on "
            << attribute.value.toTensor().device();
      }
    }
  }
  EXPECT_GT(tensors, 0) << file;
}

// What the --json summary says the run computed on.
std::string device_of(const CliRun& run) {
  return nlohmann::json::parse(run.out)["device"].get<std::string>();
}

TEST_F(CudaPipelineTest, TrainingOnCudaLearnsWhatTheCpuLearns) {
  LITHE_REQUIRE_GPU();
  const auto out = scratch_dir("cli_cuda_train");
  double accuracy[2] = {0, 0};
  int i = 0;
  for (const std::string device : {"cpu", "cuda"}) {
    const CliRun run = run_lithe("train --json --model " + lenet_model().string() +
                                 " --epochs 2 --lr 0.05" + data_flags() + " --device " + device +
                                 " --output " + (out / (device + ".pt")).string());
    ASSERT_EQ(run.exit_code, 0) << run.out;
    EXPECT_EQ(device_of(run), device == "cpu" ? "cpu" : "cuda:0");
    accuracy[i++] = accuracy_of(run);
    expect_cpu_tensors(out / (device + ".pt"));
  }
  // Same batches, same initial weights; the float summation order differs (cuDNN's weight
  // gradients are not deterministic), on 300 test images.
  EXPECT_NEAR(accuracy[1], accuracy[0], 0.05);
  EXPECT_GT(accuracy[1], 0.5);
}

TEST_F(CudaPipelineTest, MasksComputedOnCudaAreTheCpuMasksByteForByte) {
  LITHE_REQUIRE_GPU();
  const auto out = scratch_dir("cli_cuda_masks");
  for (const std::string name : {"level.json", "l1_filter.json"}) {
    std::vector<std::string> masks;
    for (const std::string device : {"cpu", "cuda"}) {
      const CliRun run = run_lithe("compress --json --model " + lenet_model().string() +
                                   " --config " + config(name) + " --device " + device +
                                   " --output " +
                                   (out / (device + ".pt")).string() + " --masks " +
                                   (out / (device + "_masks.pt")).string());
      ASSERT_EQ(run.exit_code, 0) << name << " " << device << ": " << run.out;
      EXPECT_EQ(device_of(run), device == "cpu" ? "cpu" : "cuda:0");
      masks.push_back(read_text(out / (device + "_masks.pt")));
      expect_cpu_tensors(out / (device + ".pt"));
    }
    EXPECT_EQ(masks[0], masks[1]) << name << ": CUDA masks differ from CPU masks";
  }
}

TEST_F(CudaPipelineTest, QuantizationAwareTrainingOnCudaConvertsToInt8) {
  LITHE_REQUIRE_GPU();
  const auto out = scratch_dir("cli_cuda_qat");
  const CliRun run = run_lithe("compress --json --model " + lenet_model().string() +
                               " --config " + config("qat.json") +
                               " --calibration-batches 4 --epochs 1 --lr 0.02" + data_flags() +
                               " --device cuda --output " + (out / "qat.pt").string() +
                               " --convert " + (out / "int8.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(device_of(run), "cuda:0");
  expect_cpu_tensors(out / "qat.pt");
  const nlohmann::json summary = nlohmann::json::parse(run.out);
  EXPECT_GT(summary["epochs"].back()["test"]["accuracy"].get<double>(), 0.5) << run.out;
}

}  // namespace
}  // namespace lithe::test
