// ptq through the host's QuantizationSession on the conformance LeNet (TorchScript): calibration
// batches (evaluation mode, calibrating) observe, evaluation forwards do not, the state saved
// with the model continues exactly when the saved model is calibrated again, and the QDQ ONNX
// export reads ptq's grids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <torch/script.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/export/onnx_export.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/quantization_session.h"
#include "plugins/ptq/ptq.h"
#include "support/conformance_models.h"

namespace lithe::plugins::ptq {
namespace {

const char* const kLenetLayers[] = {"conv1", "conv2", "fc1", "fc2", "fc3"};
const std::vector<int64_t> kLenetInput = {2, 1, 28, 28};

// Per-channel symmetric int8 weights by MSE, uint8 affine outputs by KL (conv1, conv2) and by
// percentile (the Linear layers).
const char* const kConfig = R"([
  {"quant_types": ["weight", "output"], "quant_bits": 8,
   "quant_scheme": {"weight": "per_channel_symmetric", "output": "per_tensor_affine"},
   "quant_dtype": {"weight": "int", "output": "uint"},
   "observer": {"weight": "mse", "output": "kl"}, "op_types": ["Conv2d"]},
  {"quant_types": ["input", "weight", "output"], "quant_bits": 8,
   "observer": {"input": "moving_average", "output": "percentile"}, "percentile": 99.9,
   "op_types": ["Linear"]}])";

host::PluginRegistry& registry() {
  static host::PluginRegistry* r = [] {
    auto* created = new host::PluginRegistry();
    register_algorithms(*created);
    return created;
  }();
  return *r;
}

std::vector<at::Tensor> batches(uint64_t seed, int count) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(torch::randn(kLenetInput));
  }
  return out;
}

/// `module` under a ptq session: compressed, calibrated on `data` as `lithe compress
/// --calibration-batches` does (evaluation mode, calibrating), state stored in the module.
struct Calibrated {
  std::unique_ptr<host::Model> model;
  std::unique_ptr<host::QuantizationSession> session;

  Calibrated(const torch::jit::Module& module, const std::vector<at::Tensor>& data) {
    model = host::make_torchscript_model(module);
    session = std::make_unique<host::QuantizationSession>(
        *model, registry(), host::make_compression_config("ptq", kConfig));
    session->compress();
    session->set_calibrating(true);
    for (const at::Tensor& x : data) {
      forward(x);
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

/// Every lithe_q_ buffer of the LeNet's layers, cloned.
std::map<std::string, at::Tensor> state(const torch::jit::Module& module) {
  std::map<std::string, at::Tensor> out;
  for (const char* layer : kLenetLayers) {
    for (const auto& buffer : module.attr(layer).toModule().named_buffers(false)) {
      if (buffer.name.rfind("lithe_q_", 0) == 0) {
        out[std::string(layer) + "." + buffer.name] = buffer.value.clone();
      }
    }
  }
  return out;
}

float buffer(const torch::jit::Module& module, const std::string& layer, const std::string& name) {
  return module.attr(layer).toModule().attr("lithe_q_" + name).toTensor().item<float>();
}

TEST(PtqSessionTest, CalibrationBatchesObserveAndEvaluationForwardsDoNot) {
  torch::jit::Module module = test::load_conformance_model("lenet");
  Calibrated q(module, batches(5, 3));
  for (const char* layer : kLenetLayers) {
    const torch::jit::Module m = module.attr(layer).toModule();
    const int64_t channels = m.attr("weight").toTensor().size(0);
    EXPECT_EQ(buffer(module, layer, "output_batches"), 3.f) << layer;
    EXPECT_EQ(buffer(module, layer, "output_quant_min"), 0.f) << layer;
    EXPECT_EQ(buffer(module, layer, "output_quant_max"), 255.f) << layer;
    EXPECT_GT(buffer(module, layer, "output_scale"), 0.f) << layer;
    const bool conv = std::string(layer).rfind("conv", 0) == 0;
    EXPECT_EQ(m.attr("lithe_q_weight_scale").toTensor().numel(), conv ? channels : 1) << layer;
    EXPECT_EQ(buffer(module, layer, "weight_quant_min"), conv ? -127.f : 0.f) << layer;
    if (conv) {
      EXPECT_TRUE(m.attr("lithe_q_weight_zero_point").toTensor().eq(0).all().item<bool>());
    } else {
      EXPECT_EQ(buffer(module, layer, "input_batches"), 3.f) << layer;
    }
  }
  // The histograms hold every output value of the three batches.
  q.session->set_recording(true);
  q.forward(torch::randn(kLenetInput));
  for (const char* layer : {"conv1", "fc1"}) {
    const host::QuantRecord* record = q.session->last_record(layer, sdk::QuantType::kOutput);
    ASSERT_NE(record, nullptr) << layer;
    const at::Tensor histogram =
        module.attr(layer).toModule().attr("lithe_q_output_histogram").toTensor();
    EXPECT_EQ(histogram.sum().item<double>(), 3.0 * static_cast<double>(record->input.numel()))
        << layer;
  }
  q.session->set_recording(false);
  const auto calibrated = state(module);
  const at::Tensor x = torch::randn(kLenetInput) * 10;
  const at::Tensor y = q.forward(x);
  EXPECT_TRUE(q.forward(x).equal(y));
  const auto after = state(module);
  ASSERT_EQ(after.size(), calibrated.size());
  for (const auto& [name, tensor] : calibrated) {
    EXPECT_TRUE(after.at(name).equal(tensor)) << name << " changed in evaluation";
  }
}

TEST(PtqSessionTest, ASavedModelCalibratedAgainContinuesAsIfNeverSaved) {
  torch::jit::Module saved = test::load_conformance_model("lenet");
  { Calibrated first(saved, batches(5, 2)); }  // the module keeps its lithe_q_ buffers
  Calibrated again(saved, batches(7, 2));
  torch::jit::Module whole = test::load_conformance_model("lenet");
  std::vector<at::Tensor> all = batches(5, 2);
  for (const at::Tensor& x : batches(7, 2)) {
    all.push_back(x);
  }
  Calibrated once(whole, all);
  EXPECT_EQ(buffer(saved, "conv2", "output_batches"), 4.f);
  const auto continued = state(saved);
  const auto uninterrupted = state(whole);
  ASSERT_EQ(continued.size(), uninterrupted.size());
  for (const auto& [name, tensor] : uninterrupted) {
    EXPECT_TRUE(continued.at(name).equal(tensor)) << name;
  }
}

TEST(PtqSessionTest, TheQdqExportReadsPtqsGrids) {
  torch::jit::Module module = test::load_conformance_model("lenet");
  Calibrated q(module, batches(5, 2));
  onnx::ModelProto exported;
  ASSERT_TRUE(exported.ParseFromString(host::export_onnx(module, {kLenetInput, 13})));
  int quantize = 0;
  int dequantize = 0;
  for (const onnx::NodeProto& node : exported.graph().node()) {
    quantize += node.op_type() == "QuantizeLinear" ? 1 : 0;
    dequantize += node.op_type() == "DequantizeLinear" ? 1 : 0;
  }
  // Five outputs and three Linear inputs are quantized and dequantized; five weights are
  // dequantized from their codes.
  EXPECT_EQ(quantize, 8);
  EXPECT_EQ(dequantize, 13);
}

}  // namespace
}  // namespace lithe::plugins::ptq
