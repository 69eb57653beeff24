// ONNX export of the conformance models: the graph Lithe writes (ops, initializers named like
// the state_dict, biases and BatchNorm parameters wired in), validity (export_onnx runs the ONNX
// checker and strict shape inference itself), and the errors that leave nothing behind.
// Numerical parity with ONNX Runtime is checked by the ORT tests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "lithe/host/export/onnx_export.h"
#include "lithe/host/speedup/speedup.h"
#include "lithe/sdk/error.h"
#include "support/conformance_models.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

onnx::ModelProto exported(const torch::jit::Module& module, std::vector<int64_t> shape,
                          int64_t opset = 13) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(export_onnx(module, {std::move(shape), opset})));
  return model;
}

std::vector<std::string> op_types(const onnx::ModelProto& model) {
  std::vector<std::string> out;
  for (const onnx::NodeProto& n : model.graph().node()) {
    out.push_back(n.op_type());
  }
  return out;
}

std::map<std::string, std::vector<int64_t>> initializers(const onnx::ModelProto& model) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    out[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
  }
  return out;
}

const onnx::NodeProto& first(const onnx::ModelProto& model, const std::string& type) {
  for (const onnx::NodeProto& n : model.graph().node()) {
    if (n.op_type() == type) {
      return n;
    }
  }
  ADD_FAILURE() << "no " << type;
  return model.graph().node(0);
}

TEST(OnnxExportTest, LenetBecomesConvReluPoolAndGemmWithItsBiases) {
  const onnx::ModelProto model = exported(test::load_conformance_model("lenet"), {1, 1, 28, 28});
  EXPECT_EQ(model.opset_import(0).version(), 13);
  EXPECT_THAT(op_types(model),
              ElementsAre("Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool", "Reshape", "Gemm",
                          "Relu", "Gemm", "Relu", "Gemm", "Identity"));
  const auto init = initializers(model);
  EXPECT_EQ(init.at("conv1.weight"), (std::vector<int64_t>{6, 1, 5, 5}));
  EXPECT_EQ(init.at("fc1.weight"), (std::vector<int64_t>{120, 256}));
  // The convolution's Optional[Tensor] bias is wired in.
  EXPECT_THAT(first(model, "Conv").input(), ElementsAre("input", "conv1.weight", "conv1.bias"));
  EXPECT_EQ(model.graph().output(0).name(), "output");
  EXPECT_EQ(model.graph().output(0).type().tensor_type().shape().dim(1).dim_value(), 10);
}

TEST(OnnxExportTest, BatchNormUsesTheModelsOwnParametersAndStatistics) {
  const onnx::ModelProto model = exported(test::load_conformance_model("vgg_bn"), {1, 3, 32, 32}, 17);
  EXPECT_THAT(first(model, "BatchNormalization").input(),
              ElementsAre(::testing::_, "bn1.weight", "bn1.bias", "bn1.running_mean",
                          "bn1.running_var"));
  EXPECT_EQ(model.opset_import(0).version(), 17);
}

TEST(OnnxExportTest, ConvolutionsWithoutBiasAndDepthwiseGroups) {
  const onnx::ModelProto model = exported(test::load_conformance_model("mobilenet_tiny"), {1, 3, 32, 32});
  int depthwise = 0;
  for (const onnx::NodeProto& n : model.graph().node()) {
    if (n.op_type() != "Conv") {
      continue;
    }
    EXPECT_EQ(n.input_size(), 2) << n.name();  // bias=False: no third input
    for (const onnx::AttributeProto& a : n.attribute()) {
      depthwise += a.name() == "group" && a.i() > 1 ? 1 : 0;
    }
  }
  EXPECT_EQ(depthwise, 2);
}

TEST(OnnxExportTest, ResidualAddsAndTheMlpExport) {
  const std::vector<std::string> resblock = op_types(exported(test::load_conformance_model("resblock"), {1, 3, 16, 16}));
  EXPECT_EQ(std::count(resblock.begin(), resblock.end(), "Add"), 2);
  EXPECT_EQ(std::count(resblock.begin(), resblock.end(), "BatchNormalization"), 6);
  EXPECT_THAT(op_types(exported(test::load_conformance_model("mlp"), {4, 64})),
              ElementsAre("Gemm", "Relu", "Gemm", "Relu", "Gemm", "Identity"));
}

