// End-to-end tests of `lithe sensitivity`: the table, --json and --csv on the bundled LeNet with
// Fashion-MNIST's test images, and hostile arguments (one line, non-zero exit, nothing written).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "lithe/host/train/dataset.h"
#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class SensitivityCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::error_code ec;
    if (!std::filesystem::is_directory(host::kDefaultDataDir, ec)) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
  }
  static std::string lenet_args() {
    return "sensitivity --model " + lenet_model().string() + " --eval-samples 300 --threads 2";
  }
};

TEST_F(SensitivityCliTest, PrintsTheTableAndWritesNnisCsv) {
  const auto out = scratch_dir("cli_sensitivity");
  const CliRun run = run_lithe(lenet_args() + " --algorithm l1_filter --sparsities 0.75,0.25,0.5" +
                               " --csv " + (out / "s.csv").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("on 300 samples"));
  EXPECT_THAT(run.out, HasSubstr("layer \\ sparsity            0.25    0.50    0.75"));
  const std::string csv = read_text(out / "s.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "layername,0.25,0.5,0.75");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);  // header, conv1, conv2

  // The HTML report: one point per trial (the report's own test checks the values).
  const CliRun report = run_lithe(lenet_args() + " --algorithm l1_filter --sparsities 0.5,0.9" +
                                  " --report " + (out / "s.html").string());
  ASSERT_EQ(report.exit_code, 0) << report.out;
  EXPECT_THAT(report.out, HasSubstr("wrote " + (out / "s.html").string()));
  const std::string html = read_text(out / "s.html");
  size_t circles = 0;
  for (size_t at = html.find("<circle"); at != std::string::npos;
       at = html.find("<circle", at + 1)) {
    ++circles;
  }
  EXPECT_EQ(circles, 4U);  // conv1 and conv2 at 0.5 and 0.9
  EXPECT_THAT(html, HasSubstr("data-series=\"conv2\" data-x=\"0.9\""));

  const CliRun json = run_lithe(lenet_args() + " --algorithm level --op-types Conv2d,Linear" +
                                " --layers fc1,conv2 --sparsities 0.5,0.9 --json");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const auto summary = nlohmann::json::parse(json.out.substr(json.out.find('{')));
  EXPECT_EQ(summary.at("samples").get<int64_t>(), 300);
  EXPECT_EQ(summary.at("evaluations").get<int64_t>(), 5);
  ASSERT_EQ(summary.at("layers").size(), 2U);
  EXPECT_EQ(summary.at("layers")[0].at("name"), "fc1");
  for (const auto& layer : summary.at("layers")) {
    for (const auto& [sparsity, accuracy] : layer.at("metrics").items()) {
      EXPECT_GE(accuracy.get<double>(), 0.0) << sparsity;
      EXPECT_LE(accuracy.get<double>(), 1.0) << sparsity;
    }
  }
}

TEST_F(SensitivityCliTest, AllocatesPerLayerSparsitiesThatCompressRunsAtTheTarget) {
  const auto out = scratch_dir("cli_sensitivity_allocation");
  const CliRun run = run_lithe(lenet_args() + " --algorithm level --op-types Conv2d,Linear" +
                               " --sparsities 0.3,0.6,0.9 --target-sparsity 0.6 --json" +
                               " --write-config " + (out / "alloc.json").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto summary = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  ASSERT_EQ(summary.at("allocation").size(), 5U);
  // The written config prunes exactly 60% of the analysed weights overall.
  const CliRun compress = run_lithe("compress --json --model " + lenet_model().string() +
                                    " --config " + (out / "alloc.json").string() +
                                    " --output " + (out / "pruned.pt").string());
  ASSERT_EQ(compress.exit_code, 0) << compress.out;
  const auto pruned = nlohmann::json::parse(compress.out.substr(compress.out.find("{\n")));
  int64_t zeros = 0;
  int64_t params = 0;
  for (const auto& layer : pruned.at("layers")) {
    zeros += layer.at("pruned").get<int64_t>();
    params += layer.at("params").get<int64_t>();
  }
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(params), 0.6, 5.0 / params);
  // Each layer's sparsity follows what it tolerated: more tolerance, more pruning.
  const auto& allocation = summary.at("allocation");
  for (const auto& a : allocation) {
    for (const auto& b : allocation) {
      if (a.at("tolerated").get<double>() < b.at("tolerated").get<double>()) {
        EXPECT_LT(a.at("sparsity").get<double>(), b.at("sparsity").get<double>());
      }
    }
  }
  const CliRun orphan = run_lithe(lenet_args() + " --algorithm level --write-config " +
                                  (out / "orphan.json").string());
  EXPECT_NE(orphan.exit_code, 0);
  EXPECT_THAT(orphan.out, HasSubstr("--write-config needs --target-sparsity"));
  EXPECT_FALSE(std::filesystem::exists(out / "orphan.json"));
}

TEST_F(SensitivityCliTest, HostileArgumentsFailInOneLineAndWriteNothing) {
  const auto out = scratch_dir("cli_sensitivity_hostile");
  write_text(out / "existing.csv", "previous");
  const std::string csv = " --csv " + (out / "existing.csv").string();
  const struct {
    std::string args;
    std::string message;
  } cases[] = {
      {" --algorithm level --sparsities 0.5,abc", "--sparsities: 'abc' is not a number"},
      {" --algorithm level --sparsities 0.5,1.5", "every sparsity must be in (0, 1), got 1.5"},
      {" --algorithm level --early-stop dropping:0.1", "--early-stop: the mode must be"},
      {" --algorithm level --early-stop dropped:", "needs a number after the colon"},
      {" --algorithm level --layers fc9", "the model has no module 'fc9'"},
      {" --algorithm level --options '{bad'", "--options is not valid JSON"},
      {" --algorithm no_such_pruner", "no_such_pruner"},
      {" --algorithm level --op-types ,", "--op-types: no module type in ','"},
      {" --algorithm level --sparsities ,", "--sparsities: no sparsity in ','"},
      {" --algorithm level --layers fc1", "--layers: module 'fc1' is a Linear"},
      {" --algorithm level --target-sparsity 1.5", "--target-sparsity must be in (0, 1)"},
      {" --algorithm level --max-sparsity 0.5", "--max-sparsity has no effect without"},
  };
  for (const auto& c : cases) {
    const CliRun run = run_lithe(lenet_args() + c.args + csv);
    EXPECT_NE(run.exit_code, 0) << c.args;
    EXPECT_THAT(run.out, HasSubstr(c.message)) << c.args;
    EXPECT_EQ(read_text(out / "existing.csv"), "previous") << c.args;
  }
  const CliRun negative = run_lithe("sensitivity --model " + lenet_model().string() +
                                    " --algorithm level --eval-samples -3" + csv);
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_THAT(negative.out, HasSubstr("--eval-samples must be >= 0, got -3"));
  EXPECT_EQ(read_text(out / "existing.csv"), "previous");
  // A report into a directory, or onto the CSV, is refused before any work.
  const CliRun into_dir = run_lithe(lenet_args() + " --algorithm level --report " + out.string());
  EXPECT_NE(into_dir.exit_code, 0);
  EXPECT_THAT(into_dir.out, HasSubstr("--report"));
  const CliRun same = run_lithe(lenet_args() + " --algorithm level" + csv + " --report " +
                                (out / "existing.csv").string());
  EXPECT_NE(same.exit_code, 0);
  EXPECT_THAT(same.out, AllOf(HasSubstr("--report"), HasSubstr("--csv")));
  EXPECT_EQ(read_text(out / "existing.csv"), "previous");
  // The CSV may not be the model itself.
  const CliRun onto_model = run_lithe(lenet_args() + " --algorithm level --csv " +
                                      lenet_model().string());
  EXPECT_NE(onto_model.exit_code, 0);
  EXPECT_THAT(onto_model.out, AllOf(HasSubstr("--csv"), HasSubstr("--model")));
}

}  // namespace
}  // namespace lithe::test
