// Native int8 conversion of models quantized by Lithe's own quantizers (linked directly): the
// fake-quantized reference it builds is Lithe's quantized forward bit for bit; the int8 model
// runs libtorch's quantized kernels (conv + ReLU fused, int8 tensors between them), agrees with
// the reference within a grid step, is smaller, and saves and loads as plain TorchScript.
#include "lithe/host/export/int8_convert.h"

#include <ATen/Context.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "lithe/host/model/batchnorm_folding.h"
#include "lithe/host/model/model.h"
#include "lithe/host/session/quantization_session.h"
#include "lithe/sdk/error.h"
#include "support/conformance_models.h"
#include "support/paths.h"
#include "support/quantized_models.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<int64_t> kLenetInput = {8, 1, 28, 28};

// conv1 quantizes its input (the model's float input); every layer its weight and output, so
// each later layer reads the int8 output of the one before.
std::string config(const std::string& types_first, const std::string& types_rest) {
  return R"([{"quant_types": )" + types_first +
         R"(, "quant_bits": 8, "op_names": ["conv1"]},
             {"quant_types": )" +
         types_rest + R"(, "quant_bits": 8, "op_names": ["conv2", "fc1", "fc2", "fc3"]}])";
}
const std::string kChained = config(R"(["input", "weight", "output"])", R"(["weight", "output"])");

at::Tensor run(torch::jit::Module& module, const at::Tensor& x) {
  torch::NoGradGuard no_grad;
  return module.forward({x}).toTensor();
}

std::string saved(const torch::jit::Module& module) {
  std::ostringstream out;
  module.save(out);
  return out.str();
}

torch::jit::Module reloaded(const torch::jit::Module& module) {
  std::istringstream in(saved(module));
  return torch::jit::load(in);
}

TEST(Int8ConvertTest, TheFakeQuantizedReferenceIsLithesQuantizedForwardBitForBit) {
  for (const char* algorithm : {"qat", "lsq"}) {
    test::QuantizedModel q = test::quantize_model(
        test::load_conformance_model("lenet"), algorithm,
        config(R"(["input", "weight", "output"])", R"(["input", "weight", "output"])"), kLenetInput,
        3);
    Int8ConvertOptions options;
    options.fake_quantized = true;
    torch::jit::Module reference = convert_to_int8(q.module, options);
    torch::manual_seed(11);
    for (int i = 0; i < 3; ++i) {
      const at::Tensor x = torch::randn(kLenetInput) * 2;
      const at::Tensor want = q.forward(x);
      const at::Tensor got = run(reference, x);
      EXPECT_TRUE(torch::equal(got, want))
          << algorithm << ": max |reference - Lithe| = " << (got - want).abs().max();
      // And the float model is really something else.
      EXPECT_FALSE(torch::equal(run(q.module, x), want)) << algorithm;
    }
  }
}

TEST(Int8ConvertTest, SymmetricWeightsRunInt8OnTheX86EngineWithReluFusedAndNoRequantization) {
  if (available_quantized_engines().empty()) {
    GTEST_SKIP() << "this libtorch has no quantized engine";
  }
  // LSQ: symmetric int8 weights (zero point 0), signed activations (a 256-code grid).
  test::QuantizedModel q =
      test::quantize_model(test::load_conformance_model("lenet"), "lsq", kChained, kLenetInput, 3);
  Int8ConvertReport report;
  torch::jit::Module int8 = convert_to_int8(q.module, {}, &report);
  EXPECT_EQ(report.engine, QuantizedEngine::kX86);
  ASSERT_EQ(report.int8_layers.size(), 5u);
  const char* const kernels[] = {"quantized::conv2d_relu", "quantized::conv2d_relu",
                                 "quantized::linear_relu", "quantized::linear_relu",
                                 "quantized::linear"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(report.int8_layers[i].kernel, kernels[i]) << report.int8_layers[i].name;
  }
  EXPECT_TRUE(report.float_layers.empty());
  // One quantize (the model's input), one dequantize (its output): pooling and flatten run on
  // int8 tensors.
  EXPECT_EQ(report.quantize_ops, 1);
  EXPECT_EQ(report.dequantize_ops, 1);
  EXPECT_THAT(report.dequantized_before, ::testing::ElementsAre("the model's output"));
  ASSERT_EQ(report.output_scales.size(), 1u);
  const double step = report.output_scales[0];
  EXPECT_EQ(step,
            q.module.attr("fc3").toModule().attr("lithe_q_output_scale").toTensor().item<float>());

  Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  torch::jit::Module reference = convert_to_int8(q.module, reference_options);
  torch::manual_seed(12);
  double worst = 0;
  for (int i = 0; i < 4; ++i) {
    const at::Tensor x = torch::randn(kLenetInput) * 2;
    const at::Tensor got = run(int8, x);
    const at::Tensor want = run(reference, x);
    EXPECT_TRUE(got.is_floating_point() && !got.is_quantized());
    worst = std::max(worst, (got - want).abs().max().item<double>());
    EXPECT_TRUE(torch::equal(got.argmax(1), want.argmax(1)));
  }
  EXPECT_LE(worst, 2 * step) << "within two steps of the output grid";
  EXPECT_GT(worst, 0) << "the kernels' own rounding shows somewhere: a check that can fail";

  // Plain TorchScript: saved and loaded again without Lithe, it computes the same, and the file
  // holds int8 weights.
  torch::jit::Module back = reloaded(int8);
  const at::Tensor x = torch::randn(kLenetInput);
  EXPECT_TRUE(torch::equal(run(back, x), run(int8, x)));
  EXPECT_EQ(back.attr("lithe_quantized_engine").toStringRef(), "x86");
  EXPECT_LT(saved(int8).size(), saved(test::load_conformance_model("lenet")).size() * 35 / 100);
}