TEST(OnnxExportTest, ExternalDataHoldsEachLargeWeightOnceAtItsOffset) {
  const torch::jit::Module lenet = test::load_conformance_model("lenet");
  const std::filesystem::path dir = test::scratch_dir("onnx_external");
  save_onnx(lenet, {{1, 1, 28, 28}, 13, /*external_data=*/true}, dir / "lenet.onnx");
  EXPECT_EQ(onnx_external_data_path(dir / "lenet.onnx"), dir / "lenet.onnx.data");
  std::ifstream in(dir / "lenet.onnx", std::ios::binary);
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromIstream(&in));
  const onnx::ModelProto inline_model = exported(lenet, {1, 1, 28, 28});
  std::ifstream data_in(dir / "lenet.onnx.data", std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(data_in)), {});
  size_t external = 0;
  size_t next_offset = 0;
  for (int i = 0; i < model.graph().initializer_size(); ++i) {
    const onnx::TensorProto& t = model.graph().initializer(i);
    const std::string& bytes = inline_model.graph().initializer(i).raw_data();
    if (bytes.size() < 1024) {  // small tensors stay inline
      EXPECT_EQ(t.data_location(), onnx::TensorProto_DataLocation_DEFAULT) << t.name();
      EXPECT_EQ(t.raw_data(), bytes) << t.name();
      continue;
    }
    ++external;
    EXPECT_EQ(t.data_location(), onnx::TensorProto_DataLocation_EXTERNAL) << t.name();
    EXPECT_TRUE(t.raw_data().empty()) << t.name();
    std::map<std::string, std::string> where;
    for (const auto& entry : t.external_data()) {
      where[entry.key()] = entry.value();
    }
    EXPECT_EQ(where["location"], "lenet.onnx.data");  // relative: the files move together
    const size_t offset = std::stoul(where["offset"]);
    EXPECT_EQ(offset, next_offset) << t.name();
    EXPECT_EQ(std::stoul(where["length"]), bytes.size()) << t.name();
    EXPECT_EQ(data.substr(offset, bytes.size()), bytes) << t.name();
    next_offset = offset + bytes.size();
  }
  EXPECT_EQ(external, 4u);  // conv2, fc1, fc2, fc3 weights (conv1's 600 bytes stay inline)
  EXPECT_EQ(data.size(), next_offset);
  // Without the option, a small model stays one file.
  save_onnx(lenet, {{1, 1, 28, 28}, 13}, dir / "one.onnx");
  EXPECT_FALSE(std::filesystem::exists(dir / "one.onnx.data"));
}

TEST(OnnxExportTest, ASpedUpModelGivesASmallerFile) {
  const torch::jit::Module model = test::load_conformance_model("vgg_bn");
  const NamedMasks masks = test::first_half_filter_masks(model, {"conv1", "conv2", "conv3"});
  const SpeedupResult small = speedup_model(model, masks, torch::randn({1, 3, 32, 32}));
  const std::string before = export_onnx(model, {{1, 3, 32, 32}, 13});
  const std::string after = export_onnx(*small.module, {{1, 3, 32, 32}, 13});
  EXPECT_LT(after.size() * 3, before.size());
}

TEST(OnnxExportTest, AnUnsupportedOpIsNamedWithItsModuleAndNothingIsWritten) {
  const torch::jit::Module model =
      torch::jit::load((test::source_dir() / "tests/data/speedup_blocked.pt").string());
  const std::filesystem::path out = test::scratch_dir("onnx_unsupported") / "m.onnx";
  EXPECT_THAT([&] { save_onnx(model, {{1, 3, 8, 8}, 13}, out); },
              ::testing::ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("aten::cumsum"), HasSubstr("nothing was written"))));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_THAT([&] { export_onnx(test::load_conformance_model("lenet"), {{1, 1, 28, 28}, 18}); },
              ::testing::ThrowsMessage<sdk::Error>(HasSubstr("--opset must be between 13 and 17")));
}

