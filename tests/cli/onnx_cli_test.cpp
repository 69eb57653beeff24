// `lithe compress --onnx` end to end with the real plugin modules: a QAT model becomes a QDQ
// file identical to `lithe export-onnx` of the saved model, a pruned model exports as saved,
// and what cannot be exported (a non-linear quantizer, bad options) fails before any work and
// leaves no file behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const char* const kQat =
    R"({"algorithm": "qat", "config_list": [{"quant_types": ["weight", "output"],
        "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}]})";

std::string compress_args(const fs::path& dir, const std::string& config) {
  write_text(dir / "config.json", config);
  return "compress --model " + lenet_model().string() + " --config " +
         (dir / "config.json").string() + " --output " + (dir / "out.pt").string();
}

TEST(CompressOnnxCliTest, QatWritesTheQdqModelOfWhatItSaved) {
  const fs::path dir = scratch_dir("compress_onnx_qat");
  const CliRun run = run_lithe(compress_args(dir, kQat) +
                               " --calibration-batches 2 --batch-size 16 --onnx " +
                               (dir / "out.onnx").string() + " --input-shape 1,1,28,28 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  EXPECT_EQ(summary["onnx"]["quantized_weights"], 5);
  EXPECT_EQ(summary["onnx"]["quantized_activations"], 5);
  EXPECT_TRUE(summary["onnx"]["not_quantized_yet"].empty());
  // The same bytes as exporting the saved model afterwards: the file is that model.
  const CliRun again = run_lithe("export-onnx --model " + (dir / "out.pt").string() +
                                 " --input-shape 1,1,28,28 --output " +
                                 (dir / "again.onnx").string());
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr("QDQ: 5 weights, 5 activations"));
  EXPECT_EQ(read_text(dir / "out.onnx"), read_text(dir / "again.onnx"));
  // One byte per weight: far smaller than the float export.
  const CliRun float_export = run_lithe("export-onnx --model " + lenet_model().string() +
                                        " --input-shape 1,1,28,28 --output " +
                                        (dir / "float.onnx").string());
  ASSERT_EQ(float_export.exit_code, 0) << float_export.out;
  EXPECT_LT(fs::file_size(dir / "out.onnx") * 3, fs::file_size(dir / "float.onnx"));
}

TEST(ExportOnnxCliTest, ExternalDataGoesBesideTheModelAndMayNotOverwriteAnInput) {
  const fs::path dir = scratch_dir("export_onnx_external");
  const CliRun run = run_lithe("export-onnx --model " + lenet_model().string() +
                               " --input-shape 1,1,28,28 --external-data --output " +
                               (dir / "m.onnx").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_GT(fs::file_size(dir / "m.onnx.data"), 100000u);  // fc1 alone is 192 KiB
  EXPECT_LT(fs::file_size(dir / "m.onnx"), 10000u);
  // The data file is an output too: naming the model after the input's ".data" twin is refused
  // before anything is written.
  fs::copy_file(lenet_model(), dir / "x.onnx.data");
  const std::string before = read_text(dir / "x.onnx.data");
  const CliRun clash = run_lithe("export-onnx --model " + (dir / "x.onnx.data").string() +
                                 " --input-shape 1,1,28,28 --output " +
                                 (dir / "x.onnx").string());
  EXPECT_NE(clash.exit_code, 0);
  EXPECT_THAT(clash.out, AllOf(HasSubstr("the external data file"), HasSubstr("--model")));
  EXPECT_EQ(read_text(dir / "x.onnx.data"), before);
  EXPECT_FALSE(fs::exists(dir / "x.onnx"));
}

TEST(CompressOnnxCliTest, TheOnnxExternalDataFileMayNotBeAnInputOrAnotherOutput) {
  const fs::path dir = scratch_dir("compress_onnx_external");
  write_text(dir / "config.json", kQat);
  // The model is called like the data file of --onnx; then --output is that file's name.
  fs::copy_file(lenet_model(), dir / "m.onnx.data");
  const std::string before = read_text(dir / "m.onnx.data");
  const CliRun input = run_lithe("compress --model " + (dir / "m.onnx.data").string() +
                                 " --config " + (dir / "config.json").string() + " --output " +
                                 (dir / "out.pt").string() + " --onnx " +
                                 (dir / "m.onnx").string() + " --input-shape 1,1,28,28");
  EXPECT_NE(input.exit_code, 0);
  EXPECT_THAT(input.out,
              AllOf(HasSubstr("the external data file of --onnx"), HasSubstr("--model")));
  const CliRun clash = run_lithe("compress --model " + lenet_model().string() + " --config " +
                                 (dir / "config.json").string() + " --output " +
                                 (dir / "n.onnx.data").string() + " --onnx " +
                                 (dir / "n.onnx").string() + " --input-shape 1,1,28,28");
  EXPECT_NE(clash.exit_code, 0);
  EXPECT_THAT(clash.out,
              AllOf(HasSubstr("the external data file of --onnx"), HasSubstr("--output")));
  EXPECT_EQ(read_text(dir / "m.onnx.data"), before);
  for (const char* name : {"out.pt", "m.onnx", "n.onnx", "n.onnx.data"}) {
    EXPECT_FALSE(fs::exists(dir / name)) << name;
  }
}

TEST(CompressOnnxCliTest, OutputsWithoutARangeAreNamedAsExportedUnquantized) {
  const fs::path dir = scratch_dir("compress_onnx_no_range");
  const CliRun run = run_lithe(compress_args(dir, kQat) + " --onnx " +
                               (dir / "out.onnx").string() + " --input-shape 1,1,28,28");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, AllOf(HasSubstr("QDQ: 5 weights, 0 activations"),
                             HasSubstr("exported unquantized"), HasSubstr("conv1 output")));
}

