// count_flops: NNI's count_flops_params numbers on the conformance models, the mask rule
// (departure 4: depthwise convolutions), the model left untouched, and every full-mode formula
// on a purpose-built model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "lithe/host/io/mask_file.h"
#include "lithe/host/graph/flops_counter.h"
#include "lithe/sdk/error.h"
#include "support/conformance_models.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// tests/data/flops_ops.pt, scripted from (input 1x4x8x8):
//   conv_g = Conv2d(4, 8, 3, padding=1, groups=2); lrelu = LeakyReLU(0.1)
//   up = Upsample(scale_factor=2, mode='bilinear'); pool = AdaptiveAvgPool2d((4, 4))
//   deconv = ConvTranspose2d(8, 4, 2, stride=2); relu = ReLU(); conv1d = Conv1d(4, 4, 3, padding=1)
//   avg = AvgPool2d(2); fc = Linear(64, 64); head = Linear(64, 10, bias=False)
//   forward: x = lrelu(conv_g(x)); x = pool(up(x)); x = relu(deconv(x));
//            x = conv1d(x.flatten(2)).view(1, 4, 8, 8); x = avg(x).flatten(1);
//            return head(fc(fc(x)))
torch::jit::Module ops_model() {
  return torch::jit::load((test::source_dir() / "tests/data/flops_ops.pt").string());
}

struct Row {
  std::string name;
  int64_t flops;
  int64_t params;
};

std::vector<Row> rows(const FlopsReport& report) {
  std::vector<Row> out;
  for (const LayerFlops& l : report.layers) {
    out.push_back({l.name, l.flops, l.params});
  }
  return out;
}

MATCHER_P3(IsRow, name, flops, params, "") {
  return arg.name == name && arg.flops == flops && arg.params == params;
}

// Filters `pruned` of a weight's dim 0 set to 0 in an all-ones mask.
at::Tensor filter_mask(const at::Tensor& weight, const std::vector<int64_t>& pruned) {
  at::Tensor mask = torch::ones_like(weight);
  for (const int64_t f : pruned) {
    mask[f].zero_();
  }
  return mask;
}

at::Tensor weight_of(const torch::jit::Module& module, const std::string& layer) {
  return module.attr(layer).toModule().attr("weight").toTensor();
}

TEST(FlopsTest, LenetMatchesNniInBothModes) {
  const torch::jit::Module lenet = test::load_conformance_model("lenet");
  // NNI v2.0 golden flops_lenet.
  const FlopsReport def = count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kDefault);
  EXPECT_THAT(rows(def), ElementsAre(IsRow("conv1", 86400, 156), IsRow("conv2", 153600, 2416),
                                     IsRow("fc1", 30720, 30840), IsRow("fc2", 10080, 10164),
                                     IsRow("fc3", 840, 850)));
  EXPECT_EQ(def.total_flops, 281640);
  EXPECT_EQ(def.total_params, 44426);
  const LayerFlops& conv2 = def.layers[1];
  EXPECT_EQ(conv2.op_type, "Conv2d");
  EXPECT_THAT(conv2.input_shape, ElementsAre(1, 6, 12, 12));
  EXPECT_THAT(conv2.output_shape, ElementsAre(1, 16, 8, 8));
  EXPECT_THAT(conv2.weight_shape, ElementsAre(16, 6, 5, 5));
  EXPECT_THAT(def.layers[2].input_shape, ElementsAre(1, 256));

  // Full mode adds one FLOP per output value for each bias; ReLU and MaxPool are never counted.
  const FlopsReport full = count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kFull);
  EXPECT_THAT(rows(full), ElementsAre(IsRow("conv1", 89856, 156), IsRow("conv2", 154624, 2416),
                                      IsRow("fc1", 30840, 30840), IsRow("fc2", 10164, 10164),
                                      IsRow("fc3", 850, 850)));
  EXPECT_EQ(full.total_flops, 286334);
  EXPECT_EQ(full.total_params, 44426);
}

TEST(FlopsTest, LayersReachedThroughAModuleListHaveTheirFullNames) {
  // `for block in self.blocks: x = block(x)`: the inlined call stack names each block by its
  // index only; the names must still be the module tree's (blocks.0.conv), as NNI reports them.
  const torch::jit::Module net =
      torch::jit::load((test::source_dir() / "tests/data/ops_module_list.pt").string());
  const FlopsReport report = count_flops(net, {1, 3, 8, 8}, FlopsMode::kDefault);
  std::vector<std::string> names;
  for (const LayerFlops& layer : report.layers) {
    names.push_back(layer.name);
  }
  EXPECT_THAT(names, ElementsAre("stem", "blocks.0.conv", "blocks.1.conv", "fc"));
  EXPECT_EQ(report.total_flops, 3 * 4 * 64 + 2 * (4 * 4 * 9 * 64) + 4 * 10);
}

