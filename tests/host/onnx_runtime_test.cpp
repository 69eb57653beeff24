// ONNX Runtime parity: every conformance model (and a sped-up one) is exported, run in ONNX
// Runtime (the onnxruntime wheel in the project's .venv, tests/host/onnx_runtime_run.py) and compared
// with Lithe's own forward on the same input: |ort - lithe| <= 1e-5 + 1e-5·|lithe| for float
// models; for QDQ models (QAT, LSQ) within one quantization step of the model's output, the
// step of Lithe's quantized forward it is compared with.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "lithe/host/export/onnx_export.h"
#include "lithe/host/speedup/speedup.h"
#include "support/cli_run.h"
#include "support/conformance_models.h"
#include "support/head_masks.h"
#include "support/paths.h"
#include "support/quantized_models.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;

void write_floats(const fs::path& file, const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kFloat).contiguous();
  std::ofstream out(file, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * 4));
}

using Reference = std::function<at::Tensor(const at::Tensor&)>;

std::string number(double v) {  // every digit a float tolerance needs
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

// Exports `module`, runs it in ORT and Lithe on one input (Lithe: `reference`, by default the
// module's own forward); |ort - lithe| <= abs + rel·|lithe|. Returns the runner's verdict.
test::CliRun run_in_ort(torch::jit::Module module, const std::vector<int64_t>& shape,
                        const std::string& name, Reference reference = {}, double abs = 1e-5,
                        double rel = 1e-5, const std::string& optimization = "all",
                        int64_t opset = 13, bool external_data = false) {
  module.eval();
  const fs::path dir = test::scratch_dir("ort_" + name);
  save_onnx(module, {shape, opset, external_data}, dir / "model.onnx");
  torch::manual_seed(11);
  const at::Tensor input = torch::randn(shape);
  at::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    expected = reference ? reference(input) : module.forward({input}).toTensor();
  }
  write_floats(dir / "input.bin", input);
  write_floats(dir / "expected.bin", expected);
  std::string dims;
  for (const int64_t d : shape) {
    dims += (dims.empty() ? "" : ",") + std::to_string(d);
  }
  const std::string command =
      test::python_executable().string() + " " +
      (test::source_dir() / "tests/host/onnx_runtime_run.py").string() + " " +
      (dir / "model.onnx").string() + " " + (dir / "input.bin").string() + " " + dims + " " +
      (dir / "expected.bin").string() + " " + number(abs) + " " + number(rel) + " " +
      optimization + " 2>&1";
  return test::run_shell(command);
}

struct Case {
  const char* model;
  std::vector<int64_t> shape;
};

TEST(OnnxRuntimeExternalDataTest, WeightsInASideFileComputeTheSame) {
  // ONNX's external-data form (what models over 2 GiB need): ORT finds the weights in
  // model.onnx.data beside the model, by the name the model gives.
  const test::CliRun run = run_in_ort(test::load_conformance_model("vgg_bn"), {2, 3, 32, 32},
                                      "vgg_bn_external", {}, 1e-5, 1e-5, "all", 13, true);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside"));
  const fs::path dir = test::scratch_path("ort_vgg_bn_external");
  int64_t weights = 0;
  for (const auto& p : test::load_conformance_model("vgg_bn").named_parameters()) {
    weights += p.value.numel() * 4;
  }
  EXPECT_GE(static_cast<int64_t>(fs::file_size(dir / "model.onnx.data")), weights * 9 / 10);
  EXPECT_LT(fs::file_size(dir / "model.onnx"), fs::file_size(dir / "model.onnx.data") / 10);
}

class OnnxRuntimeParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(OnnxRuntimeParityTest, ExportedModelComputesWhatLitheComputes) {
  const test::CliRun run = run_in_ort(test::load_conformance_model(GetParam().model), GetParam().shape,
                                      GetParam().model);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside"));
}

INSTANTIATE_TEST_SUITE_P(
    ConformanceModels, OnnxRuntimeParityTest,
    ::testing::Values(Case{"lenet", {4, 1, 28, 28}}, Case{"vgg_bn", {4, 3, 32, 32}},
                      Case{"mobilenet_tiny", {4, 3, 32, 32}}, Case{"resblock", {4, 3, 16, 16}},
                      Case{"mlp", {4, 64}}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.model); });

