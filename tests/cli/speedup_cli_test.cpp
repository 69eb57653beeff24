// `lithe speedup` end to end: compress with the real filter pruner plugin, speed up, and load the
// written model back; bad inputs leave no output behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Prunes the bundled LeNet's convolutions by half and returns {masked model, masks}.
std::pair<fs::path, fs::path> pruned_lenet(const fs::path& dir) {
  write_text(dir / "l1.json",
             R"({"algorithm": "l1_filter", "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]})");
  const CliRun run = run_lithe("compress --model " + lenet_model().string() + " --config " +
                               (dir / "l1.json").string() + " --output " +
                               (dir / "masked.pt").string() + " --masks " +
                               (dir / "masks.pth").string());
  EXPECT_EQ(run.exit_code, 0) << run.out;
  return {dir / "masked.pt", dir / "masks.pth"};
}

TEST(SpeedupCliTest, WritesASmallerModelThatLoadsAndReportsTheRatios) {
  const fs::path dir = scratch_dir("speedup_cli_ok");
  const auto [masked, masks] = pruned_lenet(dir);
  const CliRun run = run_lithe("speedup --model " + masked.string() + " --masks " +
                               masks.string() + " --input-shape 2,1,28,28 --output " +
                               (dir / "small.pt").string() + " --json " +
                               (dir / "report.json").string() + " --latency-runs 5 --warmup 1");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("conv2"));
  EXPECT_THAT(run.out, HasSubstr("latency ms"));
  torch::jit::Module small = torch::jit::load((dir / "small.pt").string());
  EXPECT_EQ(small.attr("conv1").toModule().attr("weight").toTensor().size(0), 3);
  EXPECT_EQ(small.attr("fc1").toModule().attr("weight").toTensor().size(1), 128);
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  EXPECT_LT(report["max_abs_diff"].get<double>(), 1e-4);
  EXPECT_LT(report["params"]["after"].get<int64_t>(), report["params"]["before"].get<int64_t>());
  EXPECT_LT(report["flops"]["ratio"].get<double>(), 0.6);
  // Every op counted too (ReLU, pooling): more FLOPs than NNI's count, and fewer after.
  EXPECT_GT(report["flops_every_op"]["before"].get<int64_t>(),
            report["flops"]["before"].get<int64_t>());
  EXPECT_LT(report["flops_every_op"]["ratio"].get<double>(), 0.6);
  EXPECT_THAT(run.out, HasSubstr("FLOPs (every op)"));
  EXPECT_GT(report["latency_ms"]["before"].get<double>(), 0.0);
  EXPECT_EQ(report["latency_ms"]["baseline"], "masked model");
  EXPECT_EQ(report["layers"].size(), 3u);  // conv1, conv2, fc1
}