TEST(FlopsTest, BatchScalesOnlyTheActivationOps) {
  // NNI leaves the batch out of convolution and Linear FLOPs, not out of BatchNorm's.
  const torch::jit::Module net = test::load_conformance_model("mobilenet_tiny");
  const FlopsReport one = count_flops(net, {1, 3, 32, 32}, FlopsMode::kFull);
  const FlopsReport four = count_flops(net, {4, 3, 32, 32}, FlopsMode::kFull);
  ASSERT_EQ(one.layers.size(), four.layers.size());
  EXPECT_EQ(one.total_flops, 473802);                    // golden flops_mobilenet_tiny, full
  EXPECT_EQ(four.layers[0].flops, one.layers[0].flops);  // conv1
  EXPECT_EQ(four.layers[1].op_type, "BatchNorm2d");
  EXPECT_EQ(four.layers[1].flops, 4 * one.layers[1].flops);  // bn1
  EXPECT_THAT(four.layers[1].input_shape, ElementsAre(4, 16, 16, 16));
}

TEST(FlopsTest, DepthwiseMaskCountsKeptChannelsOverOneInputChannel) {
  const torch::jit::Module net = test::load_conformance_model("mobilenet_tiny");
  // Half the filters of each convolution pruned, as L1FilterPruner 0.5 does.
  NamedMasks masks;
  masks.emplace_back(
      "dw1", sdk::Masks{filter_mask(weight_of(net, "dw1"), {1, 5, 6, 7, 10, 11, 12, 15}), {}});
  masks.emplace_back(
      "pw1", sdk::Masks{filter_mask(weight_of(net, "pw1"),
                                    {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}),
                        {}});
  const FlopsReport report = count_flops(net, {1, 3, 32, 32}, FlopsMode::kDefault, &masks);
  // dw1: weight 16x1x3x3, 72 kept weights; cout = 72 // (weight.size(1)=1 · 9) = 8;
  // FLOPs = 8 · 16·16 · 9 · 16 / 16 = 18432 (NNI: 72 // (16·9) = 0 channels, 0 FLOPs).
  ASSERT_EQ(report.layers[1].name, "dw1");
  EXPECT_EQ(report.layers[1].flops, 18432);
  // pw1 (groups 1): the same as NNI, 16 · 256 · 1 · 16 = 65536.
  ASSERT_EQ(report.layers[2].name, "pw1");
  EXPECT_EQ(report.layers[2].flops, 65536);
  // Unmasked dw2 keeps its full count and parameters are never reduced by masks.
  EXPECT_EQ(report.layers[3].flops, 32 * 64 * 9);
  EXPECT_EQ(report.layers[1].params, 144);
  EXPECT_EQ(report.total_params, 4074);
}

TEST(FlopsTest, FineGrainedLinearMaskFloorsToWholeFeatures) {
  const torch::jit::Module lenet = test::load_conformance_model("lenet");
  // 500 of fc3's 840 weights kept: out = 500 // 84 = 5 features (NNI, flops_masked_lenet_level).
  at::Tensor mask = torch::zeros({10 * 84});
  mask.slice(0, 0, 500).fill_(1);
  NamedMasks masks;
  masks.emplace_back("fc3", sdk::Masks{mask.index_select(0, torch::randperm(840)).view({10, 84}),
                                       torch::ones({10})});
  EXPECT_EQ(count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kDefault, &masks).layers[4].flops, 420);
  EXPECT_EQ(count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kFull, &masks).layers[4].flops, 425);
}

