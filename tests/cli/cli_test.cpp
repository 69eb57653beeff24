// End-to-end tests of the `lithe` executable with the real level plugin module.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CliTest, PluginsFindsTheInTreeLevelPluginWithoutFlags) {
  const CliRun run = run_lithe("plugins");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("loaded  level 1.2.0"));
  EXPECT_THAT(run.out, HasSubstr("pruner level"));
  const CliRun json = run_lithe("plugins --json");
  EXPECT_THAT(json.out, HasSubstr("\"status\": \"loaded\""));
}

TEST(CliTest, PluginsDescribePrintsTheKeysAnAlgorithmDeclares) {
  const CliRun run = run_lithe("plugins --describe agp");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("pruner 'agp': automated gradual pruning"));
  EXPECT_THAT(run.out, HasSubstr("reproduces NNI v2.0 AGPPruner"));
  EXPECT_THAT(run.out, HasSubstr("\"options\" keys:"));
  EXPECT_THAT(run.out, HasSubstr("pruning_algorithm"));
  EXPECT_THAT(run.out, HasSubstr("default \"level\""));
  // One row per key: name, rule, default or required, help.
  const std::string row = run.out.substr(run.out.find("  final_sparsity"));
  EXPECT_THAT(row.substr(0, row.find('\n')),
              ::testing::MatchesRegex(" +final_sparsity +a number in \\[0, 1\\) +required +sparsity "
                                      "reached at end_epoch.*"));
  EXPECT_THAT(run.out, HasSubstr("an integer > 0"));  // frequency

  const CliRun json = run_lithe("plugins --describe level --json");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  EXPECT_THAT(json.out, HasSubstr("\"kind\": \"masker\""));
  EXPECT_THAT(json.out, HasSubstr("\"kind\": \"pruner\""));
  EXPECT_THAT(json.out, HasSubstr("\"key\": \"sparsity\""));
  EXPECT_THAT(json.out, HasSubstr("\"rule\": \"a number in [0, 1)\""));

  const CliRun unknown = run_lithe("plugins --describe agpp");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.out, HasSubstr("--describe 'agpp': no algorithm of that name is registered; "
                                     "known: "));
  EXPECT_THAT(unknown.out, HasSubstr("agp, apoz"));
}

TEST(CliTest, EveryVerbHasHelp) {
  for (const std::string verb :
       {"plugins", "inspect", "compress", "apply", "conformance", "train", "eval", "flops",
        "speedup", "export-onnx", "launch"}) {
    const CliRun run = run_lithe(verb + " --help");
    EXPECT_EQ(run.exit_code, 0) << verb;
    EXPECT_THAT(run.out, HasSubstr("usage: lithe " + verb)) << verb;
  }
  EXPECT_EQ(run_lithe("frobnicate").exit_code, 2);
}

TEST(CliTest, InspectListsModulesWithOpTypes) {
  const CliRun run = run_lithe("inspect --model " + lenet_model().string());
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("fc1                              Linear"));
  EXPECT_THAT(run.out, HasSubstr("12 modules, 44426 weight+bias parameters"));
}

TEST(CliTest, CompressWritesModelMasksAndTable) {
  const auto dir = scratch_dir("cli_compress");
  const CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                            (source_dir() / "samples/configs/level.json").string() +
                            " --output " + (dir / "out.pt").string() + " --masks " +
                            (dir / "masks.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("fc1                          Linear            30720        24576     0.8000   0.8000"));
  EXPECT_THAT(run.out, HasSubstr("fc3                          Linear              840          420     0.5000   0.5000"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "out.pt"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "masks.pt"));

  // The mask file re-applied to the original model gives the same pruning.
  const CliRun apply = run_lithe("apply --model " + lenet_model().string() + " --masks " +
                              (dir / "masks.pt").string() + " --output " +
                              (dir / "applied.pt").string());
  EXPECT_EQ(apply.exit_code, 0) << apply.out;
  EXPECT_THAT(apply.out, HasSubstr("applied masks of 5 layers"));
}

TEST(CliTest, OutputsAreByteIdenticalWhateverTheThreadCount) {
  std::vector<std::string> files;
  for (const int threads : {1, 2}) {
    const auto dir = scratch_dir("cli_threads_" + std::to_string(threads));
    const CliRun run = run_lithe("compress --threads " + std::to_string(threads) + " --model " +
                                 lenet_model().string() + " --config " +
                                 (source_dir() / "samples/configs/level.json").string() +
                                 " --output " + (dir / "out.pt").string() + " --masks " +
                                 (dir / "masks.pt").string());
    ASSERT_EQ(run.exit_code, 0) << run.out;
    files.push_back(read_text(dir / "out.pt"));
    files.push_back(read_text(dir / "masks.pt"));
  }
  EXPECT_FALSE(files[0].empty());
  EXPECT_EQ(files[0], files[2]) << "pruned model differs between 1 and 2 threads";
  EXPECT_EQ(files[1], files[3]) << "masks differ between 1 and 2 threads";
}

TEST(CliTest, BadConfigFailsWithOneLineAndLeavesExistingOutputUntouched) {
  const auto dir = scratch_dir("cli_bad_config");
  write_text(dir / "out.pt", "sentinel");
  write_text(dir / "bad.json",
             R"({"algorithm": "level", "config_list": [{"sparsity": 1.5, "op_types": ["default"]}]})");
  const CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                            (dir / "bad.json").string() + " --output " + (dir / "out.pt").string());
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("/config_list/0/sparsity must be a number in [0, 1), got 1.5"));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
  EXPECT_EQ(read_text(dir / "out.pt"), "sentinel");
}

