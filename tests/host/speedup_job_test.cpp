// run_speedup_check: the checked speedup the CLI and embedders share. LeNet with three of
// conv1's six filters masked shrinks conv1 and conv2 to the same bytes from files and from
// memory, reports fewer parameters and FLOPs, and refuses a bad request naming its fields
// before anything is written.
#include "lithe/host/jobs/speedup_job.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "lithe/host/io/file_io.h"
#include "lithe/host/model/model.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// conv1 (6 filters of 1x5x5) without filters 0, 2 and 4.
NamedMasks conv1_masks() {
  sdk::Masks m;
  m.weight = at::ones({6, 1, 5, 5});
  m.bias = at::ones({6});
  for (const int64_t f : {0, 2, 4}) {
    m.weight[f].zero_();
    (*m.bias)[f].zero_();
  }
  return {{"conv1", m}};
}

SpeedupRequest quick_request() {
  SpeedupRequest request;
  request.input_shape = {1, 1, 28, 28};
  request.latency_runs = 2;
  request.warmup = 0;
  return request;
}

TEST(SpeedupJobTest, MasksInMemoryGiveTheBytesOfTheSameMasksInFiles) {
  const fs::path dir = test::scratch_dir("speedup_job_in_memory");
  write_masks(conv1_masks(), dir / "masks.pth");
  SpeedupRequest from_files = quick_request();
  from_files.model = ModelSource::file(test::lenet_model());
  from_files.masks_path = dir / "masks.pth";
  from_files.output = Output::to_file(dir / "small.pt");
  from_files.report = Output::to_file(dir / "report.json");
  const SpeedupCheck on_disk = run_speedup_check(from_files);

  std::string small;
  SpeedupRequest in_memory = quick_request();
  in_memory.model =
      ModelSource::in_memory(load_torchscript_module(test::lenet_model()), "LeNet in memory");
  in_memory.masks = conv1_masks();
  in_memory.output = Output::to_memory(&small);
  const SpeedupCheck c = run_speedup_check(in_memory);

  EXPECT_EQ(small, read_file(dir / "small.pt"));
  EXPECT_EQ(read_file(dir / "report.json"), on_disk.report_json);
  ASSERT_GE(c.speedup.layers.size(), 2U);
  EXPECT_EQ(c.speedup.layers[0].module, "conv1");
  EXPECT_EQ(c.speedup.layers[0].weight_shape_after, (std::vector<int64_t>{3, 1, 5, 5}));
  EXPECT_TRUE(c.speedup.explained(kSpeedupTolerance));
  EXPECT_LT(c.params_after, c.params_before);
  ASSERT_TRUE(c.flops.problem.empty()) << c.flops.problem;
  EXPECT_LT(c.flops.after, c.flops.before);
  EXPECT_EQ(c.bytes_after, small.size());
  EXPECT_EQ(c.latency_baseline, "masked model");
  const nlohmann::json report = nlohmann::json::parse(c.report_json);
  EXPECT_EQ(report["model"], "LeNet in memory");
  EXPECT_EQ(report["masks"], "the masks in memory");
}

TEST(SpeedupJobTest, ABadRequestNamesItsFieldsAndWritesNothing) {
  const fs::path dir = test::scratch_dir("speedup_job_bad_request");
  SpeedupRequest request = quick_request();
  request.model = ModelSource::file(test::lenet_model());
  request.masks = conv1_masks();
  request.output = Output::to_file(dir / "small.pt");
  request.latency_runs = 0;
  try {
    (void)run_speedup_check(request);
    FAIL() << "latency_runs 0 was accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.text().fields(), (std::vector<std::string>{"latency_runs", "warmup"}));
  }
  request = quick_request();
  request.model = ModelSource::file(test::lenet_model());
  request.output = Output::to_file(dir / "small.pt");
  try {
    (void)run_speedup_check(request);
    FAIL() << "a request without masks was accepted";
  } catch (const FieldError& e) {
    EXPECT_THAT(e.what(), HasSubstr("`masks`: no masks given (in memory or as `masks_path`)"));
  }
  // A dense model of another architecture is refused as the latency baseline.
  request.masks = conv1_masks();
  request.dense_model = ModelSource::file(test::shared_blocks_model());
  try {
    (void)run_speedup_check(request);
    FAIL() << "a dense model of another architecture was accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.text().fields().front(), "dense_model");
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

}  // namespace
}  // namespace lithe::host
