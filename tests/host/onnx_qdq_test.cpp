// QDQ export of quantized models: weights become integer codes + DequantizeLinear equal to the
// fake-quantized weights bit for bit, activations QuantizeLinear + DequantizeLinear with the
// learned scales and zero points; per-channel grids, grids narrower than 8 bits, types that do
// not quantize yet, and the quantizers and states that have no QDQ form (refused by name).
// ONNX Runtime parity of the same models is in onnx_runtime_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <torch/script.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "lithe/host/export/onnx_export.h"
#include "lithe/sdk/error.h"
#include "support/conformance_models.h"
#include "support/paths.h"
#include "support/quantized_models.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const char* const kLenetLayers[] = {"conv1", "conv2", "fc1", "fc2", "fc3"};
const std::vector<int64_t> kLenetInput = {2, 1, 28, 28};

std::string qat_config(const std::string& types, int bits) {
  return R"([{"quant_types": )" + types + R"(, "quant_bits": )" + std::to_string(bits) +
         R"(, "op_types": ["Conv2d", "Linear"]}])";
}

onnx::ModelProto parse(const std::string& bytes) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(bytes));
  return model;
}

onnx::ModelProto exported(const torch::jit::Module& module) {
  return parse(export_onnx(module, {kLenetInput, 13}));
}

int count(const onnx::ModelProto& model, const std::string& type) {
  int n = 0;
  for (const onnx::NodeProto& node : model.graph().node()) {
    n += node.op_type() == type ? 1 : 0;
  }
  return n;
}

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
    if (node.output(0) == output) {
      return &node;
    }
  }
  return nullptr;
}

// An initializer's values as a float tensor (int8, uint8 or float storage).
at::Tensor values(const onnx::TensorProto& t) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  const std::string& raw = t.raw_data();
  const at::ScalarType type = t.data_type() == onnx::TensorProto_DataType_UINT8  ? at::kByte
                              : t.data_type() == onnx::TensorProto_DataType_INT8 ? at::kChar
                                                                                 : at::kFloat;
  at::Tensor out = at::empty(dims, type);
  EXPECT_EQ(raw.size(), static_cast<size_t>(out.numel() * out.element_size())) << t.name();
  std::memcpy(out.data_ptr(), raw.data(), std::min<size_t>(raw.size(), out.nbytes()));
  return out.to(at::kFloat);
}

// DequantizeLinear of the weight `name` as the exported model holds it: (q − z)·s in float32.
at::Tensor dequantized_weight(const onnx::ModelProto& model, const std::string& name) {
  const onnx::NodeProto* dq = producer(model, name);
  if (dq == nullptr || dq->op_type() != "DequantizeLinear") {
    ADD_FAILURE() << name << " is not made by DequantizeLinear";
    return {};
  }
  const at::Tensor q = values(*initializer(model, dq->input(0)));
  at::Tensor s = values(*initializer(model, dq->input(1)));
  at::Tensor z = values(*initializer(model, dq->input(2)));
  if (s.dim() == 1) {  // per channel on axis 0
    std::vector<int64_t> shape(q.dim(), 1);
    shape[0] = s.numel();
    s = s.view(shape);
    z = z.view(shape);
  }
  return (q - z) * s;
}

bool bit_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

TEST(OnnxQdqTest, QatWeightsBecomeUint8CodesWhoseDequantizationIsTheFakeQuantizedWeight) {
  test::QuantizedModel q = test::quantize_model(test::load_conformance_model("lenet"), "qat",
                                                qat_config(R"(["weight", "output"])", 8),
                                                kLenetInput, 2);
  q.session->set_recording(true);
  q.forward(torch::randn(kLenetInput));
  const onnx::ModelProto model = exported(q.module);
  for (const char* layer : kLenetLayers) {
    const std::string weight = std::string(layer) + ".weight";
    const onnx::TensorProto* codes = initializer(model, weight + "_quantized");
    ASSERT_NE(codes, nullptr) << layer;
    EXPECT_EQ(codes->data_type(), onnx::TensorProto_DataType_UINT8) << layer;
    EXPECT_EQ(initializer(model, weight), nullptr) << "no float copy of " << weight;
    const QuantRecord* record = q.session->last_record(layer, sdk::QuantType::kWeight);
    ASSERT_NE(record, nullptr);
    EXPECT_TRUE(bit_equal(dequantized_weight(model, weight), record->output))
        << layer << ": the exported weight is what Lithe's forward computes with";
  }
  // One QuantizeLinear per quantized output, one DequantizeLinear per output and per weight.
  EXPECT_EQ(count(model, "QuantizeLinear"), 5);
  EXPECT_EQ(count(model, "DequantizeLinear"), 10);
  // The file holds one byte per weight instead of four.
  const std::string float_bytes = export_onnx(test::load_conformance_model("lenet"),
                                              {kLenetInput, 13});
  EXPECT_LT(export_onnx(q.module, {kLenetInput, 13}).size(), float_bytes.size() * 35 / 100);
}