TEST(OnnxRuntimeParityTest, ASpedUpModelRunsInOnnxRuntime) {
  const torch::jit::Module model = test::load_conformance_model("vgg_bn");
  const NamedMasks masks = test::first_half_filter_masks(model, {"conv1", "conv2", "conv3"});
  const SpeedupResult small = speedup_model(model, masks, torch::randn({1, 3, 32, 32}));
  const test::CliRun run = run_in_ort(*small.module, {4, 3, 32, 32}, "vgg_small");
  EXPECT_EQ(run.exit_code, 0) << run.out;
}

// A ViT whose attention layers lost heads in speedup (their forward rebuilt over the kept
// heads) exports and computes the same in ORT, at batch 2.
TEST(OnnxRuntimeParityTest, AVitWithHeadsRemovedRunsInOnnxRuntime) {
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/tv_vit_heads.pt").string());
  NamedMasks masks;
  for (const char* block : {"encoder_layer_0", "encoder_layer_1"}) {
    sdk::Masks m;
    m.weight = torch::ones({48, 16});
    m.weight.narrow(0, 32, 4).zero_();      // head 0's value rows
    m.weight.narrow(0, 32 + 8, 4).zero_();  // head 2's
    masks.push_back({std::string("encoder.layers.") + block + ".self_attention", m});
  }
  const SpeedupResult small = speedup_model(model, masks, torch::randn({1, 3, 32, 32}));
  ASSERT_EQ(small.layers.size(), 4u);
  const test::CliRun run = run_in_ort(*small.module, {2, 3, 32, 32}, "vit_heads_small");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside"));
}

// Encoder layers that lost heads and feed-forward channels in speedup (written as their module
// calls, the attention over the kept heads) export and compute the same in ORT.
TEST(OnnxRuntimeParityTest, AnEncoderWithHeadsAndFeedForwardChannelsRemovedRunsInOnnxRuntime) {
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/attention_encoder.pt").string());
  NamedMasks masks = test::silenced_heads({"post.self_attn", "pre.self_attn"}, 4, 4, 16, 1);
  sdk::Masks m;
  m.weight = torch::ones({32, 16});
  m.bias = torch::ones({32});
  m.weight.narrow(0, 0, 20).zero_();
  m.bias->narrow(0, 0, 20).zero_();
  masks.emplace_back("pre.linear1", m);
  const SpeedupResult small = speedup_model(model, masks, torch::randn({1, 5, 16}));
  ASSERT_EQ(small.layers.size(), 6u);  // two attentions, two out_proj, linear1 and linear2
  const test::CliRun run = run_in_ort(*small.module, {2, 5, 16}, "encoder_small");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside"));
}

// Swin v1 and v2 attentions that lost a head in speedup (their forward rebuilt with the head
// width written in: padding, rolls, the shift mask, cosine attention) export and compute the
// same in ORT, at an input whose second stage is shifted; so does MaxViT's.
TEST(OnnxRuntimeParityTest, SwinAndMaxVitWithHeadsRemovedRunInOnnxRuntime) {
  for (const char* file : {"tv_swin_tiny.pt", "tv_swin_v2_tiny.pt"}) {
    const torch::jit::Module model =
        torch::jit::load((test::source_dir() / "tests/data" / file).string());
    // Head 1 of 2 in a shifted block of each stage (16 channels, then 32).
    NamedMasks masks = test::silenced_heads({"features.1.1.attn.qkv"}, 2, 8, 16, 1);
    masks.emplace_back("features.3.1.attn.qkv", test::silenced_head(2, 16, 32, 1));
    const SpeedupResult small = speedup_model(model, masks, torch::randn({1, 3, 64, 64}));
    ASSERT_GE(small.layers.size(), 4u) << file;
    const test::CliRun run = run_in_ort(*small.module, {2, 3, 64, 64}, "swin_heads_small");
    EXPECT_EQ(run.exit_code, 0) << file << ": " << run.out;
    EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside")) << file;
  }
  // MaxViT's window and grid attentions (einsum products, merge over the kept heads).
  const torch::jit::Module maxvit =
      torch::jit::load((test::source_dir() / "tests/data/tv_maxvit_tiny.pt").string());
  const NamedMasks masks = test::silenced_heads(
      {"blocks.0.layers.0.layers.window_attention.attn_layer.1.to_qkv",
       "blocks.0.layers.0.layers.grid_attention.attn_layer.1.to_qkv"},
      2, 8, 16, 0);  // head 0 of 2
  const SpeedupResult small = speedup_model(maxvit, masks, torch::randn({1, 3, 32, 32}));
  ASSERT_EQ(small.layers.size(), 4u);
  const test::CliRun run = run_in_ort(*small.module, {2, 3, 32, 32}, "maxvit_heads_small");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside"));
}

