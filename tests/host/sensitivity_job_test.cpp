// run_sensitivity: the sensitivity analysis the CLI and embedders share. LeNet's two
// convolutions analysed with the level pruner give the same table from a file and from memory;
// an allocation becomes a config of the analysed pruner; a bad request names its fields and
// writes nothing.
#include "lithe/host/jobs/sensitivity_job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "lithe/host/io/file_io.h"
#include "lithe/host/model/model.h"
#include "lithe/host/train/dataset.h"
#include "support/registry.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

SensitivityRequest sensitivity_request() {
  SensitivityRequest request;
  request.analysis.algorithm = "level";
  request.analysis.sparsities = {0.5, 0.9};
  request.analysis.layers = {"conv1", "conv2"};
  request.data_path = kDefaultDataDir;
  request.eval_samples = 256;
  return request;
}

TEST(SensitivityJobTest, AModelInMemoryGivesTheTableOfTheSameModelInAFile) {
  const fs::path dir = test::scratch_dir("sensitivity_job_in_memory");
  SensitivityRequest from_file = sensitivity_request();
  from_file.model = ModelSource::file(test::lenet_model());
  from_file.csv = Output::to_file(dir / "table.csv");
  const SensitivityReport on_disk = run_sensitivity(from_file, test::level_registry());

  std::string csv;
  std::string config;
  SensitivityRequest in_memory = sensitivity_request();
  in_memory.model = ModelSource::in_memory(load_torchscript_module(test::lenet_model()));
  in_memory.csv = Output::to_memory(&csv);
  in_memory.allocation = AllocationOptions{0.3, 0.5, 0.95};
  in_memory.allocation_config = Output::to_memory(&config);
  const SensitivityReport report = run_sensitivity(in_memory, test::level_registry());

  EXPECT_EQ(csv, read_file(dir / "table.csv"));
  EXPECT_EQ(report.csv, on_disk.csv);
  EXPECT_EQ(report.samples, 256);
  ASSERT_EQ(report.analysis.rows.size(), 2U);
  EXPECT_EQ(report.analysis.rows[0].layer, "conv1");
  EXPECT_EQ(report.analysis.evaluations, 5);  // the original, then 2 layers x 2 sparsities
  ASSERT_EQ(report.allocation.size(), 2U);
  const nlohmann::json parsed = nlohmann::json::parse(config);
  EXPECT_EQ(parsed["algorithm"], "level");
  EXPECT_FALSE(parsed["config_list"].empty());
  EXPECT_EQ(config, report.allocation_config_json);
}

TEST(SensitivityJobTest, ABadRequestNamesItsFieldsAndWritesNothing) {
  const fs::path dir = test::scratch_dir("sensitivity_job_bad_request");
  SensitivityRequest request = sensitivity_request();
  request.model = ModelSource::file(test::lenet_model());
  request.csv = Output::to_file(dir / "table.csv");
  request.analysis.layers = {"fc1"};
  try {
    (void)run_sensitivity(request, test::level_registry());
    FAIL() << "a Linear layer among Conv2d op types was accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.text().fields(), (std::vector<std::string>{"layers", "op_types"}));
  }
  request = sensitivity_request();
  request.model = ModelSource::file(test::lenet_model());
  request.allocation_config = Output::to_file(dir / "config.json");
  EXPECT_THAT([&] { (void)run_sensitivity(request, test::level_registry()); },
              ::testing::ThrowsMessage<FieldError>(
                  HasSubstr("`allocation_config` needs `allocation`")));
  request.allocation = AllocationOptions{1.5, 0.05, 0.95};
  EXPECT_THAT([&] { (void)run_sensitivity(request, test::level_registry()); },
              ::testing::ThrowsMessage<FieldError>(HasSubstr("`target` must be in (0, 1)")));
  request.allocation.reset();
  request.allocation_config = Output();
  request.analysis.algorithm_options_json = "{";
  EXPECT_THAT([&] { (void)run_sensitivity(request, test::level_registry()); },
              ::testing::ThrowsMessage<FieldError>(HasSubstr("`algorithm_options_json`")));
  EXPECT_TRUE(fs::is_empty(dir));
}

}  // namespace
}  // namespace lithe::host
