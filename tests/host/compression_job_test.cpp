// run_compression: the one compression job the CLI and embedders share, on the sample LeNet with
// the in-tree level and naive plugins linked directly. Checks what lands on disk (the model, the
// masks or the calibration), that it agrees with the result, that the same request gives the
// same bytes, in files or in memory, that a failing job changes no existing file, and that its
// errors name the request's fields.
#include "lithe/host/jobs/compression_job.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "lithe/host/io/file_io.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "plugins/level/level.h"
#include "plugins/naive/naive.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

const PluginRegistry& job_registry() {
  static PluginRegistry* r = [] {
    auto* out = new PluginRegistry();
    plugins::level::register_algorithms(*out);
    plugins::naive::register_algorithms(*out);
    return out;
  }();
  return *r;
}

CompressionRequest level_request(const fs::path& dir) {
  CompressionRequest request;
  request.model = ModelSource::file(test::lenet_model());
  request.config = parse_compression_config(
      R"({"algorithm": "level", "config_list": [{"sparsity": 0.75, "op_types": ["default"]}]})",
      "<test>");
  request.output = Output::to_file(dir / "pruned.pt");
  request.masks = Output::to_file(dir / "masks.pt");
  return request;
}

TEST(CompressionJobTest, PrunesLenetAndWritesAModelAndMasksThatAgree) {
  const fs::path dir = test::scratch_dir("compression_job_prune");
  const CompressionRequest request = level_request(dir);
  std::vector<std::string> notes;
  CompressionCallbacks callbacks;
  callbacks.on_note = [&](const FieldText& text) { notes.push_back(text.plain()); };
  const CompressionResult result = run_compression(request, job_registry(), callbacks);

  EXPECT_EQ(result.kind, AlgorithmKind::kPruner);
  EXPECT_TRUE(result.wrote_files);
  EXPECT_TRUE(notes.empty());
  ASSERT_EQ(result.pruning.size(), 5U);  // conv1, conv2, fc1, fc2, fc3
  const NamedMasks masks = load_masks(request.masks.file);
  ASSERT_EQ(masks.size(), result.pruning.size());
  const auto pruned = load_torchscript_model(request.output.file);
  for (const LayerReport& layer : result.pruning) {
    EXPECT_EQ(layer.weight_zeros, sdk::prune_count(layer.weight_numel, 0.75)) << layer.name;
    const ModuleRecord* record = nullptr;
    for (const ModuleRecord& m : pruned->modules()) {
      record = m.name == layer.name ? &m : record;
    }
    ASSERT_NE(record, nullptr) << layer.name;
    for (const auto& [name, mask] : masks) {
      if (name == layer.name) {
        // The saved weights are zero exactly where the saved mask is.
        EXPECT_TRUE(record->weight->eq(0).equal(mask.weight.eq(0))) << layer.name;
      }
    }
  }
}

TEST(CompressionJobTest, TheSameRequestWritesTheSameBytes) {
  const fs::path a = test::scratch_dir("compression_job_same_a");
  const fs::path b = test::scratch_dir("compression_job_same_b");
  (void)run_compression(level_request(a), job_registry());
  (void)run_compression(level_request(b), job_registry());
  EXPECT_EQ(read_file(a / "masks.pt"), read_file(b / "masks.pt"));
  EXPECT_EQ(read_file(a / "pruned.pt"), read_file(b / "pruned.pt"));
}

TEST(CompressionJobTest, AModelInMemoryGivesTheBytesOfTheSameModelInAFile) {
  const fs::path dir = test::scratch_dir("compression_job_in_memory");
  (void)run_compression(level_request(dir), job_registry());
  torch::jit::Module module = load_torchscript_module(test::lenet_model());
  const std::string before = [&] {
    std::ostringstream out(std::ios::binary);
    module.save(out);
    return std::move(out).str();
  }();
  CompressionRequest request = level_request(dir);
  std::string model_bytes;
  std::string mask_bytes;
  request.model = ModelSource::in_memory(module, "LeNet in memory");
  request.output = Output::to_memory(&model_bytes);
  request.masks = Output::to_memory(&mask_bytes);
  const CompressionResult result = run_compression(request, job_registry());
  EXPECT_TRUE(result.wrote_files);
  EXPECT_EQ(model_bytes, read_file(dir / "pruned.pt"));
  EXPECT_EQ(mask_bytes, read_file(dir / "masks.pt"));
  // The caller's module is not the one compressed.
  std::ostringstream after(std::ios::binary);
  module.save(after);
  EXPECT_EQ(std::move(after).str(), before);
  // A quantizer's default calibration goes beside a file output; memory has no "beside".
  request.config = parse_compression_config(
      R"({"algorithm": "naive", "config_list": [{"quant_types": ["weight"], "quant_bits": 8,
          "op_types": ["Linear"]}]})",
      "<test>");
  request.masks = Output();
  const CompressionResult quantized = run_compression(request, job_registry());
  EXPECT_TRUE(quantized.calibration_path.empty());
  EXPECT_FALSE(quantized.calibration_json.empty());
}

