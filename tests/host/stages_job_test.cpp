// run_stages and parse_stages: the staged compression the CLI's pipeline and embedders share.
// A stage config is checked whole before any stage runs (hostile configs get one line naming
// the JSON path); LeNet pruned, sped up, quantized and converted gives the same bytes from a
// file and from memory, with a row per stage.
#include "lithe/host/jobs/stages_job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "lithe/host/io/file_io.h"
#include "lithe/host/train/dataset.h"
#include "plugins/level/level.h"
#include "plugins/qat/qat.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::testing::ThrowsMessage;

const PluginRegistry& stage_registry() {
  static PluginRegistry* r = [] {
    auto* out = new PluginRegistry();
    plugins::level::register_algorithms(*out);
    plugins::qat::register_algorithms(*out);
    return out;
  }();
  return *r;
}

constexpr const char* kPrune =
    R"({"compress": {"algorithm": "level", "config_list": [{"sparsity": 0.5,
        "op_types": ["default"]}]}})";
constexpr const char* kQuantize =
    R"({"compress": {"algorithm": "qat", "config_list": [{"quant_types": ["input", "weight",
        "output"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}]},
        "calibration_batches": 2})";

std::string stages_text(const std::vector<std::string>& stages) {
  std::string text = R"({"stages": [)";
  for (size_t i = 0; i < stages.size(); ++i) {
    text += (i > 0 ? ", " : "") + stages[i];
  }
  return text + "]}";
}

TEST(StagesJobTest, EveryRuleThatNeedsNoModelIsCheckedBeforeAnyStage) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[]", "<cfg>: /: must be an object"},
      {R"({"stages": [], "x": 1})", "<cfg>: /x: unknown key"},
      {R"({"stages": []})", "<cfg>: /stages: must be a non-empty list"},
      {stages_text({R"({"speedup": {}})"}), "<cfg>: /stages/0: speedup needs a pruning stage"},
      {stages_text({kPrune, kPrune}), "<cfg>: /stages/1: a second pruner before"},
      {stages_text({kPrune, kQuantize}), "<cfg>: /stages/1: a quantizer after a pruner"},
      {stages_text({kQuantize, R"({"convert": {}})", kQuantize}),
       "<cfg>: /stages/1: convert must be the last stage"},
      {stages_text({R"({"convert": {}})"}), "<cfg>: /stages/0: convert needs a quantization"},
      {stages_text({kQuantize, R"({"convert": {}, "engine": "tpu"})"}), "/stages/1/engine"},
      {stages_text({R"({"compress": {}, "speedup": {}})"}), "must have exactly one of"},
      {stages_text({R"({"compress": {"algorithm": "level", "config_list": [{"sparsity": 0.5,
          "op_types": ["default"]}]}, "epochs": 0})"}),
       "<cfg>: /stages/0/epochs: must be an integer >= 1, got 0"},
      {R"({"stages": [{"stages": [{"stages": 1}]}]})", "must have exactly one of"},
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_THAT([&] { (void)parse_stages(text, "<cfg>", stage_registry()); },
                ThrowsMessage<sdk::Error>(HasSubstr(expected)))
        << text;
  }
}

TEST(StagesJobTest, RandomBytesAreRefusedInOneLineAndNeverCrash) {
  // Fuzz: mutations of a valid config parse or fail with one sdk::Error line, never anything
  // else.
  const std::string valid = stages_text({kPrune, R"({"speedup": {}})", kQuantize,
                                         R"({"convert": {}})"});
  ASSERT_EQ(parse_stages(valid, "<cfg>", stage_registry()).size(), 4U);
  std::mt19937 random(44);
  for (int round = 0; round < 500; ++round) {
    std::string text = valid;
    for (int edits = 1 + static_cast<int>(random() % 3); edits > 0; --edits) {
      const size_t at = random() % text.size();
      switch (random() % 3) {
        case 0: text.erase(at, 1 + random() % 8); break;
        case 1: text.insert(at, 1, static_cast<char>(random() % 128)); break;
        default: text[at] = "{}[],:\"0e-"[random() % 10]; break;
      }
    }
    try {
      (void)parse_stages(text, "<cfg>", stage_registry());
    } catch (const sdk::Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

TEST(StagesJobTest, AModelInMemoryRunsEveryStageToTheBytesOfTheSameModelInAFile) {
  const fs::path dir = test::scratch_dir("stages_job_in_memory");
  StagesRequest request;
  request.stages = parse_stages(
      stages_text({kPrune, R"({"speedup": {}})", kQuantize, R"({"convert": {}})"}), "<cfg>",
      stage_registry());
  request.stages_source = "<cfg>";
  request.input_shape = {1, 1, 28, 28};
  request.data_path = kDefaultDataDir;
  request.measure_accuracy = false;
  request.model = ModelSource::file(test::lenet_model());
  request.output = Output::to_file(dir / "int8.pt");
  request.report = Output::to_file(dir / "report.json");
  const StagesResult on_disk = run_stages(request, stage_registry());

  std::string int8;
  request.model = ModelSource::in_memory(load_torchscript_module(test::lenet_model()));
  request.output = Output::to_memory(&int8);
  request.report = Output();
  const StagesResult result = run_stages(request, stage_registry());

  EXPECT_EQ(int8, read_file(dir / "int8.pt"));
  EXPECT_EQ(read_file(dir / "report.json"), on_disk.report_json);
  ASSERT_EQ(result.rows.size(), 5U);  // the input, then one per stage
  EXPECT_EQ(result.rows[0].stage, "input");
  EXPECT_EQ(result.rows[1].stage, "level");
  EXPECT_EQ(result.rows[2].stage, "speedup");
  EXPECT_EQ(result.rows[3].stage, "qat");
  EXPECT_THAT(result.rows[4].stage, StartsWith("convert ("));
  EXPECT_EQ(result.rows[4].file_bytes, int8.size());
  EXPECT_LT(result.rows[4].file_bytes, result.rows[0].file_bytes);  // int8 weights
  EXPECT_EQ(result.rows[4].flops, result.rows[3].flops);  // the quantized model's count
  for (const StageRow& row : result.rows) {
    EXPECT_GT(row.latency_ms, 0) << row.stage;
    EXPECT_FALSE(row.accuracy.has_value()) << row.stage;
  }
}

TEST(StagesJobTest, AStageErrorNamesTheConfigAndTheStage) {
  const fs::path dir = test::scratch_dir("stages_job_stage_error");
  StagesRequest request;
  // conv9 does not exist: found only when the stage starts on the model.
  request.stages = parse_stages(
      stages_text({R"({"compress": {"algorithm": "level", "config_list": [{"sparsity": 0.5,
          "op_names": ["conv9"]}]}})"}),
      "<cfg>", stage_registry());
  request.stages_source = "<cfg>";
  request.input_shape = {1, 1, 28, 28};
  request.measure_accuracy = false;
  request.model = ModelSource::file(test::lenet_model());
  request.output = Output::to_file(dir / "out.pt");
  EXPECT_THAT([&] { (void)run_stages(request, stage_registry()); },
              ThrowsMessage<sdk::Error>(HasSubstr("<cfg>: /stages/0/compress: ")));
  EXPECT_TRUE(fs::is_empty(dir));
}

}  // namespace
}  // namespace lithe::host