TEST(Int8ConvertTest, LsqPerChannelStepSizesBecomePerChannelInt8Weights) {
  if (available_quantized_engines().empty()) {
    GTEST_SKIP() << "this libtorch has no quantized engine";
  }
  const std::string per_channel = R"([{"quant_types": ["input", "weight", "output"],
      "quant_bits": 8, "op_names": ["conv1"], "quant_scheme": {"weight": "per_channel_symmetric"}},
      {"quant_types": ["weight", "output"], "quant_bits": 8, "op_names": ["conv2", "fc1", "fc2",
      "fc3"], "quant_scheme": {"weight": "per_channel_symmetric"}}])";
  test::QuantizedModel q = test::quantize_model(test::load_conformance_model("lenet"), "lsq",
                                                per_channel, kLenetInput, 3);
  EXPECT_EQ(q.module.attr("conv2").toModule().attr("lithe_q_weight_scale").toTensor().numel(),
            q.module.attr("conv2").toModule().attr("weight").toTensor().size(0));
  Int8ConvertReport report;
  torch::jit::Module int8 = convert_to_int8(q.module, {}, &report);
  EXPECT_EQ(report.engine, QuantizedEngine::kX86);
  ASSERT_EQ(report.int8_layers.size(), 5u);
  for (const Int8Layer& layer : report.int8_layers) {
    EXPECT_TRUE(layer.per_channel) << layer.name;
  }
  Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  torch::jit::Module reference = convert_to_int8(q.module, reference_options);
  torch::manual_seed(13);
  const at::Tensor x = torch::randn(kLenetInput) * 2;
  // The reference is Lithe's own per-channel forward, bit for bit; the int8 model within two
  // steps of its output grid.
  EXPECT_TRUE(torch::equal(run(reference, x), q.forward(x)));
  EXPECT_LE((run(int8, x) - run(reference, x)).abs().max().item<double>(),
            2 * report.output_scales.at(0));
}