TEST(CompressionJobTest, FieldErrorsNameTheFieldForEveryFrontEnd) {
  const fs::path dir = test::scratch_dir("compression_job_field_errors");
  CompressionRequest request = level_request(dir);
  request.recalibrate_bn_batches = -2;
  try {
    (void)run_compression(request, job_registry());
    FAIL() << "a negative recalibrate_bn_batches was accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidConfig);
    EXPECT_EQ(e.text().fields(), std::vector<std::string>{"recalibrate_bn_batches"});
    EXPECT_THAT(e.what(), HasSubstr("`recalibrate_bn_batches` must be >= 0"));
    EXPECT_THAT(e.in_words([](const std::string& f) {
      return f == "recalibrate_bn_batches" ? "--recalibrate-bn" : "";
    }),
                HasSubstr("--recalibrate-bn must be >= 0 (0: no re-estimation), got -2"));
  }
  // A rule checked below the jobs (an output that is an input) names the fields too.
  request = level_request(dir);
  request.masks = Output::to_file(test::lenet_model());
  try {
    (void)run_compression(request, job_registry());
    FAIL() << "masks over the model were accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.text().fields(), (std::vector<std::string>{"masks", "model"}));
  }
}

TEST(CompressionJobTest, AQuantizerWritesItsCalibrationBesideTheOutput) {
  const fs::path dir = test::scratch_dir("compression_job_quantize");
  CompressionRequest request;
  request.model = ModelSource::file(test::lenet_model());
  request.config = parse_compression_config(
      R"({"algorithm": "naive", "config_list": [{"quant_types": ["weight"], "quant_bits": 8,
          "op_types": ["Conv2d", "Linear"]}]})",
      "<test>");
  request.output = Output::to_file(dir / "quantized.pt");
  const CompressionResult result = run_compression(request, job_registry());

  EXPECT_EQ(result.kind, AlgorithmKind::kQuantizer);
  EXPECT_EQ(result.calibration_path, dir / "quantized.calibration.json");
  EXPECT_EQ(read_file(result.calibration_path), result.calibration_json);
  EXPECT_EQ(result.quantization.size(), 5U);
  EXPECT_TRUE(fs::is_regular_file(request.output.file));
}

TEST(CompressionJobTest, AFailingJobChangesNoExistingFile) {
  const fs::path dir = test::scratch_dir("compression_job_failure");
  CompressionRequest request = level_request(dir);
  write_file(request.output.file, "previous model");
  write_file(request.masks.file, "previous masks");
  request.fine_tune = true;
  request.train_options.epochs = 1;
  request.data_path = dir / "no_such_data.pt";  // fails after staging, model and session
  EXPECT_THROW((void)run_compression(request, job_registry()), sdk::Error);
  EXPECT_EQ(read_file(request.output.file), "previous model");
  EXPECT_EQ(read_file(request.masks.file), "previous masks");
  // Nothing staged is left behind.
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 2);
}

TEST(CompressionJobTest, MasksForAQuantizerAreRefusedBeforeAnyWork) {
  const fs::path dir = test::scratch_dir("compression_job_masks_for_quantizer");
  CompressionRequest request = level_request(dir);
  request.config = parse_compression_config(
      R"({"algorithm": "naive", "config_list": [{"quant_types": ["weight"], "quant_bits": 8,
          "op_types": ["Linear"]}]})",
      "<test>");
  EXPECT_THAT([&] { (void)run_compression(request, job_registry()); },
              ThrowsMessage<sdk::Error>(
                  HasSubstr("`masks`: 'naive' is a quantizer, which computes no masks")));
  EXPECT_FALSE(fs::exists(request.output.file));
}

TEST(CompressionJobTest, RequestErrorsNameTheFieldTheRuleAndTheValue) {
  const fs::path dir = test::scratch_dir("compression_job_request_errors");
  CompressionRequest request = level_request(dir);
  request.calibration_batches = -3;
  EXPECT_THAT([&] { (void)run_compression(request, job_registry()); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "`calibration_batches` must be >= 0 (0: no calibration), got -3")));
  request = level_request(dir);
  request.output = Output();
  EXPECT_THAT([&] { (void)run_compression(request, job_registry()); },
              ThrowsMessage<sdk::Error>(HasSubstr("`output`: no output model path given")));
  request = level_request(dir);
  request.onnx = Output::to_file(dir / "model.onnx");
  request.onnx_export = {{1, 1, 28, 28}, 12};
  EXPECT_THAT([&] { (void)run_compression(request, job_registry()); },
              ThrowsMessage<sdk::Error>(
                  HasSubstr("`onnx_export.opset` must be between 13 and 17 (what this ONNX library "
                            "validates), got 12")));
  request = level_request(dir);
  request.calibration = Output::to_file(dir / "cal.json");
  EXPECT_THAT([&] { (void)run_compression(request, job_registry()); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "`calibration`: 'level' is not a quantizer, so there is no calibration to "
                  "write")));
  int entries = 0;  // every error came before any file was staged
  for (const auto& entry : fs::directory_iterator(dir)) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 0);
}

TEST(CompressionJobTest, AnOutputThatIsTheModelIsRefused) {
  const fs::path dir = test::scratch_dir("compression_job_output_is_input");
  CompressionRequest request = level_request(dir);
  request.output = Output::to_file(request.model.path());
  const std::string before = read_file(request.model.path());
  EXPECT_THROW((void)run_compression(request, job_registry()), sdk::Error);
  EXPECT_EQ(read_file(request.model.path()), before);
}

}  // namespace
}  // namespace lithe::host
