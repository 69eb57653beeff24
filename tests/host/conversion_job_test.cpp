// run_conversion: the certified int8 conversion the CLI and embedders share. LeNet quantized by
// qat (linked directly) and calibrated on Fashion-MNIST converts to the same int8 bytes from a
// file and from memory, certifies the int8 model against the fake-quantized one, and refuses a
// bad request naming its fields before anything is written.
#include "lithe/host/jobs/conversion_job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "lithe/host/io/file_io.h"
#include "lithe/host/jobs/compression_job.h"
#include "lithe/host/train/dataset.h"
#include "plugins/qat/qat.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// LeNet quantized by qat on every Conv2d and Linear, calibrated on two batches: its bytes.
const std::string& quantized_lenet() {
  static const std::string* bytes = [] {
    PluginRegistry registry;
    plugins::qat::register_algorithms(registry);
    auto* out = new std::string();
    CompressionRequest request;
    request.model = ModelSource::file(test::lenet_model());
    request.config = parse_compression_config(
        R"({"algorithm": "qat", "config_list": [{"quant_types": ["input", "weight", "output"],
            "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}]})",
        "<test>");
    request.output = Output::to_memory(out);
    request.data_path = kDefaultDataDir;
    request.calibration_batches = 2;
    (void)run_compression(request, registry);
    return out;
  }();
  return *bytes;
}

ConversionRequest lenet_request() {
  ConversionRequest request;
  request.input_shape = {4, 1, 28, 28};
  request.samples = 4;
  request.latency_runs = 2;
  request.warmup = 0;
  return request;
}

TEST(ConversionJobTest, AModelInMemoryConvertsToTheBytesOfTheSameModelInAFile) {
  const fs::path dir = test::scratch_dir("conversion_job_in_memory");
  write_file(dir / "q.pt", quantized_lenet());
  ConversionRequest from_file = lenet_request();
  from_file.model = ModelSource::file(dir / "q.pt");
  from_file.int8 = Output::to_file(dir / "int8.pt");
  from_file.certificate = Output::to_file(dir / "certificate.json");
  const ConversionResult on_disk = run_conversion(from_file);

  std::string int8_bytes;
  std::string certificate;
  ConversionRequest in_memory = lenet_request();
  in_memory.model = ModelSource::in_memory(module_from_bytes(quantized_lenet()), "qat LeNet");
  in_memory.int8 = Output::to_memory(&int8_bytes);
  in_memory.certificate = Output::to_memory(&certificate);
  const ConversionResult c = run_conversion(in_memory);

  EXPECT_EQ(int8_bytes, read_file(dir / "int8.pt"));
  EXPECT_EQ(c.int8_bytes, int8_bytes.size());
  EXPECT_EQ(certificate, c.certificate_json);
  EXPECT_EQ(read_file(dir / "certificate.json"), on_disk.certificate_json);
  // Every Conv2d and Linear runs int8, and agrees with the fake-quantized model within a step.
  EXPECT_EQ(c.report.int8_layers.size(), 5U);
  EXPECT_TRUE(c.report.float_layers.empty());
  EXPECT_EQ(c.samples, 4);
  EXPECT_EQ(c.against_fake_quantized.rows, 16);
  EXPECT_GE(c.against_fake_quantized.top1(), 0.75);
  ASSERT_GT(c.output_step, 0);
  EXPECT_LE(c.against_fake_quantized.max_abs, 2.01 * c.output_step);
  const nlohmann::json parsed = nlohmann::json::parse(certificate);
  EXPECT_EQ(parsed["model"], "qat LeNet");
  EXPECT_EQ(parsed["check"]["first_output"].size(), 40U);  // 4 rows of 10 logits
  EXPECT_FALSE(parsed["onnxruntime"]["run"].get<bool>());
}

TEST(ConversionJobTest, ABadRequestNamesItsFieldsAndWritesNothing) {
  const fs::path dir = test::scratch_dir("conversion_job_bad_request");
  ConversionRequest request = lenet_request();
  request.model = ModelSource::in_memory(module_from_bytes(quantized_lenet()));
  request.int8 = Output::to_file(dir / "int8.pt");
  request.samples = 0;
  try {
    (void)run_conversion(request);
    FAIL() << "samples 0 was accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.text().fields(),
              (std::vector<std::string>{"samples", "latency_runs", "warmup"}));
  }
  request = lenet_request();
  request.model = ModelSource::in_memory(module_from_bytes(quantized_lenet()));
  request.int8 = Output::to_file(dir / "int8.pt");
  request.input_shape = {4, 3, 28, 28};  // LeNet reads one channel
  EXPECT_THROW((void)run_conversion(request), sdk::Error);
  request.input_shape = {4, 1, 28, 28};
  request.int8 = Output();
  try {
    (void)run_conversion(request);
    FAIL() << "a conversion without an int8 output was accepted";
  } catch (const FieldError& e) {
    EXPECT_THAT(e.what(), HasSubstr("`int8`: no int8 model path given"));
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

}  // namespace
}  // namespace lithe::host