TEST(Int8ConvertTest, AsymmetricWeightsChooseTheX86EngineOrRunInFloatOnOnednnWhenAllowed) {
  const std::vector<QuantizedEngine> engines = available_quantized_engines();
  for (QuantizedEngine needed : {QuantizedEngine::kX86, QuantizedEngine::kOnednn,
                                 QuantizedEngine::kQnnpack}) {
    if (std::find(engines.begin(), engines.end(), needed) == engines.end()) {
      GTEST_SKIP() << "needs the x86, onednn and qnnpack engines (x86 CPUs)";
    }
  }
  // QAT: weights on [0, 255] with a zero point that is not 128 (not symmetric as qint8).
  test::QuantizedModel q =
      test::quantize_model(test::load_conformance_model("lenet"), "qat", kChained, kLenetInput, 3);
  Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  torch::jit::Module reference = convert_to_int8(q.module, reference_options);
  const at::Tensor x = torch::randn(kLenetInput);
  // x86 (FBGEMM for these weights) by default; QNNPACK when asked, a step less exact (it
  // requantizes with a float multiplier of its own).
  for (const auto& [engine, steps] :
       {std::pair{QuantizedEngine::kAuto, 2}, std::pair{QuantizedEngine::kQnnpack, 3}}) {
    Int8ConvertOptions options;
    options.engine = engine;
    Int8ConvertReport report;
    torch::jit::Module int8 = convert_to_int8(q.module, options, &report);
    EXPECT_EQ(report.engine,
              engine == QuantizedEngine::kAuto ? QuantizedEngine::kX86 : QuantizedEngine::kQnnpack);
    EXPECT_EQ(report.int8_layers.size(), 5u);
    EXPECT_LE((run(int8, x) - run(reference, x)).abs().max().item<double>(),
              steps * report.output_scales.at(0))
        << quantized_engine_name(report.engine);
  }

  // oneDNN takes zero point 0 only: refused by default, naming the fix; in float when allowed.
  Int8ConvertOptions onednn;
  onednn.engine = QuantizedEngine::kOnednn;
  try {
    convert_to_int8(q.module, onednn);
    FAIL() << "layers that run in float were written without --allow-float-layers";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kUnsupported);
    EXPECT_THAT(e.what(), AllOf(HasSubstr(" of 5 quantized layers would run"),
                                HasSubstr("zero point is not 0"), HasSubstr("x86 engine"),
                                HasSubstr("--allow-float-layers"),
                                HasSubstr("nothing was written")));
  }
  onednn.allow_float_layers = true;
  Int8ConvertReport float_report;
  torch::jit::Module mixed = convert_to_int8(q.module, onednn, &float_report);
  EXPECT_EQ(float_report.engine, QuantizedEngine::kOnednn);
  ASSERT_FALSE(float_report.float_layers.empty());
  EXPECT_THAT(float_report.float_layers[0].reason, HasSubstr("zero point is not 0"));
  EXPECT_EQ(float_report.float_layers.size() + float_report.int8_layers.size(), 5u);
  // Layers in float run their exact fake quantization: a model all in float is the reference.
  if (float_report.int8_layers.empty()) {
    EXPECT_TRUE(torch::equal(run(mixed, x), run(reference, x)));
  }
}

// An archive names its engine; Lithe's loader switches to it before the weights are prepacked
// again (a QNNPACK model with asymmetric weights cannot load under oneDNN).
TEST(Int8ConvertTest, LoadingAnInt8ArchiveSwitchesToTheEngineItNames) {
  const std::vector<QuantizedEngine> engines = available_quantized_engines();
  if (engines.size() < 2) {
    GTEST_SKIP() << "needs both the qnnpack and the onednn engine";
  }
  test::QuantizedModel q =
      test::quantize_model(test::load_conformance_model("lenet"), "qat", kChained, kLenetInput, 2);
  Int8ConvertOptions qnnpack;
  qnnpack.engine = QuantizedEngine::kQnnpack;
  Int8ConvertReport report;
  torch::jit::Module int8 = convert_to_int8(q.module, qnnpack, &report);
  ASSERT_EQ(report.engine, QuantizedEngine::kQnnpack);
  const std::filesystem::path dir = test::scratch_dir("int8_engine_record");
  int8.save((dir / "int8.pt").string(), {{kQuantizedEngineRecord, "qnnpack"}});
  int8.save((dir / "bad.pt").string(), {{kQuantizedEngineRecord, "mkldnn"}});
  const at::Tensor x = torch::randn(kLenetInput);
  const at::Tensor want = run(int8, x);

  use_quantized_engine(QuantizedEngine::kOnednn);
  torch::jit::Module loaded = load_torchscript_module(dir / "int8.pt");
  EXPECT_EQ(at::globalContext().qEngine(), at::QEngine::QNNPACK);
  EXPECT_TRUE(torch::equal(run(loaded, x), want));
  try {
    load_torchscript_module(dir / "bad.pt");
    FAIL() << "an unknown engine loaded";
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("bad.pt"), HasSubstr("extra/lithe_quantized_engine"),
                                HasSubstr("'mkldnn' is not a quantized engine")));
  }
}