// One model per construct the exporter must refuse (scripts/make_onnx_error_models.py): the
// error is kUnsupported and names the op, the reason and, where the op sits in a submodule, the
// module and its type.
struct RefusedModel {
  std::string name;  // tests/data/onnx_error_<name>.pt
  std::vector<int64_t> input_shape;
  std::vector<std::string> message_parts;
};

std::ostream& operator<<(std::ostream& os, const RefusedModel& c) { return os << c.name; }

torch::jit::Module load_error_model(const std::string& name) {
  return torch::jit::load(
      (test::source_dir() / ("tests/data/onnx_error_" + name + ".pt")).string());
}

// The error export_onnx throws for `model` (a failure when it exports).
sdk::Error export_error(const torch::jit::Module& model, const std::vector<int64_t>& shape) {
  try {
    export_onnx(model, {shape, 13});
  } catch (const sdk::Error& e) {
    return e;
  }
  ADD_FAILURE() << "the model was exported";
  return sdk::Error(sdk::Errc::kInternal, "exported");
}

class OnnxExportRefusesTest : public ::testing::TestWithParam<RefusedModel> {};

TEST_P(OnnxExportRefusesTest, NamesTheOpTheModuleAndTheReason) {
  const RefusedModel& c = GetParam();
  const sdk::Error error = export_error(load_error_model(c.name), c.input_shape);
  EXPECT_EQ(error.code(), sdk::Errc::kUnsupported) << error.what();
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(error.what(), HasSubstr(part));
  }
}

const std::string kNothingWritten = "; nothing was written";
const std::string kNotSupported = "this op is not supported by Lithe's ONNX export";

INSTANTIATE_TEST_SUITE_P(
    ErrorPaths, OnnxExportRefusesTest,
    ::testing::Values(
        // Traced: nn.ConvTranspose2d records aten::_convolution with transposed=True.
        RefusedModel{"conv_transpose",
                     {1, 3, 8, 8},
                     {"cannot export to ONNX: aten::_convolution (node %",
                      "in module 'up' (ConvTranspose2d): transposed convolutions are not supported",
                      kNothingWritten}},
        // Scripted, the same module calls aten::conv_transpose2d, which no rule handles.
        RefusedModel{"conv_transpose_scripted",
                     {1, 3, 8, 8},
                     {"aten::conv_transpose2d (node %", "in module 'up' (ConvTranspose2d)",
                      kNotSupported, kNothingWritten}},
        RefusedModel{"conv_same",
                     {1, 3, 8, 8},
                     {"aten::conv2d (node %",
                      "in module 'conv' (Conv2d): padding given as a string is not supported",
                      kNothingWritten}},
        RefusedModel{"avg_pool_divisor",
                     {1, 3, 8, 8},
                     {"aten::avg_pool2d (node %",
                      "in module 'pool' (AvgPool2d): avg_pool2d with divisor_override is not "
                      "supported",
                      kNothingWritten}},
        RefusedModel{"add_alpha",
                     {1, 3, 8, 8},
                     {"aten::add (node %",
                      "in the model's own forward: add/sub with alpha != 1 is not supported",
                      kNothingWritten}},
        RefusedModel{"div_floor",
                     {1, 3, 8, 8},
                     {"aten::div (node %",
                      "in module 'head' (FloorDivide): div with a rounding mode is not supported",
                      kNothingWritten}},
        RefusedModel{"batchnorm_no_stats",
                     {1, 3, 8, 8},
                     {"aten::batch_norm (node %",
                      "in module 'bn' (BatchNorm2d): BatchNorm without running statistics",
                      kNothingWritten}},
        RefusedModel{"sort",
                     {1, 3, 8, 8},
                     {"aten::sort (node %", "in module 'body' (Body): " + kNotSupported,
                      kNothingWritten}},
        // Shapes fixed at export fold branches and tensors no input reaches; a branch on the
        // input's contents is not folded (its condition's sum is what is refused first), and a
        // tensor filled where the input is positive is not written as a constant (its
        // new_zeros is refused: the input reaches it through the in-place fill).
        RefusedModel{"data_branch",
                     {1, 3, 8, 8},
                     {"aten::sum (node %", "in the model's own forward: " + kNotSupported,
                      kNothingWritten}},
        RefusedModel{"data_mask",
                     {1, 3, 8, 8},
                     {"aten::new_zeros (node %mask", "in the model's own forward: " + kNotSupported,
                      kNothingWritten}},
        // m = x.new_zeros(...); early = m + 1; m.fill_(5): m's final contents are not what
        // `early` read, so m is not written as a constant.
        RefusedModel{"read_before_write",
                     {1, 3, 8, 8},
                     {"aten::new_zeros (node %m", "in the model's own forward: " + kNotSupported,
                      kNothingWritten}},
        // forward(x, y: Optional[Tensor] = None) runs on one input but cannot be exported as is.
        RefusedModel{"second_input",
                     {1, 3, 8, 8},
                     {"cannot export to ONNX: the model's forward takes 2 arguments; Lithe "
                      "exports forwards of one input tensor"}}),
    [](const ::testing::TestParamInfo<RefusedModel>& info) { return info.param.name; });