// --dense-model: the model before masking is timed as the baseline (the masked model's zeroed
// channels can run faster than the dense model's); it must be the same architecture, and it is
// an input like the others.
TEST(SpeedupCliTest, DenseModelIsTheLatencyBaselineOnlyWhenItIsTheSameArchitecture) {
  const fs::path dir = scratch_dir("speedup_cli_dense");
  const auto [masked, masks] = pruned_lenet(dir);
  const std::string args = "speedup --model " + masked.string() + " --masks " + masks.string() +
                           " --input-shape 2,1,28,28 --latency-runs 3 --warmup 1";
  CliRun run = run_lithe(args + " --dense-model " + lenet_model().string() + " --output " +
                         (dir / "small.pt").string() + " --json " +
                         (dir / "report.json").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("before: the dense model"));
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  EXPECT_EQ(report["latency_ms"]["baseline"], "dense model");
  EXPECT_GT(report["latency_ms"]["before"].get<double>(), 0.0);
  EXPECT_LT(report["max_abs_diff"].get<double>(), 1e-4);  // still checked against the masked

  // The smaller model has LeNet's parameter names but not its shapes (the first in name order
  // is named).
  run = run_lithe(args + " --dense-model " + (dir / "small.pt").string() + " --output " +
                  (dir / "again.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--dense-model " + (dir / "small.pt").string() +
                                 ": parameter 'conv1.bias' is 3 but 6 in " +
                                 masked.string()));
  // Another architecture.
  run = run_lithe(args + " --dense-model " + (source_dir() / "tests/data/dep_add.pt").string() +
                  " --output " + (dir / "again.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("is not in " + masked.string()));
  // Only some of LeNet's parameters (conv1's, with their shapes).
  torch::jit::Module conv1("DenseTestConv");
  conv1.register_parameter("weight", torch::zeros({6, 1, 5, 5}), false);
  conv1.register_parameter("bias", torch::zeros({6}), false);
  torch::jit::Module part("DenseTestPart");
  part.register_module("conv1", conv1);
  part.define("def forward(self, x):\n    return x\n");
  part.save((dir / "part.pt").string());
  run = run_lithe(args + " --dense-model " + (dir / "part.pt").string() + " --output " +
                  (dir / "again.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr(": has no parameter 'conv2.bias' of " + masked.string()));
  // An output may not be it.
  const std::string dense_before = read_text(dir / "small.pt");
  run = run_lithe(args + " --dense-model " + (dir / "small.pt").string() + " --output " +
                  (dir / "small.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("is the same file as --dense-model"));
  EXPECT_EQ(read_text(dir / "small.pt"), dense_before);
  EXPECT_FALSE(fs::exists(dir / "again.pt"));
}

// The attention_heads plugin, loaded as a shared library: half the heads of a 4-head ViT
// pruned, then removed by speedup; the smaller model loads and has half the heads.
TEST(SpeedupCliTest, TransformerHeadPruningThenSpeedupHalvesTheHeads) {
  const fs::path dir = scratch_dir("speedup_cli_heads");
  const fs::path model = source_dir() / "tests/data/tv_vit_heads.pt";
  write_text(dir / "heads.json", R"({"algorithm": "transformer_head",
    "options": {"head_hidden_dim": 4},
    "config_list": [{"sparsity": 0.5, "op_types": ["MultiheadAttention"]}]})");
  CliRun run = run_lithe("compress --model " + model.string() + " --config " +
                         (dir / "heads.json").string() + " --output " +
                         (dir / "masked.pt").string() + " --masks " + (dir / "masks.pth").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("encoder.layers.encoder_layer_1.self_attention"));
  run = run_lithe("speedup --model " + model.string() + " --masks " + (dir / "masks.pth").string() +
                  " --input-shape 2,3,32,32 --output " + (dir / "small.pt").string() + " --json " +
                  (dir / "report.json").string() + " --latency-runs 3 --warmup 1");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  EXPECT_EQ(report["layers"].size(), 4u);  // two attentions, two out_proj
  EXPECT_LT(report["max_abs_diff"].get<double>(), 1e-5);
  EXPECT_LT(report["flops_every_op"]["ratio"].get<double>(), 0.9);
  torch::jit::Module small = torch::jit::load((dir / "small.pt").string());
  const torch::jit::Module attention = small.attr("encoder").toModule().attr("layers").toModule()
                                           .attr("encoder_layer_0").toModule()
                                           .attr("self_attention").toModule();
  EXPECT_EQ(attention.attr("num_heads").toInt(), 2);
  EXPECT_EQ(attention.attr("in_proj_weight").toTensor().sizes(), (at::IntArrayRef{24, 16}));
}

// The attention_heads plugin as a shared library on Swin: its qkv Linears, named, lose half
// their heads, which speedup removes; an entry that selects Linear layers by type alone is
// refused before anything is written.
TEST(SpeedupCliTest, SwinHeadPruningNamesTheQkvLayersAndSpeedupRemovesTheHeads) {
  const fs::path dir = scratch_dir("speedup_cli_swin_heads");
  const fs::path model = source_dir() / "tests/data/tv_swin_tiny.pt";
  write_text(dir / "heads.json", R"({"algorithm": "transformer_head",
    "options": {"head_hidden_dim": 8},
    "config_list": [{"sparsity": 0.5,
                     "op_names": ["features.1.0.attn.qkv", "features.1.1.attn.qkv"]}]})");
  CliRun run = run_lithe("compress --model " + model.string() + " --config " +
                         (dir / "heads.json").string() + " --output " +
                         (dir / "masked.pt").string() + " --masks " + (dir / "masks.pth").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  run = run_lithe("speedup --model " + (dir / "masked.pt").string() + " --masks " +
                  (dir / "masks.pth").string() + " --dense-model " + model.string() +
                  " --input-shape 2,3,32,32 --output " + (dir / "small.pt").string() +
                  " --json " + (dir / "report.json").string() + " --latency-runs 3 --warmup 1");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  EXPECT_EQ(report["layers"].size(), 4u);  // two qkv, two proj
  EXPECT_TRUE(report["blocked"].empty()) << report["blocked"].dump();
  EXPECT_LT(report["max_abs_diff"].get<double>(), 1e-5);
  torch::jit::Module small = torch::jit::load((dir / "small.pt").string());
  const torch::jit::Module attention = small.attr("features").toModule().attr("1").toModule()
                                           .attr("0").toModule().attr("attn").toModule();
  EXPECT_EQ(attention.attr("num_heads").toInt(), 1);
  EXPECT_EQ(attention.attr("qkv").toModule().attr("weight").toTensor().sizes(),
            (at::IntArrayRef{24, 16}));
  // The same smaller model, byte for byte, at another thread count.
  run = run_lithe("speedup --model " + (dir / "masked.pt").string() + " --masks " +
                  (dir / "masks.pth").string() + " --input-shape 2,3,32,32 --output " +
                  (dir / "small_1.pt").string() + " --latency-runs 1 --warmup 0 --threads 1");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(read_text(dir / "small_1.pt"), read_text(dir / "small.pt"));

  write_text(dir / "by_type.json", R"({"algorithm": "transformer_head",
    "options": {"head_hidden_dim": 8},
    "config_list": [{"sparsity": 0.5, "op_types": ["Linear"]}]})");
  run = run_lithe("compress --model " + model.string() + " --config " +
                  (dir / "by_type.json").string() + " --output " + (dir / "typed.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("must name in op_names"));
  EXPECT_FALSE(fs::exists(dir / "typed.pt"));
}

TEST(SpeedupCliTest, MasksForAMissingLayerFailWithTheLayerNamedAndWriteNothing) {
  const fs::path dir = scratch_dir("speedup_cli_bad_masks");
  const auto [masked, masks] = pruned_lenet(dir);
  // Masks of another model (the MLP's fc1 is 128x64, LeNet's 120x256).
  const fs::path foreign = nni_data_dir() / "golden/export_level_mlp/mask.pth";
  const CliRun run = run_lithe("speedup --model " + masked.string() + " --masks " +
                               foreign.string() + " --input-shape 1,1,28,28 --output " +
                               (dir / "small.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("fc1"));
  EXPECT_FALSE(fs::exists(dir / "small.pt"));
}

TEST(SpeedupCliTest, RefusesToOverwriteTheInputModelAndChecksTheShape) {
  const fs::path dir = scratch_dir("speedup_cli_refusals");
  const auto [masked, masks] = pruned_lenet(dir);
  const std::string before = read_text(masked);
  CliRun run = run_lithe("speedup --model " + masked.string() + " --masks " + masks.string() +
                         " --input-shape 1,1,28,28 --output " + masked.string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("is the same file as --model"));
  EXPECT_EQ(read_text(masked), before);
  run = run_lithe("speedup --model " + masked.string() + " --masks " + masks.string() +
                  " --input-shape 1,1,28,28 --output " + masks.string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("is the same file as --masks"));
  run = run_lithe("speedup --model " + masked.string() + " --masks " + masks.string() +
                  " --input-shape 1,1,28,28 --output " + (dir / "small.pt").string() +
                  " --json " + masks.string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--json '" + masks.string() + "' is the same file as --masks"));
  run = run_lithe("speedup --model " + masked.string() + " --masks " + masks.string() +
                  " --input-shape 1,1,28,28 --output " + (dir / "small.pt").string() +
                  " --latency-runs 0");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--latency-runs must be >= 1 and --warmup >= 0, got 0 and 10"));
  run = run_lithe("speedup --model " + masked.string() + " --masks " + masks.string() +
                  " --input-shape 1,x,28 --output " + (dir / "small.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--input-shape must be a comma-separated list"));
  run = run_lithe("speedup --model " + masked.string() + " --masks " + masks.string() +
                  " --input-shape 1,3,28,28 --output " + (dir / "small.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("[1, 3, 28, 28]"));
  EXPECT_FALSE(fs::exists(dir / "small.pt"));
}

TEST(ExportOnnxCliTest, WritesACheckedModelAndRefusesBadInputs) {
  const fs::path dir = scratch_dir("export_onnx_cli");
  CliRun run = run_lithe("export-onnx --model " + lenet_model().string() +
                         " --input-shape 1,1,28,28 --output " + (dir / "lenet.onnx").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("checked by the ONNX checker"));
  EXPECT_GT(fs::file_size(dir / "lenet.onnx"), 170000u);  // the weights are in it
  run = run_lithe("export-onnx --model " + lenet_model().string() +
                  " --input-shape 1,1,28,28 --opset 9 --output " + (dir / "old.onnx").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--opset must be between 13 and 17 (what this ONNX library "
                                 "validates), got 9"));
  run = run_lithe("export-onnx --model " + (dir / "lenet.onnx").string() +
                  " --input-shape 1,1,28,28 --output " + (dir / "again.onnx").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("is not a torch archive"));
  EXPECT_FALSE(fs::exists(dir / "old.onnx"));
  EXPECT_FALSE(fs::exists(dir / "again.onnx"));
}

}  // namespace
}  // namespace lithe::test