// Weights and outputs only (NNI's ordinary config): conv1 reads the float model input, which
// no quantizer quantizes. Calibration observed that input's range, so conv1's input is quantized
// on it and every layer runs int8; the reference told the same quantizes there too.
TEST(Int8ConvertTest, AnInputNoInt8OpMakesIsQuantizedOnItsCalibratedRange) {
  test::QuantizedModel q = test::quantize_model(
      test::load_conformance_model("lenet"), "lsq",
      config(R"(["weight", "output"])", R"(["weight", "output"])"), kLenetInput, 2);
  // The range is the calibration inputs' (seeded as quantize_model draws them).
  torch::manual_seed(5);
  const at::Tensor seen = torch::cat({torch::randn(kLenetInput), torch::randn(kLenetInput)});
  const auto observed = [&](const char* layer) {
    return q.module.attr(layer).toModule().attr(kObservedInputRangeBuffer).toTensor();
  };
  EXPECT_TRUE(torch::equal(observed("conv1"), torch::stack({seen.min(), seen.max()})));
  // conv2 observes its input too (convert uses a range only where no int8 op makes the input).
  EXPECT_EQ(observed("conv2").numel(), 2)
      << "conv2 observes its input too (convert uses it only where no int8 op makes it)";

  Int8ConvertReport report;
  torch::jit::Module int8 = convert_to_int8(q.module, {}, &report);
  EXPECT_TRUE(report.float_layers.empty());
  EXPECT_EQ(report.int8_layers.size(), 5u);
  EXPECT_EQ(report.inputs_from_ranges, std::vector<std::string>{"conv1"});
  EXPECT_EQ(report.quantize_ops, 1) << "the model's input";
  Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  reference_options.inputs_from_ranges = report.inputs_from_ranges;
  torch::jit::Module reference = convert_to_int8(q.module, reference_options);
  reference_options.inputs_from_ranges.clear();
  torch::jit::Module as_calibrated = convert_to_int8(q.module, reference_options);
  const at::Tensor x = torch::randn(kLenetInput);
  EXPECT_LE((run(int8, x) - run(reference, x)).abs().max().item<double>(),
            2 * report.output_scales.at(0));
  // The quantizer's own forward does not quantize conv1's input; the reference told to does.
  EXPECT_TRUE(torch::equal(run(as_calibrated, x), q.forward(x)));
  EXPECT_FALSE(torch::equal(run(reference, x), q.forward(x)));
}

TEST(Int8ConvertTest, ALayerLeftInFloatIsRefusedWithItsFixUnlessAllowed) {
  test::QuantizedModel q = test::quantize_model(
      test::load_conformance_model("lenet"), "lsq",
      config(R"(["weight", "output"])", R"(["weight", "output"])"), kLenetInput, 2);
  // As if never calibrated: no observed range (an empty buffer is an absent one).
  q.module.attr("conv1").toModule().setattr(kObservedInputRangeBuffer, at::empty({0}));
  try {
    convert_to_int8(q.module, {});
    FAIL() << "conv1 in float was written without allow_float_layers";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kUnsupported);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("1 of 5 quantized layers"),
                                HasSubstr("(conv1: its input is not quantized"),
                                HasSubstr("--calibration-batches N"),
                                HasSubstr("add \"input\" to its quant_types"),
                                HasSubstr("--allow-float-layers"), HasSubstr("nothing was written")));
  }
  Int8ConvertOptions allowed;
  allowed.allow_float_layers = true;
  Int8ConvertReport report;
  torch::jit::Module int8 = convert_to_int8(q.module, allowed, &report);
  ASSERT_EQ(report.float_layers.size(), 1u);
  EXPECT_EQ(report.float_layers[0].name, "conv1");
  EXPECT_EQ(report.int8_layers.size(), 4u);
  EXPECT_EQ(report.quantize_ops, 1) << "conv1's output";
  Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  torch::jit::Module reference = convert_to_int8(q.module, reference_options);
  const at::Tensor x = torch::randn(kLenetInput);
  EXPECT_LE((run(int8, x) - run(reference, x)).abs().max().item<double>(),
            2 * report.output_scales.at(0));

  // Every pair of edge values: a usable grid (the model converts and runs finite), or refused
  // as an invalid model; never a crash or a non-finite output.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> edges = {-inf, -1e300, -3e38, -1, -1e-30, 0, 1e-30, 1, 3e38, 1e300,
                                     inf, std::numeric_limits<double>::quiet_NaN()};
  int converted = 0;
  for (double lo : edges) {
    for (double hi : edges) {
      q.module.attr("conv1").toModule().setattr(kObservedInputRangeBuffer,
                                                torch::tensor({lo, hi}, torch::kDouble));
      try {
        torch::jit::Module m = convert_to_int8(q.module, {});
        EXPECT_TRUE(run(m, x).isfinite().all().item<bool>()) << lo << ", " << hi;
        ++converted;
      } catch (const sdk::Error& e) {
        EXPECT_EQ(e.code(), sdk::Errc::kInvalidModel) << lo << ", " << hi << ": " << e.what();
      }
    }
  }
  EXPECT_GT(converted, 10) << "the ordinary ranges convert";

  // A hostile range: refused, naming the layer, the rule and the value.
  for (const at::Tensor& bad : {torch::tensor({1.0F, -1.0F}),
                                torch::tensor({0.0F, std::numeric_limits<float>::quiet_NaN()}),
                                torch::tensor({0.0F, 1.0F, 2.0F}), torch::tensor({0, 1})}) {
    q.module.attr("conv1").toModule().setattr(kObservedInputRangeBuffer, bad);
    try {
      convert_to_int8(q.module, allowed);
      FAIL() << "range " << bad << " was read";
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), sdk::Errc::kInvalidModel);
      EXPECT_THAT(e.what(), AllOf(HasSubstr("layer 'conv1'"), HasSubstr("observed input range"),
                                  HasSubstr(bad.numel() == 2 && bad.is_floating_point()
                                                ? "finite with min <= max"
                                                : "two floating-point values"),
                                  HasSubstr("nothing was written")));
    }
  }
}