// Refusals of the ops the transformer and detection nets brought (ops/shape_ops.cpp,
// ops/pooling_ops.cpp, ops/attention_ops.cpp), on forwards written in TorchScript: each names
// the op, where it is and the rule it breaks.
struct RefusedForward {
  std::string name;
  std::string forward;  // the body of forward(self, x), x of shape [1, 3, 8, 8]
  std::string message;
};

std::ostream& operator<<(std::ostream& os, const RefusedForward& c) { return os << c.name; }

class OnnxExportRefusesForwardTest : public ::testing::TestWithParam<RefusedForward> {};

TEST_P(OnnxExportRefusesForwardTest, NamesTheOpAndTheRule) {
  torch::jit::Module module("Refused");
  module.define("def forward(self, x):\n" + GetParam().forward);
  const sdk::Error error = export_error(module, {1, 3, 8, 8});
  EXPECT_EQ(error.code(), sdk::Errc::kUnsupported) << error.what();
  EXPECT_THAT(error.what(), AllOf(HasSubstr("in the model's own forward: " + GetParam().message),
                                  HasSubstr(kNothingWritten)));
}

INSTANTIATE_TEST_SUITE_P(
    TransformerOps, OnnxExportRefusesForwardTest,
    ::testing::Values(
        RefusedForward{"index_two_tensors",
                       "    i = torch.arange(2)\n    return x[:, i, i]\n",
                       "it indexes with more than one tensor"},
        RefusedForward{"pad_circular",
                       "    return torch.pad(x, [1, 1, 1, 1], 'circular')\n",
                       "padding mode 'circular' has no ONNX Pad mode"},
        RefusedForward{"roll_flattened", "    return torch.roll(x, [1])\n",
                       "a roll without one dim per shift (of the flattened tensor) is not written"},
        RefusedForward{"norm_p3", "    return torch.norm(x, 3.0, [1], False)\n",
                       "only the 1- and 2-norm over given axes are written"},
        // Written through a transposed view, the base would be read stale: refused.
        RefusedForward{"write_through_transpose",
                       "    a = x * 2.0\n    b = a.transpose(2, 3)\n    b.add_(1.0)\n"
                       "    return a\n",
                       "it writes in place into aten::transpose of a tensor read later, which "
                       "the export does not write"},
        // A slice of step 2 is not one box of the base: refused, not written stale.
        RefusedForward{"write_through_strided_slice",
                       "    a = x * 2.0\n    b = a[:, :, ::2]\n    b.add_(1.0)\n    return a\n",
                       "it writes in place into a slice whose axis is not constant or whose "
                       "step is not 1, of a tensor read later"},
        // A boolean mask the shapes decide (folded into a constant index list).
        RefusedForward{"index_constant_mask",
                       "    m = torch.arange(3) > 0\n    return x[:, m]\n",
                       "its index tensor is Bool (only integer indices are written; a mask is "
                       "not)"},
        RefusedForward{"attention_mask",
                       "    q = x.flatten(2).transpose(1, 2)[:, :, :2]\n"
                       "    w = torch.ones([6, 2])\n"
                       "    b = torch.zeros([6])\n"
                       "    pw = torch.ones([2, 2])\n"
                       "    pb = torch.zeros([2])\n"
                       "    mask = torch.zeros([1, 64]) > 1.0\n"  // a key padding mask
                       "    out, weights = torch._native_multi_head_attention(q, q, q, 2, 1, w, b, "
                       "pw, pb, mask, False, True, 1)\n"
                       "    return out\n",
                       "an attention mask is not written"},
        RefusedForward{"attention_weights_read",
                       "    q = x.flatten(2).transpose(1, 2)[:, :, :2]\n"
                       "    w = torch.ones([6, 2])\n"
                       "    b = torch.zeros([6])\n"
                       "    pw = torch.ones([2, 2])\n"
                       "    pb = torch.zeros([2])\n"
                       "    out, weights = torch._native_multi_head_attention(q, q, q, 2, 1, w, b, "
                       "pw, pb, None, True)\n"
                       "    return out + weights.sum()\n",
                       "its attention weights are read (need_weights=True)"}),
    [](const ::testing::TestParamInfo<RefusedForward>& info) { return info.param.name; });