TEST(CliTest, UnknownTopLevelKeyAndMissingFilesAreNamed) {
  const auto dir = scratch_dir("cli_bad_inputs");
  write_text(dir / "typo.json", R"({"algoritm": "level", "config_list": []})");
  const CliRun typo = run_lithe("compress --model " + lenet_model().string() + " --config " +
                             (dir / "typo.json").string() + " --output " + (dir / "o.pt").string());
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_THAT(typo.out, HasSubstr("/algoritm is not a known key"));

  const CliRun missing = run_lithe("inspect --model " + (dir / "nope.pt").string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.out, HasSubstr("nope.pt' does not exist"));

  write_text(dir / "garbage.pt", "not a model");
  const CliRun garbage = run_lithe("inspect --model " + (dir / "garbage.pt").string());
  EXPECT_EQ(garbage.exit_code, 1);
  EXPECT_THAT(garbage.out, HasSubstr("is not a torch archive"));
  EXPECT_FALSE(std::filesystem::exists(dir / "o.pt"));
}

TEST(CliTest, MissingOutputDirectoryFailsBeforeAnyWork) {
  const auto dir = scratch_dir("cli_missing_dir");
  const CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                               (source_dir() / "samples/configs/level.json").string() +
                               " --output " + (dir / "no/such/out.pt").string());
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("no/such/out.pt': directory '"));
  EXPECT_THAT(run.out, HasSubstr("no/such' does not exist"));
}

TEST(CliTest, MissingRequiredOptionIsAUsageError) {
  const CliRun run = run_lithe("compress --model " + lenet_model().string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.out, HasSubstr("required"));
}

TEST(CliTest, ConformanceRunsAGoldenFolderGivenAsArgument) {
  const auto golden = nni_data_dir() / "golden";
  ASSERT_TRUE(std::filesystem::is_directory(golden / "level_lenet_s0.5")) << "in-repo test data missing: " << golden;
  const CliRun run = run_lithe("conformance " + golden.string() + " --case level_");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("PASS level_lenet_s0.5\n"));
  EXPECT_THAT(run.out, HasSubstr("DEVIATION level_mlp_ties: departure 1"));
  EXPECT_THAT(run.out, HasSubstr(" passed, 0 failed, "));
  EXPECT_THAT(run.out, Not(HasSubstr("FAIL ")));
}

}  // namespace
}  // namespace lithe::test

namespace lithe::test {
namespace {

TEST(CliTest, DependencyAwarePruningReportsTheCoupledLayers) {
  const auto model = nni_data_dir() / "models/resblock.pt";
  ASSERT_TRUE(std::filesystem::is_regular_file(model)) << "in-repo test data missing: " << model;
  const auto dir = scratch_dir("cli_dependency_aware");
  write_text(dir / "dep.json", R"({"algorithm": "l1_filter", "options": {"dependency_aware": true},
      "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]})");
  const CliRun run = run_lithe("compress --model " + model.string() + " --config " +
                               (dir / "dep.json").string() + " --output " +
                               (dir / "out.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("2 set(s) of layers prune common channels: {conv1, "
                                 "layer1.conv2}, {layer2.conv2, layer2.shortcut.0}"));
  const CliRun quiet = run_lithe("compress --log-level warn --model " + model.string() +
                                 " --config " + (dir / "dep.json").string() + " --output " +
                                 (dir / "out.pt").string());
  EXPECT_EQ(quiet.exit_code, 0) << quiet.out;
  EXPECT_THAT(quiet.out, Not(HasSubstr("common channels")));
  const CliRun bad = run_lithe("compress --log-level loud --model " + model.string() +
                               " --config " + (dir / "dep.json").string() + " --output " +
                               (dir / "out.pt").string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.out, HasSubstr("--log-level must be error, warn, info or debug, got 'loud'"));
}

}  // namespace
}  // namespace lithe::test
