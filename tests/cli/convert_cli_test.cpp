// `lithe convert`, `lithe compress --convert` and `lithe compress --fold-batchnorm` end to end
// with the real plugins: a quantized model becomes an int8 model with its certificate, or beside
// the quantized model in one run; bad inputs fail in one line and leave no output behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
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

// The bundled LeNet quantized by lsq (symmetric weights), calibrated on two batches.
fs::path quantized_lenet(const fs::path& dir) {
  write_text(dir / "lsq.json", R"({"algorithm": "lsq", "config_list": [
      {"quant_types": ["input", "weight", "output"], "quant_bits": 8, "op_names": ["conv1"]},
      {"quant_types": ["weight", "output"], "quant_bits": 8,
       "op_names": ["conv2", "fc1", "fc2", "fc3"]}]})");
  const CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                               (dir / "lsq.json").string() + " --output " +
                               (dir / "q.pt").string() + " --calibration-batches 2");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  return dir / "q.pt";
}

TEST(ConvertCliTest, WritesAnInt8ModelAndItsCertificate) {
  const fs::path dir = scratch_dir("convert_cli_ok");
  const fs::path q = quantized_lenet(dir);
  const CliRun run =
      run_lithe("convert --model " + q.string() + " --input-shape 4,1,28,28 --output " +
                (dir / "int8.pt").string() + " --json " + (dir / "cert.json").string() +
                " --samples 8 --latency-runs 3 --warmup 1");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, AllOf(HasSubstr("quantized::conv2d_relu"), HasSubstr("top-1 agreement"),
                             HasSubstr("output grid steps"), HasSubstr("latency ms")));
  const auto cert = nlohmann::json::parse(read_text(dir / "cert.json"));
  EXPECT_EQ(cert["engine"], "x86");
  EXPECT_EQ(cert["int8_layers"].size(), 5u);
  EXPECT_TRUE(cert["float_layers"].empty());
  EXPECT_EQ(cert["check"]["top1_rows"], 32);
  EXPECT_GE(cert["check"]["top1_agreement"].get<double>(), 0.9);
  EXPECT_LE(cert["check"]["max_diff_in_steps"].get<double>(), 2.0 + 1e-9);
  EXPECT_LT(cert["file_bytes"]["ratio"].get<double>(), 0.35);
  EXPECT_EQ(cert["check"]["first_output"].size(), 40u);  // 4 samples x 10 classes
  torch::jit::Module int8 = torch::jit::load((dir / "int8.pt").string());
  EXPECT_TRUE(int8.hasattr("lithe_packed_conv1"));
  EXPECT_FALSE(int8.hasattr("conv1_weight")) << "no float copy of an int8 weight";
}

