// qat's quant_scheme / quant_dtype through a whole quantization session on a TorchScript model:
// per-channel symmetric int8 weights reach the QDQ ONNX export as int8 codes with one scale per
// output channel and zero points 0 (what oneDNN's int8 engine takes), dequantizing to exactly
// the weights Lithe's forward computed with; and a model saved with one scheme continues only
// with a scheme whose state has the same shape.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <torch/script.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/export/onnx_export.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/quantization_session.h"
#include "lithe/sdk/error.h"
#include "plugins/qat/qat.h"
#include "support/conformance_models.h"

namespace lithe::plugins::qat {
namespace {

using ::testing::HasSubstr;

const char* const kLenetLayers[] = {"conv1", "conv2", "fc1", "fc2", "fc3"};
const std::vector<int64_t> kLenetInput = {2, 1, 28, 28};

// Weights int8 symmetric per output channel, outputs uint8 affine per tensor (NNI v2.5's
// example config for backends with zero-point-0 weights).
const char* const kPerChannelConfig = R"([{
  "quant_types": ["weight", "output"], "quant_bits": 8,
  "quant_scheme": {"weight": "per_channel_symmetric", "output": "per_tensor_affine"},
  "quant_dtype": {"weight": "int", "output": "uint"},
  "op_types": ["Conv2d", "Linear"]}])";

const char* const kPerTensorConfig = R"([{
  "quant_types": ["weight", "output"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}])";

host::PluginRegistry& registry() {
  static host::PluginRegistry* r = [] {
    auto* created = new host::PluginRegistry();
    register_algorithms(*created);
    return created;
  }();
  return *r;
}

/// `module` under a qat session of `config_list`: compressed, output ranges calibrated on two
/// seeded random batches, state stored in the module.
struct Quantized {
  std::unique_ptr<host::Model> model;
  std::unique_ptr<host::QuantizationSession> session;

  Quantized(const torch::jit::Module& module, const std::string& config_list) {
    model = host::make_torchscript_model(module);
    session = std::make_unique<host::QuantizationSession>(
        *model, registry(), host::make_compression_config("qat", config_list));
    session->compress();
    session->set_calibrating(true);
    torch::manual_seed(5);
    for (int i = 0; i < 2; ++i) {
      forward(torch::randn(kLenetInput));
    }
    session->set_calibrating(false);
    session->store_state_in_model();
  }
  at::Tensor forward(const at::Tensor& x) {
    torch::NoGradGuard no_grad;
    model->train(false);
    return model->forward(x);
  }
};

const onnx::TensorProto* initializer(const onnx::ModelProto& model, const std::string& name) {
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    if (t.name() == name) {
      return &t;
    }
  }
  return nullptr;
}

const onnx::NodeProto* producer(const onnx::ModelProto& model, const std::string& output) {
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (node.output_size() > 0 && node.output(0) == output) {
      return &node;
    }
  }
  return nullptr;
}

int count(const onnx::ModelProto& model, const std::string& type) {
  int n = 0;
  for (const onnx::NodeProto& node : model.graph().node()) {
    n += node.op_type() == type ? 1 : 0;
  }
  return n;
}

// An initializer's values as float32 (int8, uint8 or float storage).
at::Tensor values(const onnx::TensorProto& t) {
  const std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  const at::ScalarType type = t.data_type() == onnx::TensorProto_DataType_UINT8  ? at::kByte
                              : t.data_type() == onnx::TensorProto_DataType_INT8 ? at::kChar
                                                                                 : at::kFloat;
  at::Tensor out = at::empty(dims, type);
  EXPECT_EQ(t.raw_data().size(), static_cast<size_t>(out.nbytes())) << t.name();
  std::memcpy(out.data_ptr(), t.raw_data().data(), std::min(t.raw_data().size(), out.nbytes()));
  return out.to(at::kFloat);
}

bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

