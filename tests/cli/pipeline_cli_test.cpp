// `lithe pipeline` end to end on the bundled LeNet with the real plugins: l1_filter pruning,
// speedup, quantization-aware training and int8 conversion from one config, measured after
// every stage; bad configs fail in one line naming the stage and write nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const char* const kQatStage = R"({"algorithm": "qat", "config_list": [
    {"quant_types": ["weight", "output"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"],
     "quant_scheme": {"weight": "per_channel_symmetric", "output": "per_tensor_affine"},
     "quant_dtype": {"weight": "int", "output": "uint"}},
    {"quant_types": ["input", "weight", "output"], "quant_bits": 8, "op_names": ["conv1"],
     "quant_scheme": {"input": "per_tensor_affine", "weight": "per_channel_symmetric",
                      "output": "per_tensor_affine"},
     "quant_dtype": {"input": "uint", "weight": "int", "output": "uint"}}]})";
const char* const kL1 =
    R"({"algorithm": "l1_filter", "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]})";

CliRun pipeline(const fs::path& dir, const std::string& stages, const std::string& extra = "") {
  write_text(dir / "pipeline.json", R"({"stages": )" + stages + "}");
  return run_lithe("pipeline --model " + lenet_model().string() + " --config " +
                   (dir / "pipeline.json").string() + " --input-shape 4,1,28,28 --output " +
                   (dir / "out.pt").string() + " --json " + (dir / "report.json").string() +
                   " --no-accuracy " + extra);
}

TEST(PipelineCliTest, PrunesSpeedsUpQuantizesAndConvertsMeasuringEachStage) {
  const fs::path dir = scratch_dir("pipeline_cli_ok");
  const CliRun run = pipeline(dir, std::string("[{\"compress\": ") + kL1 +
                                       "}, {\"speedup\": {}}, {\"compress\": " + kQatStage +
                                       ", \"calibration_batches\": 2}, {\"convert\": {}}]");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  ASSERT_EQ(report["stages"].size(), 5u);
  const auto& s = report["stages"];
  EXPECT_EQ(s[0]["stage"], "input");
  EXPECT_EQ(s[1]["stage"], "l1_filter");
  EXPECT_EQ(s[2]["stage"], "speedup");
  EXPECT_THAT(s[4]["stage"].get<std::string>(), HasSubstr("5 int8 layers, 0 float"));
  // Pruning zeroes, speedup removes: fewer parameters and FLOPs only after the speedup.
  EXPECT_EQ(s[1]["float_parameters"], s[0]["float_parameters"]);
  EXPECT_LT(s[2]["float_parameters"].get<int64_t>(), s[0]["float_parameters"].get<int64_t>());
  EXPECT_LT(s[2]["flops"].get<int64_t>(), s[0]["flops"].get<int64_t>());
  EXPECT_EQ(s[4]["flops"], s[3]["flops"]);
  // Every stage's model was timed (in one alternating loop at the end).
  for (const auto& row : s) {
    EXPECT_GT(row["latency_ms"].get<double>(), 0.0) << row["stage"];
  }
  // int8: a quarter of the pruned model's bytes, far less than the input's.
  EXPECT_LT(s[4]["file_bytes"].get<double>(), 0.4 * s[2]["file_bytes"].get<double>());
  EXPECT_LT(s[4]["file_bytes"].get<double>(), 0.25 * s[0]["file_bytes"].get<double>());
  torch::jit::Module out = torch::jit::load((dir / "out.pt").string());
  EXPECT_TRUE(out.hasattr("lithe_packed_conv1"));
  EXPECT_EQ(fs::file_size(dir / "out.pt"), s[4]["file_bytes"].get<uintmax_t>());
  // The stages' models lived in a folder beside the output, removed at the end.
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().rfind(".lithe-pipeline-", 0), std::string::npos)
        << entry.path();
  }
}

TEST(PipelineCliTest, BadConfigsNameTheStageAndWriteNothing) {
  const fs::path dir = scratch_dir("pipeline_cli_bad");
  const struct {
    std::string stages;
    std::string message;
  } cases[] = {
      {"[]", "/stages: must be a non-empty list"},
      {R"([{"speedup": {}}])", "/stages/0: speedup needs a pruning stage"},
      {std::string("[{\"compress\": ") + kL1 + "}, {\"compress\": " + kQatStage + "}]",
       "/stages/1: a quantizer after a pruner needs the pruned model made smaller first"},
      {std::string("[{\"compress\": ") + kQatStage + "}, {\"convert\": {}}, {\"speedup\": {}}]",
       "/stages/1: convert must be the last stage"},
      {R"([{"convert": {}}])", "/stages/0: convert needs a quantization stage"},
      {std::string("[{\"compress\": ") + kQatStage + ", \"epoch\": 2}]",
       "/stages/0/epoch: unknown key for this stage"},
      {std::string("[{\"compress\": ") + kQatStage + ", \"calibration_batches\": 0}]",
       "/stages/0/calibration_batches: must be an integer >= 1, got 0"},
      {std::string("[{\"compress\": ") + kQatStage +
           "}, {\"convert\": {}, \"engine\": \"mkldnn\"}]",
       "/stages/1/engine: 'mkldnn' is not a quantized engine"},
      {R"([{"compress": {"algorithm": "level", "config_list": [{"sparsity": 2, "op_types": ["default"]}]}}])",
       "/stages/0/compress"},
  };
  for (const auto& c : cases) {
    const CliRun run = pipeline(dir, c.stages);
    EXPECT_NE(run.exit_code, 0) << c.stages;
    EXPECT_THAT(run.out, AllOf(HasSubstr("pipeline.json"), HasSubstr(c.message))) << c.stages;
    EXPECT_FALSE(fs::exists(dir / "out.pt")) << c.stages;
    EXPECT_FALSE(fs::exists(dir / "report.json")) << c.stages;
  }
}

}  // namespace
}  // namespace lithe::test