// A ResNet-style net with BatchNorm folded: each residual block returns its quantized sum, so
// the sum and its ReLU run as quantized::add_relu and every convolution reads int8.
TEST(Int8ConvertTest, AResidualBlockReturningAQuantizedSumRunsQuantizedAddRelu) {
  torch::jit::Module net = test::load_conformance_model("resblock");
  ASSERT_EQ(fold_batchnorms(net).folded.size(), 6u);
  const std::vector<int64_t> shape = {4, 3, 16, 16};
  test::QuantizedModel q = test::quantize_model(net, "lsq", R"([
      {"quant_types": ["input", "weight", "output"], "quant_bits": 8, "op_names": ["conv1", "fc1"]},
      {"quant_types": ["weight", "output"], "quant_bits": 8,
       "op_names": ["layer1.conv1", "layer1.conv2", "layer2.conv1", "layer2.conv2",
                    "layer2.shortcut.0"]},
      {"quant_types": ["output"], "quant_bits": 8, "op_types": ["BasicBlock"]}])",
                                                shape, 3);
  Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  torch::jit::Module reference = convert_to_int8(q.module, reference_options);
  const at::Tensor x = torch::randn(shape);
  EXPECT_TRUE(torch::equal(run(reference, x), q.forward(x)))
      << "the reference quantizes the blocks' outputs where Lithe does";

  Int8ConvertReport report;
  torch::jit::Module int8 = convert_to_int8(q.module, {}, &report);
  EXPECT_EQ(report.int8_layers.size(), 7u);
  EXPECT_TRUE(report.float_layers.empty()) << report.float_layers.front().reason;
  EXPECT_THAT(report.int8_ops,
              ::testing::ElementsAre("quantized::add_relu in layer1 (BasicBlock)",
                                     "quantized::add_relu in layer2 (BasicBlock)"));
  // Float only where no int8 kernel exists: the average pooling before fc1 (then quantized
  // again on fc1's input grid), and the model's output.
  EXPECT_EQ(report.quantize_ops, 2);
  EXPECT_EQ(report.dequantize_ops, 2);
  const double step = report.output_scales.at(0);
  ASSERT_GT(step, 0);
  EXPECT_LE((run(int8, x) - run(reference, x)).abs().max().item<double>(), 3 * step);
}

TEST(Int8ConvertTest, RefusesModelsWithoutStateAndQuantizedLayersOfOtherTypes) {
  try {
    convert_to_int8(test::load_conformance_model("lenet"), {});
    FAIL() << "a float model converted";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidModel);
    EXPECT_THAT(e.what(), HasSubstr("no layer of the model carries Lithe's quantization state"));
  }
  test::QuantizedModel q = test::quantize_model(
      test::load_conformance_model("lenet"), "qat",
      R"([{"quant_types": ["input", "output"], "quant_bits": 8, "op_names": ["relu1"]}])",
      kLenetInput, 1);
  try {
    convert_to_int8(q.module, {});
    FAIL() << "a ReLU with a quantized input converted";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kUnsupported);
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr("layer 'relu1' (ReLU) quantizes its input or weight"),
                      HasSubstr("the output of any module"), HasSubstr("nothing was written")));
  }
  EXPECT_THROW(parse_quantized_engine("mkldnn", "--engine"), sdk::Error);
  EXPECT_EQ(parse_quantized_engine("x86", "--engine"), QuantizedEngine::kX86);
  EXPECT_EQ(parse_quantized_engine("fbgemm", "--engine"), QuantizedEngine::kFbgemm);
}

}  // namespace
}  // namespace lithe::host