// A forward written in TorchScript, exported and run in ONNX Runtime on a 2x3x8x8 input.
void expect_ort_parity_of_forward(const std::string& name, const std::string& source) {
  torch::jit::Module module(name);
  module.define(source);
  const test::CliRun run = run_in_ort(module, {2, 3, 8, 8}, name);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside"));
}

// An in-place op on a slice writes into the sliced tensor (MViT's attn[:, :, 1:, 1:] += rel_pos):
// the export writes the base anew (Where over the slice's region), so later readers of the base
// see the write.
TEST(OnnxRuntimeParityTest, AnInPlaceWriteIntoASliceReachesTheTensorItSlices) {
  expect_ort_parity_of_forward("slice_writes", R"(
def forward(self, x):
    a = x * 2.0
    a[:, 1:, 2:6] += x[:, :2, :4]
    a[:, :, :, 4:].mul_(0.5)
    return torch.relu(a)
)");
}

// A tensor no input reaches is written as what it held at the end of the run, in-place writes
// included (MViT's positional embedding: repeat_interleave, then add_): the writes are not
// emitted a second time on top.
TEST(OnnxRuntimeParityTest, AnInPlaceWriteIntoAConstantTensorIsWrittenOnce) {
  expect_ort_parity_of_forward("constant_writes", R"(
def forward(self, x):
    m = torch.repeat_interleave(torch.ones([2, 8]), 4, 0)
    m.add_(torch.arange(8).float())
    return x + m
)");
}

// The op table's families (tests/data/ops_*.pt, scripts/make_op_models.py), at the opsets
// where their emission differs: Hardswish is one node from opset 14, LayerNormalization from 17.
struct OpCase {
  const char* model;
  int64_t opset;
  std::vector<int64_t> shape = {2, 3, 8, 8};
};

class OnnxRuntimeOpTableTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OnnxRuntimeOpTableTest, EveryFamilyComputesWhatLitheComputes) {
  torch::jit::Module module =
      torch::jit::load((test::source_dir() / "tests/data" / (std::string(GetParam().model) + ".pt"))
                           .string());
  const std::string name = std::string(GetParam().model) + "_" + std::to_string(GetParam().opset);
  // The first output of a tuple (the ONNX model drops a None element).
  const test::CliRun run = run_in_ort(
      module, GetParam().shape, name,
      [&](const at::Tensor& x) {
        const c10::IValue out = module.forward({x});
        return out.isTuple() ? out.toTupleRef().elements()[0].toTensor() : out.toTensor();
      },
      1e-5, 1e-5, "all", GetParam().opset);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside"));
}

INSTANTIATE_TEST_SUITE_P(
    OpFamilies, OnnxRuntimeOpTableTest,
    ::testing::Values(OpCase{"ops_gates", 13}, OpCase{"ops_gates", 14}, OpCase{"ops_gates", 17},
                      OpCase{"ops_dense_cat", 13}, OpCase{"ops_tuple_out", 13},
                      OpCase{"ops_pools", 13}, OpCase{"ops_video", 13, {2, 3, 4, 8, 8}},
                      OpCase{"ops_pools_nd", 13, {2, 3, 4, 8, 8}},
                      OpCase{"ops_segmentation", 13, {2, 3, 12, 12}},
                      OpCase{"ops_tokens", 13, {2, 3, 8, 8}},
                      // torchvision's transformer blocks at a few channels
                      // (scripts/make_transformer_models.py): shifted windows, cosine
                      // attention, einsum relative attention; LayerNorm decomposed at 13.
                      OpCase{"tv_swin_tiny", 13, {1, 3, 32, 32}},
                      OpCase{"tv_swin_tiny", 17, {2, 3, 32, 32}},
                      OpCase{"tv_swin_v2_tiny", 17, {1, 3, 32, 32}},
                      OpCase{"tv_vit_tiny", 13, {2, 3, 32, 32}},
                      OpCase{"tv_maxvit_tiny", 17, {1, 3, 32, 32}},
                      OpCase{"tv_mvit_tiny", 13, {1, 3, 4, 16, 16}},
                      OpCase{"tv_mvit_tiny", 17, {2, 3, 4, 16, 16}},
                      OpCase{"tv_mvit_v1_tiny", 13, {1, 3, 4, 16, 16}},
                      // torch 2.x attention: nn.TransformerEncoderLayer's fused kernel (ReLU
                      // post-norm and GELU pre-norm), scaled_dot_product_attention plain, causal
                      // and masked, and nn.MultiheadAttention's non-fused path.
                      OpCase{"attention_encoder", 13, {2, 5, 16}},
                      OpCase{"attention_encoder", 17, {1, 7, 16}},
                      OpCase{"attention_sdpa", 13, {2, 5, 16}},
                      OpCase{"attention_sdpa", 17, {1, 6, 16}}),
    [](const ::testing::TestParamInfo<OpCase>& info) {
      return std::string(info.param.model) + "_opset" + std::to_string(info.param.opset);
    });