// A tensor no input reaches is written with its contents, in a type ONNX and the export share;
// an int16 one has none and is refused by name.
TEST(OnnxExportTest, AnInputFreeTensorOfATypeTheExportDoesNotWriteIsRefused) {
  torch::jit::Module module("Int16Constant");
  module.define("def forward(self, x):\n    return x * torch.ones([1], dtype=2)\n");  // int16
  const sdk::Error error = export_error(module, {1, 3, 8, 8});
  EXPECT_EQ(error.code(), sdk::Errc::kUnsupported) << error.what();
  EXPECT_THAT(error.what(), AllOf(HasSubstr("is a Short tensor; Lithe exports float models"),
                                  HasSubstr(kNothingWritten)));
}

TEST(OnnxExportTest, ARefusedModelLeavesNoFileAndKeepsAnOldOne) {
  const torch::jit::Module model = load_error_model("batchnorm_no_stats");
  const std::filesystem::path dir = test::scratch_dir("onnx_refused");
  const std::filesystem::path fresh = dir / "fresh.onnx";
  EXPECT_THAT([&] { save_onnx(model, {{1, 3, 8, 8}, 13}, fresh); },
              ::testing::ThrowsMessage<sdk::Error>(HasSubstr("without running statistics")));
  EXPECT_FALSE(std::filesystem::exists(fresh));
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // no staging file left either

  const std::filesystem::path old = dir / "old.onnx";
  std::ofstream(old, std::ios::binary) << "previous export";
  EXPECT_THAT([&] { save_onnx(model, {{1, 3, 8, 8}, 13}, old); },
              ::testing::ThrowsMessage<sdk::Error>(HasSubstr(kNothingWritten)));
  std::ifstream in(old, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "previous export");
}

// A forward with two required tensor inputs fails before any op is looked at: the error says
// Lithe runs forwards on one input and names the missing argument.
TEST(OnnxExportTest, AForwardWithTwoRequiredInputsIsRefused) {
  try {
    export_onnx(load_error_model("two_inputs"), {{1, 3, 8, 8}, 13});
    ADD_FAILURE() << "exported a forward of two required inputs";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kUnsupported) << e.what();
    EXPECT_THAT(e.what(), AllOf(HasSubstr("Lithe runs the model's forward on one input tensor"),
                                HasSubstr("missing value for argument 'y'")));
  }
}

}  // namespace
}  // namespace lithe::host
