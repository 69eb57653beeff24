// End-to-end tests of `lithe flops`: the table, --json, --masks and option errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>

#include "lithe/host/io/mask_file.h"
#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string lenet_args() {
  return "flops --model " + (nni_data_dir() / "models/lenet.pt").string() +
         " --input-shape 1,1,28,28";
}

TEST(FlopsCliTest, PrintsTheLayerTableAndTotals) {
  const CliRun run = run_lithe(lenet_args());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(
      run.out,
      HasSubstr("Index  Name   Type    Input      Output     Weight shape   FLOPs  #Params"));
  EXPECT_THAT(
      run.out,
      HasSubstr("    0  conv1  Conv2d  1x1x28x28  1x6x24x24  6x1x5x5        86400      156"));
  EXPECT_THAT(
      run.out,
      HasSubstr("    4  fc3    Linear  1x84       1x10       10x84            840      850"));
  EXPECT_THAT(run.out, HasSubstr("FLOPs total: 281640\n#Params total: 44426\n"));
  const CliRun help = run_lithe("flops --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: lithe flops --model M.pt --input-shape"));
}

TEST(FlopsCliTest, JsonHasEveryLayerAndTheTotals) {
  const CliRun run = run_lithe(lenet_args() + " --mode full --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json.at("mode"), "full");
  EXPECT_EQ(json.at("total_flops"), 286334);  // NNI v2.0, golden flops_lenet
  EXPECT_EQ(json.at("total_params"), 44426);
  ASSERT_EQ(json.at("layers").size(), 5u);
  EXPECT_EQ(json["layers"][0].at("name"), "conv1");
  EXPECT_EQ(json["layers"][0].at("type"), "Conv2d");
  EXPECT_EQ(json["layers"][0].at("input_shape"), nlohmann::json({1, 1, 28, 28}));
  EXPECT_EQ(json["layers"][0].at("output_shape"), nlohmann::json({1, 6, 24, 24}));
  EXPECT_EQ(json["layers"][0].at("weight_shape"), nlohmann::json({6, 1, 5, 5}));
  EXPECT_EQ(json["layers"][0].at("flops"), 89856);
}

TEST(FlopsCliTest, MasksReduceTheCountAndLeaveTheModelFileAlone) {
  const auto dir = scratch_dir("flops_cli_masks");
  // conv2 keeps 8 of its 16 filters: 8 · 8·8 · 25 · 6 = 76800 instead of 153600.
  at::Tensor conv2 = torch::ones({16, 6, 5, 5});
  conv2.slice(0, 0, 8).zero_();
  host::NamedMasks masks;
  masks.emplace_back("conv2", sdk::Masks{conv2, torch::ones({16})});
  host::save_masks(masks, dir / "mask.pth");
  const std::string model_bytes = read_text(nni_data_dir() / "models/lenet.pt");
  const CliRun run = run_lithe(lenet_args() + " --masks " + (dir / "mask.pth").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(
      run.out,
      HasSubstr("    1  conv2  Conv2d  1x6x12x12  1x16x8x8   16x6x5x5      76800     2416"));
  EXPECT_THAT(run.out, HasSubstr("FLOPs total: 204840\n#Params total: 44426\n"));
  EXPECT_EQ(read_text(nni_data_dir() / "models/lenet.pt"), model_bytes);

  // A mask of the wrong shape: the file, the layer and both shapes are named.
  masks[0].second.weight = torch::ones({16, 6, 3, 3});
  masks[0].second.bias.reset();
  host::save_masks(masks, dir / "bad.pth");
  const CliRun bad = run_lithe(lenet_args() + " --masks " + (dir / "bad.pth").string());
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_THAT(bad.out,
              AllOf(HasSubstr("lithe flops: error: --masks '"), HasSubstr("bad.pth"),
                    HasSubstr("layer 'conv2'"), HasSubstr("16x6x3x3"), HasSubstr("16x6x5x5")));
  EXPECT_THAT(bad.out, Not(HasSubstr("FLOPs total")));
}

TEST(FlopsCliTest, BadOptionsAreNamedWithTheValue) {
  for (const std::string shape : {"1,x,28,28", "1,,28,28", "1,1,28,", "0,1,28,28", "-1,1"}) {
    const CliRun run =
        run_lithe("flops --model " + (nni_data_dir() / "models/lenet.pt").string() +
                  " --input-shape=" + shape);
    EXPECT_EQ(run.exit_code, 1) << shape << ": " << run.out;
    EXPECT_THAT(run.out, HasSubstr("--input-shape must be a comma-separated list of positive "
                                   "integers with the batch first (e.g. 1,3,32,32), got '" +
                                   shape + "'"))
        << shape;
  }
  const CliRun mode = run_lithe(lenet_args() + " --mode fast");
  EXPECT_EQ(mode.exit_code, 1);
  EXPECT_THAT(mode.out, HasSubstr("--mode must be 'default', 'full' or 'ops', got 'fast'"));
  const CliRun missing =
      run_lithe("flops --model " + (nni_data_dir() / "models/lenet.pt").string());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.out, HasSubstr("input-shape"));
  const CliRun not_a_model = run_lithe("flops --model /nonexistent.pt --input-shape 1,1,28,28");
  EXPECT_EQ(not_a_model.exit_code, 1);
  EXPECT_THAT(not_a_model.out, HasSubstr("model file '/nonexistent.pt' does not exist"));
}

TEST(FlopsCliTest, OpsModeCountsFunctionalOpsAndAModelsWarningIsPrintedOnce) {
  const auto dir = scratch_dir("flops_cli_ops");
  // A forward that warns every time it runs (as scripted torchvision GoogLeNet does); counting
  // in ops mode runs it several times (the fixed-shape trace).
  torch::jit::Module module("Warns");
  module.define(R"(
def forward(self, x):
    torch.warn("this model warns on every forward")
    return torch.matmul(x, x.transpose(2, 3)).relu()
)");
  module.save((dir / "warns.pt").string());
  const CliRun run = run_lithe("flops --model " + (dir / "warns.pt").string() +
                               " --input-shape 1,2,3,4 --mode ops --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const std::string warning = "lithe: warning: this model warns on every forward";
  EXPECT_THAT(run.out, HasSubstr(warning));
  EXPECT_EQ(run.out.find(warning), run.out.rfind(warning)) << run.out;
  const nlohmann::json report = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  EXPECT_EQ(report.at("mode"), "ops");
  // matmul: 1·2·3·3 outputs of 4 products each; relu: one per output value.
  EXPECT_EQ(report.at("total_flops"), 72 + 18);
  EXPECT_EQ(report.at("layers").size(), 2u);
}

}  // namespace
}  // namespace lithe::test