TEST(QatSchemeSessionTest, PerChannelSymmetricInt8WeightsExportAsInt8CodesPerOutputChannel) {
  torch::jit::Module module = test::load_conformance_model("lenet");
  Quantized q(module, kPerChannelConfig);
  q.session->set_recording(true);
  q.forward(torch::randn(kLenetInput));
  onnx::ModelProto exported;
  ASSERT_TRUE(exported.ParseFromString(host::export_onnx(module, {kLenetInput, 13})));
  for (const char* layer : kLenetLayers) {
    const std::string weight = std::string(layer) + ".weight";
    const int64_t channels = module.attr(layer).toModule().attr("weight").toTensor().size(0);
    // The state the export reads: one scale and zero point per output channel, grid [−127, 127].
    const torch::jit::Module m = module.attr(layer).toModule();
    EXPECT_EQ(m.attr("lithe_q_weight_scale").toTensor().sizes(), at::IntArrayRef({channels}));
    EXPECT_EQ(m.attr("lithe_q_weight_quant_min").toTensor().item<float>(), -127.f);
    EXPECT_EQ(m.attr("lithe_q_weight_quant_max").toTensor().item<float>(), 127.f);

    const onnx::NodeProto* dq = producer(exported, weight);
    ASSERT_NE(dq, nullptr) << layer;
    ASSERT_EQ(dq->op_type(), "DequantizeLinear") << layer;
    ASSERT_EQ(dq->attribute_size(), 1) << layer;
    EXPECT_EQ(dq->attribute(0).name(), "axis");
    EXPECT_EQ(dq->attribute(0).i(), 0);
    const onnx::TensorProto* codes = initializer(exported, dq->input(0));
    const onnx::TensorProto* scale = initializer(exported, dq->input(1));
    const onnx::TensorProto* zero = initializer(exported, dq->input(2));
    ASSERT_TRUE(codes != nullptr && scale != nullptr && zero != nullptr) << layer;
    EXPECT_EQ(codes->data_type(), onnx::TensorProto_DataType_INT8) << layer;
    EXPECT_EQ(zero->data_type(), onnx::TensorProto_DataType_INT8) << layer;
    ASSERT_EQ(scale->dims_size(), 1) << layer;
    EXPECT_EQ(scale->dims(0), channels) << layer;
    const at::Tensor q_codes = values(*codes);
    const at::Tensor s = values(*scale);
    const at::Tensor z = values(*zero);
    EXPECT_TRUE(z.eq(0).all().item<bool>()) << layer << ": symmetric int8, zero point 0";
    EXPECT_LE(q_codes.abs().max().item<float>(), 127.f) << layer;
    // Every channel reaches the end of its own grid: its scale is its own abs_max / 127.
    const at::Tensor per_channel_max = q_codes.abs().reshape({channels, -1}).amax(1);
    EXPECT_TRUE(per_channel_max.eq(127).all().item<bool>()) << layer << per_channel_max;
    // DequantizeLinear gives the weights Lithe's forward computed with, bit for bit up to the
    // sign of zero: with zero point 0, a weight in (−scale / 2, 0) is −0 in the fake-quantized
    // weight ((−0 − 0) · s) and +0 from its int8 code 0.
    std::vector<int64_t> shape(static_cast<size_t>(q_codes.dim()), 1);
    shape[0] = channels;
    const at::Tensor dequantized = (q_codes - z.view(shape)) * s.view(shape);
    const host::QuantRecord* record = q.session->last_record(layer, sdk::QuantType::kWeight);
    ASSERT_NE(record, nullptr) << layer;
    EXPECT_TRUE(bit_equal(dequantized, record->output + 0.f)) << layer;  // −0 + 0 = +0
  }
  // The outputs keep their uint8 per-tensor pairs.
  EXPECT_EQ(count(exported, "QuantizeLinear"), 5);
  EXPECT_EQ(count(exported, "DequantizeLinear"), 10);
}

TEST(QatSchemeSessionTest, AModelSavedPerTensorDoesNotContinuePerChannel) {
  torch::jit::Module module = test::load_conformance_model("lenet");
  { Quantized saved(module, kPerTensorConfig); }  // the module keeps its lithe_q_ buffers
  auto model = host::make_torchscript_model(module);
  host::QuantizationSession session(*model, registry(),
                                    host::make_compression_config("qat", kPerChannelConfig));
  try {
    session.compress();
    FAIL() << "a per-tensor state was restored into per-channel parameters";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidModel) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("layer 'conv1': its saved qat state 'weight_scale' holds 1 "
                                    "value (quantized per tensor), but this entry's quant_scheme "
                                    "for the weight needs 6 (one per output channel)"));
  }
}

TEST(QatSchemeSessionTest, AModelSavedPerChannelContinuesWithTheSameScheme) {
  torch::jit::Module module = test::load_conformance_model("lenet");
  at::Tensor output_max;
  {
    Quantized saved(module, kPerChannelConfig);
    output_max =
        module.attr("fc1").toModule().attr("lithe_q_output_tracked_max").toTensor().clone();
  }
  Quantized again(module, kPerChannelConfig);  // two more calibration batches
  const torch::jit::Module fc1 = module.attr("fc1").toModule();
  EXPECT_EQ(fc1.attr("lithe_q_weight_scale").toTensor().sizes(), at::IntArrayRef({120}));
  EXPECT_FALSE(fc1.attr("lithe_q_output_tracked_max").toTensor().equal(output_max))
      << "the EMA continued from the saved range";
}

}  // namespace
}  // namespace lithe::plugins::qat