TEST(CompressOnnxCliTest, APrunedModelIsExportedAsSaved) {
  const fs::path dir = scratch_dir("compress_onnx_pruned");
  const CliRun run = run_lithe(
      compress_args(dir, R"({"algorithm": "l1_filter", "config_list": [{"sparsity": 0.5,
                              "op_types": ["Conv2d"]}]})") +
      " --onnx " + (dir / "out.onnx").string() + " --input-shape 2,1,28,28 --onnx-opset 17");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, AllOf(HasSubstr("wrote " + (dir / "out.onnx").string() + " (opset 17"),
                             ::testing::Not(HasSubstr("QDQ"))));
  EXPECT_TRUE(fs::exists(dir / "out.pt"));
}

TEST(CompressOnnxCliTest, ANonLinearQuantizerFailsBeforeTrainingAndWritesNothing) {
  const fs::path dir = scratch_dir("compress_onnx_dorefa");
  const CliRun run = run_lithe(
      compress_args(dir, R"({"algorithm": "dorefa", "config_list": [{"quant_types": ["weight"],
                              "quant_bits": 4, "op_types": ["Conv2d"]}]})") +
      " --epochs 1 --onnx " + (dir / "out.onnx").string() + " --input-shape 1,1,28,28");
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_THAT(run.out, AllOf(HasSubstr("layer 'conv1' quantizes its weight with 'dorefa'"),
                             HasSubstr("no linear grid"), ::testing::Not(HasSubstr("epoch 1"))));
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename(), "config.json") << "left behind: " << entry.path();
  }
}

TEST(CompressOnnxCliTest, BadOnnxOptionsAreRefusedBeforeAnyWork) {
  const fs::path dir = scratch_dir("compress_onnx_options");
  const std::string base = compress_args(dir, kQat);
  const std::string onnx = (dir / "out.onnx").string();
  const struct {
    std::string args;
    std::string message;
  } cases[] = {
      {" --onnx " + onnx, "--onnx needs --input-shape"},
      {" --input-shape 1,1,28,28", "--input-shape has no effect without --onnx"},
      {" --onnx-opset 15", "--onnx-opset has no effect without --onnx"},
      {" --onnx " + onnx + " --input-shape 1,x,28", "--input-shape"},
      {" --onnx " + onnx + " --input-shape 1,1,28,28 --onnx-opset 12",
       "--onnx-opset must be between 13 and 17"},
      {" --onnx " + (dir / "out.pt").string() + " --input-shape 1,1,28,28",
       "--onnx '" + (dir / "out.pt").string() + "' is the same file as --output"},
  };
  for (const auto& c : cases) {
    const CliRun run = run_lithe(base + c.args);
    EXPECT_NE(run.exit_code, 0) << c.args;
    EXPECT_THAT(run.out, HasSubstr(c.message)) << c.args;
    EXPECT_FALSE(fs::exists(dir / "out.pt")) << c.args;
    EXPECT_FALSE(fs::exists(dir / "out.onnx")) << c.args;
  }
}

}  // namespace
}  // namespace lithe::test