TEST(OnnxQdqTest, ActivationPairsCarryTheLearnedScaleAndZeroPointAtTheModuleCall) {
  test::QuantizedModel q = test::quantize_model(test::load_conformance_model("lenet"), "qat",
                                                qat_config(R"(["input", "output"])", 8),
                                                kLenetInput, 3);
  const onnx::ModelProto model = exported(q.module);
  EXPECT_EQ(count(model, "QuantizeLinear"), 10) << "an input and an output pair per layer";
  // conv1's input pair reads the model input; its scale and zero point are the state's.
  const onnx::NodeProto* first_quantize = nullptr;
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (node.op_type() == "QuantizeLinear" && node.input(0) == "input") {
      first_quantize = &node;
    }
  }
  ASSERT_NE(first_quantize, nullptr) << "conv1's input is quantized where it enters conv1";
  const at::Tensor scale = q.module.attr("conv1").toModule().attr("lithe_q_input_scale").toTensor();
  const at::Tensor zero = q.module.attr("conv1").toModule().attr("lithe_q_input_zero_point").toTensor();
  EXPECT_EQ(values(*initializer(model, first_quantize->input(1))).item<float>(),
            scale.item<float>());
  EXPECT_EQ(values(*initializer(model, first_quantize->input(2))).item<float>(),
            zero.item<float>());
  EXPECT_EQ(initializer(model, first_quantize->input(2))->data_type(),
            onnx::TensorProto_DataType_UINT8);
  // The Conv reads the dequantized input.
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (node.op_type() == "Conv") {
      EXPECT_EQ(producer(model, node.input(0))->op_type(), "DequantizeLinear");
    }
  }
}

TEST(OnnxQdqTest, LsqExportsSymmetricInt8WithZeroPointZero) {
  test::QuantizedModel q = test::quantize_model(
      test::load_conformance_model("lenet"), "lsq",
      R"([{"quant_types": ["weight", "output"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}])",
      kLenetInput, 1);
  q.session->set_recording(true);
  q.forward(torch::randn(kLenetInput));
  const onnx::ModelProto model = exported(q.module);
  EXPECT_EQ(count(model, "QuantizeLinear"), 5);
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    if (t.name().find("zero_point") != std::string::npos) {
      EXPECT_EQ(t.data_type(), onnx::TensorProto_DataType_INT8) << t.name();
      EXPECT_EQ(values(t).abs().max().item<float>(), 0.f) << t.name();
    }
  }
  // LSQ's forward scales its step size by NNI's gradient-scaling expression
  // ((s − s·g) + s·g, g = 1/√(qmax·numel)), which can round the step by one float32 ulp; the
  // export uses the step size itself, so the weights agree to that relative precision.
  const QuantRecord* record = q.session->last_record("fc1", sdk::QuantType::kWeight);
  ASSERT_NE(record, nullptr);
  const at::Tensor exported = dequantized_weight(model, "fc1.weight");
  EXPECT_TRUE(at::allclose(exported, record->output, /*rtol=*/3e-7, /*atol=*/0))
      << (exported - record->output).abs().max();
}

TEST(OnnxQdqTest, AnOutputWithoutObservedRangeIsExportedAsItRunsUnquantized) {
  // No calibration: QAT's outputs have no range and pass through; the weights quantize.
  test::QuantizedModel q = test::quantize_model(test::load_conformance_model("lenet"), "qat",
                                                qat_config(R"(["weight", "output"])", 8),
                                                kLenetInput, 0);
  const onnx::ModelProto model = exported(q.module);
  EXPECT_EQ(count(model, "QuantizeLinear"), 0);
  EXPECT_EQ(count(model, "DequantizeLinear"), 5);
}