TEST(ConvertCliTest, BadInputsFailInOneLineAndWriteNothing) {
  const fs::path dir = scratch_dir("convert_cli_bad");
  const fs::path out = dir / "int8.pt";
  // A float model: nothing to convert.
  CliRun run = run_lithe("convert --model " + lenet_model().string() +
                         " --input-shape 1,1,28,28 --output " + out.string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("no layer of the model carries Lithe's quantization state"));
  EXPECT_FALSE(fs::exists(out));
  // An unknown engine, before any work.
  const fs::path q = quantized_lenet(dir);
  run = run_lithe("convert --model " + q.string() + " --input-shape 1,1,28,28 --output " +
                  out.string() + " --engine mkldnn");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, AllOf(HasSubstr("--engine"), HasSubstr("'mkldnn'"),
                             HasSubstr("auto, onednn, qnnpack, x86, fbgemm")));
  EXPECT_FALSE(fs::exists(out));
  // The output may not replace the input.
  const std::string before = read_text(q);
  run = run_lithe("convert --model " + q.string() + " --input-shape 1,1,28,28 --output " +
                  q.string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--output"));
  EXPECT_EQ(read_text(q), before);
  // An input shape the model does not accept.
  run = run_lithe("convert --model " + q.string() + " --input-shape 1,3,28,28 --output " +
                  out.string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, AllOf(HasSubstr("--input-shape 1,3,28,28"), HasSubstr("does not run on it"),
                             HasSubstr("channels")));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST(ConvertCliTest, OnnxRuntimeRunsTheQdqFileOnTheSameImagesAsTheInt8Model) {
  const fs::path ort = onnxruntime_library();
  if (!fs::is_directory("/usr/share/datasets/fashion-mnist")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const fs::path dir = scratch_dir("convert_cli_onnxruntime");
  const fs::path q = quantized_lenet(dir);
  const std::string common = "convert --model " + q.string() + " --input-shape 16,1,28,28" +
                             " --data /usr/share/datasets/fashion-mnist --samples 4" +
                             " --latency-runs 1 --warmup 0 --threads 1";
  CliRun run = run_lithe(common + " --output " + (dir / "int8.pt").string() + " --json " +
                         (dir / "cert.json").string() + " --onnx " + (dir / "q.onnx").string() +
                         " --onnxruntime " + ort.string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, AllOf(HasSubstr("the first 64 images of"), HasSubstr("ONNX Runtime 1."),
                             HasSubstr("max |int8 - ORT|"), HasSubstr("accuracy on 64 labelled")));
  const auto cert = nlohmann::json::parse(read_text(dir / "cert.json"));
  const auto& ort_check = cert["onnxruntime"];
  EXPECT_EQ(ort_check["run"], true);
  EXPECT_EQ(ort_check["version"].get<std::string>().rfind("1.", 0), 0u) << ort_check;
  EXPECT_EQ(ort_check["top1_rows"], 64);
  // The same grids and weights in two runtimes: at most a step apart where one rounds a value
  // to the neighbouring grid point (BENCHMARKS.md, "The int8 model against ONNX Runtime").
  EXPECT_LE(ort_check["max_diff_in_steps"].get<double>(), 2.0 + 1e-6) << ort_check;
  EXPECT_GE(ort_check["top1_agreement"].get<double>(), 0.9) << ort_check;
  EXPECT_LT(ort_check["differing_outputs"].get<double>(), 0.5) << ort_check;
  EXPECT_EQ(cert["check"]["top1_rows"], 64);
  EXPECT_EQ(cert["accuracy"]["images"], 64);
  for (const char* model : {"float", "fake_quantized", "int8", "onnxruntime"}) {
    EXPECT_TRUE(cert["accuracy"].contains(model)) << model;
  }
  // The file ONNX Runtime ran is the one written, and what lithe export-onnx writes for the
  // quantized model.
  run = run_lithe("export-onnx --model " + q.string() + " --input-shape 16,1,28,28 --output " +
                  (dir / "export.onnx").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(read_text(dir / "q.onnx"), read_text(dir / "export.onnx"));

  // With --onnx, LITHE_ONNXRUNTIME names the library; without either, ORT is not run.
  run = run_lithe_env("LITHE_ONNXRUNTIME=" + ort.string(),
                      common + " --output " + (dir / "int8_env.pt").string() + " --onnx " +
                          (dir / "env.onnx").string() + " --json " +
                          (dir / "cert_env.json").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(nlohmann::json::parse(read_text(dir / "cert_env.json"))["onnxruntime"]["library"],
            ort.string());
  // LITHE_ONNXRUNTIME alone does not make convert export and run ONNX (that takes --onnx).
  run = run_lithe_env("LITHE_ONNXRUNTIME=" + ort.string(),
                      common + " --output " + (dir / "int8_none.pt").string() + " --json " +
                          (dir / "cert_none.json").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("ONNX Runtime: not run"));
  EXPECT_EQ(nlohmann::json::parse(read_text(dir / "cert_none.json"))["onnxruntime"]["run"], false);
}

TEST(ConvertCliTest, ALibraryThatIsNotOnnxRuntimeFailsInOneLineAndNothingIsWritten) {
  const fs::path dir = scratch_dir("convert_cli_bad_onnxruntime");
  const fs::path q = quantized_lenet(dir);
  write_text(dir / "notes.txt", "not a library\n");
  // A whole shared object of this machine that is not ONNX Runtime, and a truncated one.
  const fs::path sdk = binary_dir() / "lib/liblithe_sdk.so";
  const std::string sdk_bytes = read_text(sdk);
  write_text(dir / "truncated.so", sdk_bytes.substr(0, sdk_bytes.size() / 2));
  const struct {
    std::string library;
    std::string problem;
  } cases[] = {
      {(dir / "missing.so").string(), "no such file"},
      {dir.string(), "not a regular file"},
      {(dir / "notes.txt").string(), "not an ELF file"},
      {sdk.string(), "it exports no OrtGetApiBase"},
      {(dir / "truncated.so").string(), "truncated?"},
  };
  for (const auto& c : cases) {
    const CliRun run = run_lithe("convert --model " + q.string() +
                                 " --input-shape 1,1,28,28 --output " +
                                 (dir / "int8.pt").string() + " --json " +
                                 (dir / "cert.json").string() + " --onnx " +
                                 (dir / "q.onnx").string() + " --onnxruntime " + c.library);
    EXPECT_NE(run.exit_code, 0) << c.library;
    EXPECT_THAT(run.out, AllOf(HasSubstr("--onnxruntime " + c.library), HasSubstr(c.problem),
                               HasSubstr("libonnxruntime.so")));
    EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
    for (const char* output : {"int8.pt", "cert.json", "q.onnx"}) {
      EXPECT_FALSE(fs::exists(dir / output)) << c.library << ": " << output;
    }
  }
  // An opset with no ONNX file to apply to; an empty --onnxruntime; data that is not a dataset.
  CliRun run = run_lithe("convert --model " + q.string() + " --input-shape 1,1,28,28 --output " +
                         (dir / "int8.pt").string() + " --onnx-opset 17");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--onnx-opset has no effect without --onnx or --onnxruntime"));
  run = run_lithe("convert --model " + q.string() + " --input-shape 1,1,28,28 --output " +
                  (dir / "int8.pt").string() + " --onnxruntime ''");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--onnxruntime must name ONNX Runtime's shared library"));
  run = run_lithe("convert --model " + q.string() + " --input-shape 1,1,28,28 --output " +
                  (dir / "int8.pt").string() + " --data " + (dir / "notes.txt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--data " + (dir / "notes.txt").string() + ": "));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  EXPECT_FALSE(fs::exists(dir / "int8.pt"));
}

TEST(ConvertCliTest, DataOfAnotherShapeIsRefusedNamingBothShapes) {
  if (!fs::is_directory("/usr/share/datasets/fashion-mnist")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const fs::path dir = scratch_dir("convert_cli_data_shape");
  const fs::path q = quantized_lenet(dir);
  const CliRun run = run_lithe("convert --model " + q.string() +
                               " --input-shape 1,3,28,28 --output " + (dir / "int8.pt").string() +
                               " --data /usr/share/datasets/fashion-mnist");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, AllOf(HasSubstr("--data"), HasSubstr("[1, 28, 28]"),
                             HasSubstr("--input-shape asks for [3, 28, 28]")));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  EXPECT_FALSE(fs::exists(dir / "int8.pt"));
}

TEST(ConvertCliTest, QuantizersFoldBatchnormByDefaultBeforeQuantizingAndOnlyThey) {
  const fs::path dir = scratch_dir("convert_cli_fold");
  const std::string model = (nni_data_dir() / "models" / "resblock.pt").string();
  write_text(dir / "qat.json", R"({"algorithm": "qat", "config_list": [
      {"quant_types": ["weight", "output"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"],
       "quant_scheme": {"weight": "per_channel_symmetric", "output": "per_tensor_affine"},
       "quant_dtype": {"weight": "int", "output": "uint"}}]})");
  for (const char* flag : {"", " --fold-batchnorm"}) {  // the default, and said explicitly
    CliRun run = run_lithe("compress --model " + model + " --config " +
                           (dir / "qat.json").string() + " --output " + (dir / "q.pt").string() +
                           flag + " --json");
    ASSERT_EQ(run.exit_code, 0) << run.out;
    const auto summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
    EXPECT_EQ(summary["batchnorm_folding"]["folded"].size(), 6u) << flag;
    EXPECT_TRUE(summary["batchnorm_folding"]["kept"].empty()) << flag;
    torch::jit::Module folded = torch::jit::load((dir / "q.pt").string());
    EXPECT_TRUE(folded.attr("conv1").toModule().attr("bias").isTensor()) << "bn1 moved into conv1";
  }
  // NNI v2.0's behaviour on request: the BatchNorm layers stay.
  CliRun run = run_lithe("compress --model " + model + " --config " + (dir / "qat.json").string() +
                         " --output " + (dir / "kept.pt").string() + " --no-fold-batchnorm --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_FALSE(nlohmann::json::parse(run.out.substr(run.out.find('{'))).contains("batchnorm_folding"));
  EXPECT_TRUE(torch::jit::load((dir / "kept.pt").string()).attr("conv1").toModule().attr("bias").isNone());
  run = run_lithe("compress --model " + model + " --config " + (dir / "qat.json").string() +
                  " --output " + (dir / "both.pt").string() + " --no-fold-batchnorm --fold-batchnorm");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--fold-batchnorm and --no-fold-batchnorm: give one of them"));
  EXPECT_FALSE(fs::exists(dir / "both.pt"));
  run = run_lithe("compress --model " + model + " --config " + (dir / "qat.json").string() +
                  " --output " + (dir / "both.pt").string() + " --allow-float-layers");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--allow-float-layers has no effect without --convert"));
  EXPECT_FALSE(fs::exists(dir / "both.pt"));

  write_text(
      dir / "level.json",
      R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "op_types": ["default"]}]})");
  run = run_lithe("compress --model " + model + " --config " + (dir / "level.json").string() +
                  " --output " + (dir / "p.pt").string() + " --fold-batchnorm");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out,
              AllOf(HasSubstr("--fold-batchnorm"), HasSubstr("'level' is not a quantizer")));
  EXPECT_FALSE(fs::exists(dir / "p.pt"));
}