TEST(FlopsTest, CountingWithMasksLeavesTheModelBitIdentical) {
  torch::jit::Module net = test::load_conformance_model("mobilenet_tiny");
  net.train();  // BatchNorm would update its running statistics if the count ran in train mode
  std::vector<std::pair<at::Tensor, at::Tensor>> before;  // (live tensor, copy)
  for (const auto& p : net.named_parameters()) {
    before.emplace_back(p.value, p.value.detach().clone());
  }
  for (const auto& b : net.named_buffers()) {
    before.emplace_back(b.value, b.value.detach().clone());
  }
  NamedMasks masks;
  masks.emplace_back("dw1", sdk::Masks{filter_mask(weight_of(net, "dw1"), {0, 1, 2}), {}});
  masks.emplace_back("fc1", sdk::Masks{filter_mask(weight_of(net, "fc1"), {3}), torch::ones({10})});
  count_flops(net, {2, 3, 32, 32}, FlopsMode::kFull, &masks);

  size_t i = 0;
  for (const auto& p : net.named_parameters()) {
    EXPECT_TRUE(p.value.is_same(before[i].first)) << p.name;
    EXPECT_TRUE(p.value.equal(before[i].second)) << p.name;
    ++i;
  }
  for (const auto& b : net.named_buffers()) {
    EXPECT_TRUE(b.value.is_same(before[i].first)) << b.name;
    EXPECT_TRUE(b.value.equal(before[i].second)) << b.name;
    ++i;
  }
  EXPECT_EQ(i, before.size());
  for (const auto& m : net.named_modules()) {
    EXPECT_TRUE(m.value.is_training()) << m.name;  // the training flags are restored
    EXPECT_FALSE(m.value.hasattr("weight_mask")) << m.name;
  }
  // The masks themselves are not changed either.
  EXPECT_EQ(masks[0].second.weight.sum().item<double>(), 13 * 9);
}

TEST(FlopsTest, MaskErrorsNameTheSourceLayerAndShapes) {
  const torch::jit::Module lenet = test::load_conformance_model("lenet");
  NamedMasks wrong_shape;
  wrong_shape.emplace_back("conv2", sdk::Masks{torch::ones({16, 6, 3, 3}), {}});
  EXPECT_THAT(
      [&] {
        count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kDefault, &wrong_shape, "m.pth");
      },
      ThrowsMessage<sdk::Error>(AllOf(HasSubstr("m.pth"), HasSubstr("'conv2'"),
                                      HasSubstr("16x6x3x3"), HasSubstr("16x6x5x5"))));
  NamedMasks bad_bias;
  bad_bias.emplace_back("fc1", sdk::Masks{torch::ones({120, 256}), torch::ones({7})});
  EXPECT_THAT(
      [&] {
        count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kDefault, &bad_bias, "m.pth");
      },
      ThrowsMessage<sdk::Error>(
          AllOf(HasSubstr("'fc1'"), HasSubstr("bias mask shape 7"), HasSubstr("bias shape 120"))));
  NamedMasks missing;
  missing.emplace_back("conv9", sdk::Masks{torch::ones({1}), {}});
  EXPECT_THAT(
      [&] {
        count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kDefault, &missing, "m.pth");
      },
      ThrowsMessage<sdk::Error>(AllOf(HasSubstr("m.pth"), HasSubstr("'conv9' names no module"))));
  NamedMasks weightless;
  weightless.emplace_back("relu1", sdk::Masks{torch::ones({1}), {}});
  EXPECT_THAT(
      [&] {
        count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kDefault, &weightless);
      },
      ThrowsMessage<sdk::Error>(
          HasSubstr("'relu1' has a weight mask but the module has no weight")));
}

TEST(FlopsTest, BadInputShapesAreRejected) {
  const torch::jit::Module lenet = test::load_conformance_model("lenet");
  EXPECT_THAT([&] { count_flops(lenet, {}, FlopsMode::kDefault); },
              ThrowsMessage<sdk::Error>(HasSubstr("at least one dimension")));
  EXPECT_THAT(
      [&] {
        count_flops(lenet, {1, 0, 28, 28}, FlopsMode::kDefault);
      },
      ThrowsMessage<sdk::Error>(HasSubstr("got 1x0x28x28")));
  // The model itself refuses 3 channels: the forward's error, with the shape tried.
  EXPECT_THAT(
      [&] {
        count_flops(lenet, {1, 3, 28, 28}, FlopsMode::kDefault);
      },
      ThrowsMessage<sdk::Error>(HasSubstr("[1, 3, 28, 28]")));
}