TEST(OnnxQdqTest, AGridNarrowerThanEightBitsIsClippedBeforeQuantizeLinear) {
  test::QuantizedModel q = test::quantize_model(test::load_conformance_model("lenet"), "qat",
                                                qat_config(R"(["output"])", 4), kLenetInput, 2);
  const onnx::ModelProto model = exported(q.module);
  ASSERT_EQ(count(model, "Clip"), 5);
  const torch::jit::Module fc3 = q.module.attr("fc3").toModule();
  const float s = fc3.attr("lithe_q_output_scale").toTensor().item<float>();
  const float z = fc3.attr("lithe_q_output_zero_point").toTensor().item<float>();
  bool found = false;
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (node.op_type() == "QuantizeLinear" &&
        values(*initializer(model, node.input(1))).item<float>() == s) {
      const onnx::NodeProto* clip = producer(model, node.input(0));
      ASSERT_NE(clip, nullptr);
      ASSERT_EQ(clip->op_type(), "Clip");
      EXPECT_EQ(values(*initializer(model, clip->input(1))).item<float>(), (0 - z) * s);
      EXPECT_EQ(values(*initializer(model, clip->input(2))).item<float>(), (15 - z) * s);
      found = true;
    }
  }
  EXPECT_TRUE(found) << "fc3's output pair";
}

TEST(OnnxQdqTest, ModulesCalledTwiceShareOneWeightAndATiedReadStaysFloat) {
  torch::jit::Module shared = torch::jit::load(
      (test::source_dir() / "tests/data/onnx_qdq_shared_calls.pt").string());
  shared.eval();
  const std::vector<int64_t> shape = {2, 3, 8, 8};
  test::QuantizedModel q = test::quantize_model(
      shared, "qat",
      R"([{"quant_types": ["input", "weight", "output"], "quant_bits": 8,
           "op_types": ["Conv2d", "Linear"]},
          {"quant_types": ["output"], "quant_bits": 8, "op_types": ["ReLU"]}])",
      shape, 2);
  const onnx::ModelProto model = parse(export_onnx(q.module, {shape, 13}));
  int conv_weight_codes = 0;
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    conv_weight_codes += t.name() == "conv.weight_quantized" ? 1 : 0;
  }
  EXPECT_EQ(conv_weight_codes, 1) << "one initializer for both calls of conv";
  ASSERT_NE(producer(model, "conv.weight"), nullptr);
  // Inputs and outputs of both conv calls, both relu outputs, fc's input and output.
  EXPECT_EQ(count(model, "QuantizeLinear"), 8);
  // The parent's own F.linear(h, self.fc.weight) reads the float weight, as Lithe runs it.
  const onnx::TensorProto* tied = initializer(model, "fc.weight_float");
  ASSERT_NE(tied, nullptr);
  EXPECT_EQ(tied->data_type(), onnx::TensorProto_DataType_FLOAT);
  EXPECT_NE(producer(model, "fc.weight"), nullptr) << "fc's own read is quantized";
}

// A state written by hand in the SDK's convention (lithe/sdk/quantizer.h): what a third-party
// quantizer with per-channel weights would save.
void add_state(torch::jit::Module& layer, const std::string& identity,
               const std::map<std::string, at::Tensor>& state) {
  const at::Tensor bytes =
      at::from_blob(const_cast<char*>(identity.data()), {static_cast<int64_t>(identity.size())},
                    at::kByte)
          .clone();
  layer.register_buffer("lithe_q_identity", bytes);
  for (const auto& [key, value] : state) {
    layer.register_buffer("lithe_q_" + key, value);
  }
}

const std::string kHandmadeWeight8 = R"({"algorithm":"handmade","quant_bits":{"weight":8}})";

TEST(OnnxQdqTest, APerChannelWeightGridDequantizesOnAxisZero) {
  torch::jit::Module model = test::load_conformance_model("lenet");
  torch::jit::Module conv1 = model.attr("conv1").toModule();
  const at::Tensor w = conv1.attr("weight").toTensor().detach();
  const at::Tensor scale = w.abs().amax({1, 2, 3}) / 127;
  add_state(conv1, kHandmadeWeight8,
            {{"weight_scale", scale}, {"weight_zero_point", at::zeros({6})},
             {"weight_quant_min", at::full({1}, -128.f)}, {"weight_quant_max", at::full({1}, 127.f)}});
  const onnx::ModelProto exported_model = exported(model);
  const onnx::NodeProto* dq = producer(exported_model, "conv1.weight");
  ASSERT_NE(dq, nullptr);
  ASSERT_EQ(dq->attribute_size(), 1);
  EXPECT_EQ(dq->attribute(0).name(), "axis");
  EXPECT_EQ(dq->attribute(0).i(), 0);
  EXPECT_EQ(initializer(exported_model, dq->input(1))->dims(0), 6);
  // ATen's own per-channel fake quantization (another implementation) agrees.
  const at::Tensor reference = at::fake_quantize_per_channel_affine(
      w, scale, at::zeros({6}, at::kInt), 0, -128, 127);
  EXPECT_TRUE(at::equal(dequantized_weight(exported_model, "conv1.weight"), reference));
}