// NNI's ordinary config (weights and outputs of every Conv2d and Linear) on a net with
// BatchNorm and residual sums, calibrated and converted with default options: BatchNorm folds,
// the sums and the model input are quantized on their calibrated ranges, every layer runs int8.
// Without calibration the same command refuses before any work, naming the fix.
TEST(ConvertCliTest, TheOrdinaryConfigConvertsWholeToInt8ByDefault) {
  const fs::path dir = scratch_dir("convert_cli_ordinary");
  const std::string model = (nni_data_dir() / "models" / "resblock.pt").string();
  write_text(dir / "qat.json", R"({"algorithm": "qat", "config_list": [
      {"quant_types": ["weight", "output"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}]})");
  c10::Dict<std::string, at::Tensor> data;
  torch::manual_seed(3);
  data.insert("images", torch::randn({16, 3, 16, 16}));
  data.insert("labels", torch::zeros({16}, torch::kLong));
  const std::vector<char> bytes = torch::jit::pickle_save(data);
  write_text(dir / "data.pt", std::string(bytes.begin(), bytes.end()));
  const std::string compress = "compress --model " + model + " --config " +
                               (dir / "qat.json").string() + " --data " +
                               (dir / "data.pt").string() + " --batch-size 4 --output " +
                               (dir / "q.pt").string() + " --convert " +
                               (dir / "int8.pt").string();
  CliRun run = run_lithe(compress + " --calibration-batches 2 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  EXPECT_EQ(summary["batchnorm_folding"]["folded"].size(), 6u);
  EXPECT_EQ(summary["int8"]["int8_layers"], 7) << summary["int8"];
  EXPECT_TRUE(summary["int8"]["float_layers"].empty()) << summary["int8"];
  EXPECT_THAT(summary["int8"]["inputs_from_ranges"].dump(), HasSubstr("conv1")) << "the input";
  EXPECT_GE(summary["int8"]["inputs_from_ranges"].size(), 2u) << "and a residual sum";
  // lithe convert on the quantized model: the same, certificate within two output steps.
  run = run_lithe("convert --model " + (dir / "q.pt").string() +
                  " --input-shape 1,3,16,16 --output " + (dir / "convert.pt").string() +
                  " --samples 4 --latency-runs 1 --warmup 0 --json " +
                  (dir / "cert.json").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(read_text(dir / "int8.pt"), read_text(dir / "convert.pt"));
  const auto cert = nlohmann::json::parse(read_text(dir / "cert.json"));
  EXPECT_TRUE(cert["float_layers"].empty());
  EXPECT_LE(cert["check"]["max_diff_in_steps"].get<double>(), 2.0 + 1e-6) << cert["check"];
  // The residual sums nobody quantized are written at once on the grid the next block's
  // convolutions read them on (their calibrated input range).
  EXPECT_THAT(cert["int8_ops"].dump(), HasSubstr("quantized::add")) << cert["int8_ops"];
  // qat's default weights are asymmetric: the x86 engine, and the change that is faster.
  EXPECT_EQ(cert["engine"], "x86");
  EXPECT_EQ(cert["asymmetric_weights"], true);
  EXPECT_THAT(run.out, HasSubstr("quantize weights per_channel_symmetric"));

  // No calibration: no input range and no output grid; refused before any work.
  fs::remove(dir / "q.pt");
  fs::remove(dir / "int8.pt");
  run = run_lithe(compress + " --epochs 1");
  EXPECT_NE(run.exit_code, 0);
  // Training observes the output grids; the model input and the residual sums stay unquantized.
  EXPECT_THAT(run.out, AllOf(HasSubstr("4 of 7 quantized layers"), HasSubstr("conv1"),
                             HasSubstr("--calibration-batches N"),
                             HasSubstr("--allow-float-layers"), HasSubstr("nothing was written")));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  EXPECT_FALSE(fs::exists(dir / "q.pt"));
  EXPECT_FALSE(fs::exists(dir / "int8.pt"));
}

TEST(ConvertCliTest, CompressConvertWritesWhatConvertWritesAndItsAccuracy) {
  const fs::path dir = scratch_dir("compress_convert");
  write_text(dir / "lsq.json", R"({"algorithm": "lsq", "config_list": [
      {"quant_types": ["input", "weight", "output"], "quant_bits": 8, "op_names": ["conv1"]},
      {"quant_types": ["weight", "output"], "quant_bits": 8,
       "op_names": ["conv2", "fc1", "fc2", "fc3"]}]})");
  CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                         (dir / "lsq.json").string() + " --output " + (dir / "q.pt").string() +
                         " --calibration-batches 2 --convert " + (dir / "int8.pt").string() +
                         " --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  EXPECT_EQ(summary["int8"]["engine"], "x86");
  EXPECT_EQ(summary["int8"]["int8_layers"], 5);
  EXPECT_TRUE(summary["int8"]["float_layers"].empty());
  // Fashion-MNIST's test split: the int8 model is evaluated like the quantized one (the
  // bundled LeNet has random weights, so both are near chance; BENCHMARKS.md has trained ones).
  EXPECT_EQ(summary["int8"]["accuracy"]["samples"], 10000);
  EXPECT_EQ(summary["accuracy_after"]["samples"], 10000);

  // The same bytes as lithe convert on the quantized model written beside it.
  run = run_lithe("convert --model " + (dir / "q.pt").string() +
                  " --input-shape 1,1,28,28 --output " + (dir / "convert.pt").string() +
                  " --samples 2 --latency-runs 1 --warmup 0");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(read_text(dir / "int8.pt"), read_text(dir / "convert.pt"));

  // A pruner has nothing to convert; --engine needs --convert; both refused before any work.
  write_text(
      dir / "level.json",
      R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "op_types": ["default"]}]})");
  run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                  (dir / "level.json").string() + " --output " + (dir / "p.pt").string() +
                  " --convert " + (dir / "p8.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, AllOf(HasSubstr("--convert"), HasSubstr("'level' is not a quantizer")));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                  (dir / "lsq.json").string() + " --output " + (dir / "p.pt").string() +
                  " --engine qnnpack");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--engine has no effect without --convert"));
  // The int8 output may not be the quantized output.
  run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                  (dir / "lsq.json").string() + " --output " + (dir / "p.pt").string() +
                  " --convert " + (dir / "p.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, AllOf(HasSubstr("--convert"), HasSubstr("--output")));
  EXPECT_FALSE(fs::exists(dir / "p.pt"));
  EXPECT_FALSE(fs::exists(dir / "p8.pt"));
}

TEST(ConvertCliTest, RecalibrateBnNeedsAPositiveCountAndBatchNormLayers) {
  const fs::path dir = scratch_dir("compress_recalibrate_bn");
  write_text(
      dir / "level.json",
      R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "op_types": ["default"]}]})");
  CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                         (dir / "level.json").string() + " --output " + (dir / "p.pt").string() +
                         " --recalibrate-bn 0");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--recalibrate-bn must be > 0, got 0"));
  // The bundled LeNet has no BatchNorm: said in one line, nothing written.
  run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                  (dir / "level.json").string() + " --output " + (dir / "p.pt").string() +
                  " --recalibrate-bn 2");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, AllOf(HasSubstr("--recalibrate-bn 2 on '" + lenet_model().string() + "'"),
                             HasSubstr("no BatchNorm1d/2d/3d layer with running statistics")));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  EXPECT_FALSE(fs::exists(dir / "p.pt"));
}

}  // namespace
}  // namespace lithe::test