TEST(FlopsTest, FullModeFormulasOnEveryCountedKind) {
  const FlopsReport report = count_flops(ops_model(), {1, 4, 8, 8}, FlopsMode::kFull);
  EXPECT_THAT(
      rows(report),
      ElementsAre(
          // grouped conv: 8 · 8·8 · 9 · 4 / 2 + bias 8 · 64
          IsRow("conv_g", 9216 + 512, 8 * 2 * 9 + 8), IsRow("lrelu", 8 * 8 * 8, 0),  // numel(input)
          IsRow("up", 8 * 16 * 16 * 11, 0),               // bilinear: 11 per output value
          IsRow("pool", (16 + 1) * 8 * 4 * 4, 0),         // window 16/4 · 16/4 adds + 1 divide
          IsRow("deconv", 4 * 64 * 4 * 8 + 4 * 64, 132),  // NNI: cout·out_spatial·k·cin/groups
          IsRow("conv1d", 4 * 64 * 3 * 4 + 4 * 64, 52),   // kernel of any rank
          IsRow("avg", 4 * 4 * 4, 0),                     // numel(output)
          IsRow("fc", 64 * 64 + 64, 4160),                // called twice: listed twice
          IsRow("fc", 64 * 64 + 64, 4160), IsRow("head", 640, 640)));  // no bias: no bias FLOPs
  EXPECT_THAT(report.layers[3].input_shape, ElementsAre(1, 8, 16, 16));
  EXPECT_THAT(report.layers[3].output_shape, ElementsAre(1, 8, 4, 4));
  EXPECT_TRUE(report.layers[1].weight_shape.empty());
  EXPECT_EQ(report.total_flops, 55744);
  EXPECT_EQ(report.total_params, 152 + 132 + 52 + 4160 + 640);  // fc's parameters once
}

TEST(FlopsTest, DefaultModeCountsOnlyConvolutionsAndLinear) {
  const FlopsReport report = count_flops(ops_model(), {1, 4, 8, 8}, FlopsMode::kDefault);
  EXPECT_THAT(rows(report), ElementsAre(IsRow("conv_g", 9216, 152), IsRow("conv1d", 3072, 52),
                                        IsRow("fc", 4096, 4160), IsRow("fc", 4096, 4160),
                                        IsRow("head", 640, 640)));
  EXPECT_EQ(report.total_params, 152 + 52 + 4160 + 640);
}

TEST(FlopsTest, ModuleCalledAtTwoPlacesHasOneRowPerCallWithItsOwnShapes) {
  // dep_shared: conv_a(x) -> relu -> conv_b -> conv_a again; conv_c(x); `unused` never runs.
  const torch::jit::Module net =
      torch::jit::load((test::source_dir() / "tests/data/dep_shared.pt").string());
  const FlopsReport report = count_flops(net, {1, 4, 6, 6}, FlopsMode::kDefault);
  std::vector<std::string> names;
  for (const LayerFlops& l : report.layers) {
    names.push_back(l.name);
  }
  EXPECT_THAT(names, ElementsAre("conv_a", "conv_b", "conv_a", "conv_c"));
  EXPECT_EQ(report.total_flops, 4 * report.layers[0].flops);
  EXPECT_EQ(report.total_params, 3 * (4 * 4 * 9 + 4));
}

TEST(FlopsTest, TableAndJsonCarryEveryColumnAndTheTotals) {
  const FlopsReport report =
      count_flops(test::load_conformance_model("lenet"), {1, 1, 28, 28}, FlopsMode::kDefault);
  const std::string table = format_flops_table(report);
  EXPECT_THAT(
      table,
      HasSubstr("Index  Name   Type    Input      Output     Weight shape   FLOPs  #Params"));
  EXPECT_THAT(
      table,
      HasSubstr("    1  conv2  Conv2d  1x6x12x12  1x16x8x8   16x6x5x5      153600     2416"));
  EXPECT_THAT(table, HasSubstr("FLOPs total: 281640\n#Params total: 44426\n"));

  const nlohmann::json json = nlohmann::json::parse(flops_report_json(report, FlopsMode::kDefault));
  EXPECT_EQ(json.at("mode"), "default");
  EXPECT_EQ(json.at("total_flops"), 281640);
  EXPECT_EQ(json.at("total_params"), 44426);
  ASSERT_EQ(json.at("layers").size(), 5u);
  const nlohmann::json& fc1 = json["layers"][2];
  EXPECT_EQ(fc1.at("name"), "fc1");
  EXPECT_EQ(fc1.at("type"), "Linear");
  EXPECT_EQ(fc1.at("input_shape"), nlohmann::json({1, 256}));
  EXPECT_EQ(fc1.at("output_shape"), nlohmann::json({1, 120}));
  EXPECT_EQ(fc1.at("weight_shape"), nlohmann::json({120, 256}));
  EXPECT_EQ(fc1.at("flops"), 30720);
  EXPECT_EQ(fc1.at("params"), 30840);
}