TEST(OnnxQdqTest, QuantizersWithoutALinearGridAreRefusedNamingLayerTypeAndAlgorithm) {
  for (const char* algorithm : {"dorefa", "bnn"}) {
    test::QuantizedModel q = test::quantize_model(
        test::load_conformance_model("lenet"), algorithm,
        R"([{"quant_types": ["weight"], "quant_bits": 4, "op_names": ["conv2"]}])", kLenetInput, 0);
    EXPECT_THAT([&] { export_onnx(q.module, {kLenetInput, 13}); },
                ::testing::ThrowsMessage<sdk::Error>(AllOf(
                    HasSubstr("layer 'conv2'"), HasSubstr("its weight"),
                    HasSubstr("'" + std::string(algorithm) + "'"), HasSubstr("no linear grid"),
                    HasSubstr("nothing was written"))))
        << algorithm;
  }
}

TEST(OnnxQdqTest, GridsWiderThanEightBitsAndBrokenStatesAreRefusedWithTheValueSeen) {
  test::QuantizedModel wide = test::quantize_model(test::load_conformance_model("lenet"), "qat",
                                                   qat_config(R"(["weight"])", 12), kLenetInput, 0);
  EXPECT_THAT([&] { export_onnx(wide.module, {kLenetInput, 13}); },
              ::testing::ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("layer 'conv1'"), HasSubstr("with 12 bits"),
                        HasSubstr("do not fit 8-bit codes"))));
  // Also before any range was observed (an empty grid): known from the configuration, so a
  // pre-flight export refuses it before the training.
  test::QuantizedModel wide_output = test::quantize_model(
      test::load_conformance_model("lenet"), "qat",
      R"([{"quant_types": ["weight", "output"], "quant_bits": {"weight": 8, "output": 16},
           "op_types": ["Conv2d", "Linear"]}])",
      kLenetInput, 0);
  EXPECT_THAT([&] { export_onnx(wide_output.module, {kLenetInput, 13}); },
              ::testing::ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("its output with 'qat', with 16 bits"))));

  const auto refused = [](const std::map<std::string, at::Tensor>& state) {
    torch::jit::Module model = test::load_conformance_model("lenet");
    torch::jit::Module fc1 = model.attr("fc1").toModule();
    add_state(fc1, kHandmadeWeight8, state);
    try {
      export_onnx(model, {kLenetInput, 13});
    } catch (const sdk::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const at::Tensor grid_min = at::zeros({1});
  const at::Tensor grid_max = at::full({1}, 255.f);
  EXPECT_THAT(refused({{"weight_scale", at::full({1}, 0.1f)},
                       {"weight_zero_point", at::full({1}, 300.f)},
                       {"weight_quant_min", grid_min}, {"weight_quant_max", grid_max}}),
              AllOf(HasSubstr("layer 'fc1'"), HasSubstr("zero point is 300"),
                    HasSubstr("[0, 255]")));
  EXPECT_THAT(refused({{"weight_scale", at::zeros({1})}, {"weight_quant_min", grid_min},
                       {"weight_quant_max", grid_max}}),
              AllOf(HasSubstr("layer 'fc1'"), HasSubstr("scale is 0"), HasSubstr("> 0")));
  EXPECT_THAT(refused({{"weight_scale", at::full({1}, 0.1f)}, {"weight_quant_min", grid_min},
                       {"weight_quant_max", at::full({1}, 4095.f)}}),
              AllOf(HasSubstr("layer 'fc1'"), HasSubstr("[0, 4095]"),
                    HasSubstr("does not fit 8-bit codes")));
  EXPECT_THAT(refused({{"weight_scale", at::full({1}, 1e-9f)}, {"weight_quant_min", grid_min},
                       {"weight_quant_max", grid_max}, {"weight_zero_point", at::full({1}, 0.5f)}}),
              HasSubstr("zero point is 0.5"));
  EXPECT_THAT(refused({{"weight_scale", at::ones({7})}, {"weight_quant_min", grid_min},
                       {"weight_quant_max", grid_max}}),
              AllOf(HasSubstr("scale has 7 elements"), HasSubstr("per output channel (120)")));
}

}  // namespace
}  // namespace lithe::host
