// ONNX export of the conformance models: the graph Lithe writes (ops, initializers named like
// the state_dict, biases and BatchNorm parameters wired in), validity (export_onnx runs the ONNX
// checker and strict shape inference itself), and the errors that leave nothing behind.
// Numerical parity with ONNX Runtime is checked by the ORT tests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <torch/script.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "lithe/host/onnx_export.h"
#include "lithe/host/speedup.h"
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

}  // namespace
}  // namespace lithe::host