// Mode "ops": every op by the op table's rules (not NNI's; reference §4.3 counts modules).
TEST(FlopsOpsModeTest, LenetsLayersCountAsFullModeAndItsActivationsAndPoolsAsTheirValues) {
  const torch::jit::Module lenet = test::load_conformance_model("lenet");
  const FlopsReport ops = count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kOps);
  std::vector<std::pair<std::string, int64_t>> layers;
  int64_t activations = 0;
  for (const LayerFlops& row : ops.layers) {
    if (row.op_type == "aten::conv2d" || row.op_type == "aten::linear") {
      layers.emplace_back(row.name, row.flops);
    } else {
      activations += row.flops;
    }
  }
  // The convolutions and Linear layers as NNI's full mode counts them (bias included).
  EXPECT_THAT(layers, ElementsAre(std::pair<std::string, int64_t>{"conv1", 89856},
                                  std::pair<std::string, int64_t>{"conv2", 154624},
                                  std::pair<std::string, int64_t>{"fc1", 30840},
                                  std::pair<std::string, int64_t>{"fc2", 10164},
                                  std::pair<std::string, int64_t>{"fc3", 850}));
  // ReLU: one per output value (6·24·24, 16·8·8, 120, 84); max pooling: one per input value
  // (6·24·24, 16·8·8).
  EXPECT_EQ(activations, (3456 + 1024 + 120 + 84) + (3456 + 1024));
  EXPECT_EQ(ops.total_flops, 89856 + 154624 + 30840 + 10164 + 850 + activations);
  EXPECT_EQ(ops.total_params, 44426);
  EXPECT_TRUE(ops.uncounted.empty());
  EXPECT_EQ(ops.layers[0].params, 156);  // conv1's weight and bias
}

TEST(FlopsOpsModeTest, FunctionalProductsCountOneMultiplyAccumulatePerIndexCombination) {
  torch::jit::Module module("Products");
  module.register_parameter("w", torch::ones({4, 3}), false);
  module.define(R"(
def forward(self, x):
    y = torch.linear(x, self.w)
    s = torch.matmul(y, y.transpose(1, 2))
    e = torch.einsum('bij,bjk->bik', [s, y])
    r = torch.relu(e)
    v, i = torch.sort(r, 1)
    return v.sum()
)");
  const FlopsReport ops = count_flops(module, {2, 5, 3}, FlopsMode::kOps);
  std::vector<std::pair<std::string, int64_t>> rows;
  for (const LayerFlops& row : ops.layers) {
    rows.emplace_back(row.op_type, row.flops);
  }
  EXPECT_THAT(rows, ElementsAre(
                        // 2·5·4 outputs, 3 inputs each
                        std::pair<std::string, int64_t>{"aten::linear", 120},
                        // [2,5,4] @ [2,4,5]: 2·5·5 outputs, 4 each (the transpose costs nothing)
                        std::pair<std::string, int64_t>{"aten::matmul", 200},
                        // b·i·j·k = 2·5·5·4
                        std::pair<std::string, int64_t>{"aten::einsum", 200},
                        std::pair<std::string, int64_t>{"aten::relu", 40},
                        // sum: one per input value
                        std::pair<std::string, int64_t>{"aten::sum", 40}));
  EXPECT_EQ(ops.total_flops, 600);
  EXPECT_EQ(ops.total_params, 12);
  // The table has no rule for sort: named, counted as 0.
  EXPECT_THAT(ops.uncounted, ElementsAre("aten::sort (1 call)"));
  EXPECT_THAT(format_flops_table(ops), HasSubstr("Not counted: aten::sort (1 call)"));
  EXPECT_EQ(nlohmann::json::parse(flops_report_json(ops, FlopsMode::kOps)).at("uncounted"),
            nlohmann::json({"aten::sort (1 call)"}));
}