struct QuantizedCase {
  const char* name;
  const char* algorithm;
  const char* config_list;
  const char* model = "lenet";  ///< a conformance model, or a file in tests/data
  std::vector<int64_t> shape = {4, 1, 28, 28};
  const char* last_layer = "fc3";  ///< its output grid's step is the tolerance
  /// ORT's graph optimizations. "all" (ORT's default) quantizes the float weight of any Conv or
  /// Gemm fed by a DequantizeLinear itself (its QDQ weight quantization), which changes a model
  /// that computes such an op in float on purpose (a tied weight read outside its module):
  /// those models are checked as written, with "disabled".
  const char* optimization = "all";
};

torch::jit::Module load_case_model(const std::string& name) {
  const fs::path file = test::source_dir() / "tests/data" / (name + ".pt");
  if (fs::exists(file)) {
    torch::jit::Module module = torch::jit::load(file.string());
    module.eval();
    return module;
  }
  return test::load_conformance_model(name);
}

class OnnxRuntimeQdqParityTest : public ::testing::TestWithParam<QuantizedCase> {};

// The QDQ model in ORT computes what Lithe's fake-quantized forward computes, within one step
// of the last layer's output grid: the two round x / s + z in different float orders, which
// can move a value lying on a rounding boundary by one step.
TEST_P(OnnxRuntimeQdqParityTest, QdqModelComputesLithesQuantizedForwardWithinOneStep) {
  const std::vector<int64_t>& shape = GetParam().shape;
  test::QuantizedModel q = test::quantize_model(load_case_model(GetParam().model),
                                                GetParam().algorithm, GetParam().config_list,
                                                shape, 3);
  const float step = q.module.attr(GetParam().last_layer)
                         .toModule()
                         .attr("lithe_q_output_scale")
                         .toTensor()
                         .abs()
                         .item<float>();
  const test::CliRun run = run_in_ort(
      q.module, shape, GetParam().name, [&](const at::Tensor& x) { return q.forward(x); },
      step * 1.0001, 0, GetParam().optimization);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::HasSubstr("0 outside"));
  std::printf("%s: one output step = %g; %s", GetParam().name, step, run.out.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    QuantizedLenet, OnnxRuntimeQdqParityTest,
    ::testing::Values(
        QuantizedCase{"qat_w8_io8", "qat",
                      R"([{"quant_types": ["input", "weight", "output"], "quant_bits": 8,
                           "op_types": ["Conv2d", "Linear"]}])"},
        QuantizedCase{"qat_w8_o4", "qat",
                      R"([{"quant_types": ["weight", "output"],
                           "quant_bits": {"weight": 8, "output": 4},
                           "op_types": ["Conv2d", "Linear"]}])"},
        QuantizedCase{"lsq_w8_o8", "lsq",
                      R"([{"quant_types": ["weight", "output"], "quant_bits": 8,
                           "op_types": ["Conv2d", "Linear"]}])"},
        // Nested modules, BatchNorm and residual adds between quantized calls.
        QuantizedCase{"resblock_qat_w8_io8", "qat",
                      R"([{"quant_types": ["input", "weight", "output"], "quant_bits": 8,
                           "op_types": ["Conv2d", "Linear"]}])",
                      "resblock", {4, 3, 16, 16}, "fc1"},
        // Modules called twice (every call quantized, as the runtime does), and fc's weight
        // also read by the parent itself, which computes with the float weight (a tied
        // weight): exact as written; ORT's optimizer would quantize that float read.
        QuantizedCase{"shared_calls_tied_weight_qat", "qat",
                      R"([{"quant_types": ["input", "weight", "output"], "quant_bits": 8,
                           "op_types": ["Conv2d", "Linear"]},
                          {"quant_types": ["output"], "quant_bits": 8, "op_types": ["ReLU"]}])",
                      "onnx_qdq_shared_calls", {4, 3, 8, 8}, "fc", "disabled"}),
    [](const ::testing::TestParamInfo<QuantizedCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace lithe::host