TEST(FlopsOpsModeTest, AttentionIsCountedWhereTheModuleCountsOnlyItsLinearLayers) {
  // torchvision's VisionTransformer (tiny: 17 tokens of 16 features, 2 heads, 2 layers).
  const torch::jit::Module vit =
      torch::jit::load((test::source_dir() / "tests/data/tv_vit_tiny.pt").string());
  const FlopsReport ops = count_flops(vit, {1, 3, 32, 32}, FlopsMode::kOps);
  int64_t attention_calls = 0;
  for (const LayerFlops& row : ops.layers) {
    if (row.op_type == "aten::_native_multi_head_attention") {
      ++attention_calls;
      // Projections 2·17·16² + 2·17·16², scores and weighted sum 2·17·17·16, softmax 2·17·17.
      EXPECT_EQ(row.flops, 8704 + 8704 + 9248 + 578) << row.name;
    }
  }
  EXPECT_EQ(attention_calls, 2);
  EXPECT_TRUE(ops.uncounted.empty()) << ops.uncounted.front();
  EXPECT_GT(ops.total_flops, 2 * count_flops(vit, {1, 3, 32, 32}, FlopsMode::kDefault).total_flops);
}

TEST(FlopsOpsModeTest, FusedEncoderLayersAndScaledDotProductAttentionAreCounted) {
  // Two nn.TransformerEncoderLayers (16 features, 4 heads, 32 feed-forward channels) on 2x5
  // tokens, each one fused kernel call: attention 4·L·E² + 2·L²·E + H·L², feed-forward 2·L·E·F +
  // L·F, residuals 2·L·E, LayerNorms 4·L·E, per batch item.
  const torch::jit::Module encoder =
      torch::jit::load((test::source_dir() / "tests/data/attention_encoder.pt").string());
  const FlopsReport ops = count_flops(encoder, {2, 5, 16}, FlopsMode::kOps);
  int64_t layers = 0;
  for (const LayerFlops& row : ops.layers) {
    if (row.op_type == "aten::_transformer_encoder_layer_fwd") {
      ++layers;
      EXPECT_EQ(row.flops, 2 * (5120 + 800 + 100 + 5120 + 160 + 160 + 320)) << row.name;
    }
  }
  EXPECT_EQ(layers, 2);
  EXPECT_TRUE(ops.uncounted.empty()) << ops.uncounted.front();
  // NNI's modes count module calls, which the fused kernel skips: refused, saying why.
  EXPECT_THAT([&] { (void)count_flops(encoder, {2, 5, 16}, FlopsMode::kDefault); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("post.linear1"),
                                              HasSubstr("TransformerEncoderLayer"),
                                              HasSubstr("mode 'ops'"))));
  // scaled_dot_product_attention on [2, 4, 5, 4] (three direct calls, one from a sequence-first
  // nn.MultiheadAttention): L·S·E + L·S·Ev + L·S per batch item and head.
  const torch::jit::Module sdpa =
      torch::jit::load((test::source_dir() / "tests/data/attention_sdpa.pt").string());
  int64_t calls = 0;
  for (const LayerFlops& row : count_flops(sdpa, {2, 5, 16}, FlopsMode::kOps).layers) {
    if (row.op_type == "aten::scaled_dot_product_attention") {
      ++calls;
      EXPECT_EQ(row.flops, 8 * (100 + 100 + 25)) << row.name;
    }
  }
  EXPECT_EQ(calls, 4);
}

TEST(FlopsOpsModeTest, AMaskedLayerCountsTheOutputChannelsItKeeps) {
  const torch::jit::Module lenet = test::load_conformance_model("lenet");
  at::Tensor mask = torch::zeros({10, 84});
  mask.slice(0, 0, 5).fill_(1);  // 5 of fc3's 10 outputs
  NamedMasks masks;
  masks.emplace_back("fc3", sdk::Masks{mask, torch::ones({10})});
  const FlopsReport ops = count_flops(lenet, {1, 1, 28, 28}, FlopsMode::kOps, &masks);
  EXPECT_EQ(ops.layers.back().name, "fc3");
  EXPECT_EQ(ops.layers.back().flops, 425);  // as full mode: 5·84 + 5
}

TEST(FlopsTest, ModeNamesParseAndOthersAreRejected) {
  EXPECT_EQ(parse_flops_mode("default"), FlopsMode::kDefault);
  EXPECT_EQ(parse_flops_mode("full"), FlopsMode::kFull);
  EXPECT_EQ(parse_flops_mode("ops"), FlopsMode::kOps);
  EXPECT_STREQ(flops_mode_name(FlopsMode::kOps), "ops");
  EXPECT_STREQ(flops_mode_name(FlopsMode::kFull), "full");
  EXPECT_THAT(
      [] { parse_flops_mode("Full", "--mode"); },
      ThrowsMessage<sdk::Error>(HasSubstr("--mode must be 'default', 'full' or 'ops', got 'Full'")));
}

}  // namespace
}  // namespace lithe::host
