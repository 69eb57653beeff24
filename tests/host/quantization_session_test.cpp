// The quantization framework on real models, with a test quantizer defined here: a uniform
// rounding quantizer whose step sizes are tensor attributes, and whose QuantGrad zeroes the
// output gradient where |x| > 1 (the custom-backward case of the SDK contract).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "lithe/host/model/model.h"
#include "lithe/host/session/quantization_session.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/quantizer.h"
#include "support/model_snapshot.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr double kWeightStep = 1.0 / 64;
constexpr double kActivationStep = 1.0 / 8;

at::Tensor round_to(const at::Tensor& x, double step) { return (x / step).round() * step; }

// Zeroes the output gradient where the pre-quantization output was outside [-1, 1].
class ClipOutputGrad final : public sdk::QuantGrad {
 public:
  at::Tensor backward(const at::Tensor& x, const at::Tensor& grad, sdk::QuantType type,
                      const sdk::LayerView&) const override {
    if (type != sdk::QuantType::kOutput) {
      return grad;
    }
    return grad * x.abs().le(1).to(grad.dtype());
  }
};

class RoundingQuantizer final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {sdk::QuantType::kInput, sdk::QuantType::kWeight,
                                     sdk::QuantType::kOutput},
                             "rounding");
  }
  void attach(sdk::CompressionContext& context) override {
    for (sdk::LayerView* layer : context.layers()) {
      for (sdk::QuantType type : sdk::quant_types(layer->config())) {
        const std::string prefix = sdk::quant_type_name(type);
        const double step = type == sdk::QuantType::kWeight ? kWeightStep : kActivationStep;
        sdk::ensure_tensor_attribute(*layer, prefix + "_scale", at::full({1}, step));
        sdk::ensure_tensor_attribute(*layer, prefix + "_training_calls", at::zeros({1}));
      }
    }
  }
  at::Tensor quantize_weight(const at::Tensor& w, sdk::LayerView& layer, bool training) override {
    return quantize(w, "weight", layer, training);
  }
  at::Tensor quantize_input(const at::Tensor& x, sdk::LayerView& layer, bool training) override {
    return quantize(x, "input", layer, training);
  }
  at::Tensor quantize_output(const at::Tensor& x, sdk::LayerView& layer, bool training) override {
    return quantize(x, "output", layer, training);
  }
  const sdk::QuantGrad& quant_grad() const override { return grad_; }

 private:
  static at::Tensor attribute(sdk::LayerView& layer, const std::string& key) {
    return std::get<at::Tensor>(*layer.attribute(key));
  }
  static at::Tensor quantize(const at::Tensor& x, const std::string& prefix,
                             sdk::LayerView& layer, bool training) {
    if (training) {
      attribute(layer, prefix + "_training_calls").add_(1);
    }
    return round_to(x, attribute(layer, prefix + "_scale").item<double>());
  }
  ClipOutputGrad grad_;
};

PluginRegistry& registry() {
  static PluginRegistry* r = [] {
    auto* out = new PluginRegistry();
    out->add_quantizer({"rounding", "test quantizer"}, [](const sdk::Options&, const sdk::Registry&) {
      return std::make_unique<RoundingQuantizer>();
    });
    return out;
  }();
  return *r;
}

CompressionConfig config(const std::string& config_list) {
  return {"rounding", config_list, "{}", "<test>"};
}

at::Tensor sample_input(int64_t batch = 4, double scale = 1.0) {
  torch::manual_seed(7);
  return torch::randn({batch, 1, 28, 28}) * scale;
}

// The same LeNet with `name`'s weight replaced by its rounded value, as a plain model.
std::unique_ptr<Model> lenet_with_rounded_weights(const std::vector<std::string>& names) {
  torch::jit::Module module = torch::jit::load(test::lenet_model().string());
  auto model = make_torchscript_model(module);
  at::NoGradGuard no_grad;
  for (const std::string& name : names) {
    at::Tensor w = *model->find_module(name)->weight;
    w.copy_(round_to(w, kWeightStep));
  }
  return model;
}

TEST(QuantizationSessionTest, WeightsAreQuantizedInsideTheForwardAndTheFloatWeightsStay) {
  auto model = load_torchscript_model(test::lenet_model());
  const auto before = test::snapshot_weights(*model);
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}])"));
  session.compress();
  model->train(false);
  const at::Tensor x = sample_input();
  const at::Tensor quantized = model->forward(x);

  auto reference = lenet_with_rounded_weights({"conv1", "conv2", "fc1", "fc2", "fc3"});
  reference->train(false);
  EXPECT_TRUE(quantized.equal(reference->forward(x)));
  for (const auto& [name, w] : test::snapshot_weights(*model)) {
    EXPECT_TRUE(w.equal(before.at(name))) << name << ": the float weights must not change";
  }
  // Rounding to 1/64 visibly changes LeNet's output: the check above is not vacuous.
  session.detach();
  EXPECT_FALSE(model->forward(x).equal(quantized));
}

TEST(QuantizationSessionTest, WeightGradientReachesTheFloatWeightThroughTheStraightThroughEstimator) {
  auto model = load_torchscript_model(test::lenet_model());
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Linear"]}])"));
  session.compress();
  model->train(true);
  const at::Tensor x = sample_input();
  model->forward(x).pow(2).sum().backward();

  // STE: d loss / d float weight == d loss / d quantized weight of the rounded model.
  auto reference = lenet_with_rounded_weights({"fc1", "fc2", "fc3"});
  reference->train(true);
  reference->forward(x).pow(2).sum().backward();
  for (const char* name : {"fc1", "fc2", "fc3"}) {
    const at::Tensor grad = model->find_module(name)->weight->grad();
    ASSERT_TRUE(grad.defined()) << name;
    EXPECT_GT(grad.abs().sum().item<double>(), 0) << name;
    EXPECT_TRUE(torch::allclose(grad, reference->find_module(name)->weight->grad(), 1e-6, 1e-7))
        << name;
  }
}

TEST(QuantizationSessionTest, CustomBackwardZeroesTheOutputGradientWhereThePluginSays) {
  auto model = load_torchscript_model(test::lenet_model());
  // Large inputs push some fc3 outputs beyond |1|: those must give no gradient to fc3.bias.
  const at::Tensor x = sample_input(16, 40.0);
  at::Tensor raw;
  {
    at::NoGradGuard no_grad;
    model->train(true);
    raw = model->forward(x);  // fc3 is the last layer: its raw output is the model output
  }
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["output"], "quant_bits": 8, "op_names": ["fc3"]}])"));
  session.compress();
  model->forward(x).sum().backward();

  const at::Tensor expected = raw.abs().le(1).to(at::kFloat).sum(0);
  const at::Tensor bias_grad = model->find_module("fc3")->bias->grad();
  ASSERT_TRUE(bias_grad.defined());
  EXPECT_TRUE(bias_grad.equal(expected));
  EXPECT_GT(raw.abs().gt(1).sum().item<int64_t>(), 0) << "the test needs clipped outputs";
  EXPECT_GT(expected.sum().item<double>(), 0) << "and unclipped ones";
  // The clipped gradient flows on to earlier parameters too.
  EXPECT_TRUE(model->find_module("fc1")->weight->grad().defined());
}

TEST(QuantizationSessionTest, InputAndOutputAreQuantizedAtTheCallSite) {
  auto model = load_torchscript_model(test::lenet_model());
  const at::Tensor x = sample_input();
  model->train(false);
  const at::Tensor float_out = model->forward(x);
  const at::Tensor expected = round_to(model->forward(round_to(x, kActivationStep)), kActivationStep);
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["input"], "quant_bits": 8, "op_names": ["conv1"]},
                 {"quant_types": ["output"], "quant_bits": 8, "op_names": ["fc3"]}])"));
  session.compress();
  const at::Tensor out = model->forward(x);
  EXPECT_TRUE(out.equal(expected));
  EXPECT_FALSE(out.equal(float_out));
}

// A model that records which input sites each set_quantization call installs, and otherwise
// is the TorchScript model it wraps.
class SiteRecordingModel final : public Model {
 public:
  explicit SiteRecordingModel(std::unique_ptr<Model> inner) : inner_(std::move(inner)) {}
  std::vector<std::string> input_sites;  // of the latest set_quantization call

  std::string kind() const override { return inner_->kind(); }
  const std::vector<ModuleRecord>& modules() const override { return inner_->modules(); }
  std::vector<at::Tensor> parameters() const override { return inner_->parameters(); }
  std::vector<at::Tensor> state_tensors() const override { return inner_->state_tensors(); }
  at::Tensor forward(const at::Tensor& input) override { return inner_->forward(input); }
  void train(bool on) override { inner_->train(on); }
  bool is_training() const override { return inner_->is_training(); }
  void set_taps(const std::vector<std::string>& modules, TapCallback callback) override {
    inner_->set_taps(modules, std::move(callback));
  }
  void set_quantization(const std::vector<QuantSite>& sites, QuantCallback callback) override {
    inner_->set_quantization(sites, std::move(callback));
    input_sites.clear();
    for (const QuantSite& site : sites) {
      if (site.input) {
        input_sites.push_back(site.module);
      }
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> module_buffers(
      const std::string& module) const override {
    return inner_->module_buffers(module);
  }
  void set_module_buffer(const std::string& module, const std::string& name,
                         const at::Tensor& value) override {
    inner_->set_module_buffer(module, name, value);
  }
  std::string serialize() const override { return inner_->serialize(); }

 private:
  std::unique_ptr<Model> inner_;
};

// Weights and outputs only: the layers' inputs are observed for int8 conversion, but only while
// the session calibrates. Every other forward (training, evaluation, serving the fake-quantized
// model) runs without those sites, and the range covers the calibration batches alone.
TEST(QuantizationSessionTest, InputsAreObservedOnlyWhileCalibrating) {
  SiteRecordingModel model(load_torchscript_model(test::lenet_model()));
  QuantizationSession session(
      model, registry(),
      config(R"([{"quant_types": ["weight", "output"], "quant_bits": 8,
                  "op_types": ["Conv2d", "Linear"]}])"));
  session.compress();
  EXPECT_TRUE(model.input_sites.empty());
  model.train(false);
  const at::Tensor x = sample_input();
  model.forward(x * 100);  // outside calibration: not observed
  const at::Tensor plain = model.forward(x);

  session.set_calibrating(true);
  EXPECT_EQ(model.input_sites,
            (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2", "fc3"}));
  EXPECT_TRUE(model.forward(x).equal(plain)) << "observing changes nothing the model computes";
  session.set_calibrating(false);
  EXPECT_TRUE(model.input_sites.empty());
  model.forward(x * 1000);  // nor after it

  session.store_state_in_model();
  at::Tensor range;
  for (const auto& [name, tensor] : model.module_buffers("conv1")) {
    if (name == kObservedInputRangeBuffer) {
      range = tensor;
    }
  }
  ASSERT_TRUE(range.defined());
  EXPECT_TRUE(range.equal(at::stack({x.min(), x.max()}))) << range;

  // A detached session installs nothing when calibration starts again.
  session.detach();
  session.set_calibrating(true);
  EXPECT_TRUE(model.input_sites.empty());
  session.set_calibrating(false);

  // compress() during calibration installs the observing sites at once.
  SiteRecordingModel other(load_torchscript_model(test::lenet_model()));
  QuantizationSession calibrating(
      other, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_names": ["fc1"]}])"));
  calibrating.set_calibrating(true);
  calibrating.compress();
  EXPECT_EQ(other.input_sites, std::vector<std::string>{"fc1"});
  calibrating.set_calibrating(false);
  EXPECT_TRUE(other.input_sites.empty());
}

TEST(QuantizationSessionTest, OutputOnlyQuantizationMaySelectLayersWithoutWeight) {
  auto model = load_torchscript_model(test::lenet_model());
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["output"], "quant_bits": 8, "op_types": ["ReLU"]}])"));
  session.compress();
  model->train(false);
  const at::Tensor out = model->forward(sample_input());
  EXPECT_EQ(session.report().size(), 4u);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 10}));
}

TEST(QuantizationSessionTest, StateIsSavedWithTheModelAndRestoredByANewSession) {
  const auto dir = test::scratch_dir("quantization_state");
  const std::string list =
      R"([{"quant_types": ["weight", "output"], "quant_bits": {"weight": 8, "output": 6},
           "op_types": ["Conv2d", "Linear"]}])";
  std::string calibration;
  {
    auto model = load_torchscript_model(test::lenet_model());
    QuantizationSession session(*model, registry(), config(list));
    session.compress();
    model->train(true);
    {
      at::NoGradGuard no_grad;
      model->forward(sample_input());
      model->forward(sample_input());
    }
    session.store_state_in_model();
    model->save(dir / "quantized.pt");
    calibration = session.calibration_json();
  }
  // The saved file is a plain TorchScript archive whose modules carry the state as buffers.
  torch::jit::Module saved = torch::jit::load((dir / "quantized.pt").string());
  EXPECT_EQ(
      saved.attr("conv1").toModule().attr("lithe_q_output_training_calls").toTensor().item<float>(),
      2.0f);
  EXPECT_FLOAT_EQ(saved.attr("fc2").toModule().attr("lithe_q_weight_scale").toTensor().item<float>(),
                  static_cast<float>(kWeightStep));

  auto reloaded = load_torchscript_model(dir / "quantized.pt");
  QuantizationSession session(*reloaded, registry(), config(list));
  session.compress();
  EXPECT_EQ(session.calibration_json(), calibration);
  const auto* calls = session.layers()[0]->attribute("weight_training_calls");
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(std::get<at::Tensor>(*calls).item<float>(), 2.0f) << "restored, not re-initialised";
  // The calibration file states bits and state per quant type.
  const auto json = nlohmann::json::parse(calibration);
  EXPECT_EQ(json["layers"]["fc1"]["output"]["bits"], 6);
  EXPECT_EQ(json["layers"]["fc1"]["weight"]["bits"], 8);
  EXPECT_DOUBLE_EQ(json["layers"]["fc1"]["weight"]["scale"].get<double>(), kWeightStep);
}

TEST(QuantizationSessionTest, TrainingUpdatesTheFloatWeightsUnderWeightQuantization) {
  auto model = load_torchscript_model(test::lenet_model());
  const auto before = test::snapshot_weights(*model);
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}])"));
  session.compress();
  Dataset data;
  torch::manual_seed(3);
  data.images = torch::randn({64, 1, 28, 28});
  data.labels = torch::randint(0, 10, {64}, at::kLong);
  data.source = "<random>";
  TrainOptions options;
  options.epochs = 1;
  options.batch_size = 16;
  options.progress = false;
  train(*model, data, nullptr, options, &session);
  for (const auto& [name, w] : test::snapshot_weights(*model)) {
    const at::Tensor change = (w - before.at(name)).abs();
    EXPECT_GT(change.max().item<double>(), 0) << name << ": the float weights must train";
    // Most updates are far smaller than the 1/64 quantization step: only a float master
    // weight keeps them (a quantized-only weight would round them away).
    EXPECT_GT(change.lt(kWeightStep / 2).logical_and(change.gt(0)).sum().item<int64_t>(), 0)
        << name;
  }
}

TEST(QuantizationSessionTest, AnOptimizerSteppedOutsideTheSessionIsReportedAtStep) {
  auto model = load_torchscript_model(test::lenet_model());
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}])"));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  const at::Tensor input = torch::randn({4, 1, 28, 28});
  auto train_step = [&] {
    optimizer.zero_grad();
    model->forward(input).sum().backward();
  };
  session.compress();
  // The contract: optimizer_step, then step. Weights changed after the optimizer_step (as
  // when pruning masks are re-applied during QAT) are fine.
  train_step();
  session.optimizer_step(optimizer);
  {
    at::NoGradGuard no_grad;
    model->parameters().front().mul_(0.5);
  }
  session.step();
  // A batch without an optimizer step (gradient accumulation) leaves the weights alone.
  train_step();
  session.step();
  // optimizer.step() in place of session.optimizer_step: the quantizer's step never ran.
  train_step();
  optimizer.step();
  EXPECT_THAT([&] { session.step(); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("quantizer 'rounding': session.step() found the weights of layer "
                            "'conv1' changed since the session last saw them, with no "
                            "session.optimizer_step in between"),
                  HasSubstr("Call session.optimizer_step(optimizer) instead of optimizer.step() "
                            "(it runs optimizer.step(), then the quantizer's step)"))));
  session.accept_weight_changes();  // changed on purpose
  session.step();
}

TEST(QuantizationSessionTest, CxxFrontendWeightAnywhereAndOutputInsideSequential) {
  torch::manual_seed(5);
  auto net = torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::ReLU(),
                                   torch::nn::Linear(5, 3));
  auto model = make_nn_model(net.ptr());
  const at::Tensor x = torch::randn({4, 6});
  const at::Tensor w0 = net[0]->as<torch::nn::Linear>()->weight.detach().clone();
  const at::Tensor w2 = net[2]->as<torch::nn::Linear>()->weight.detach().clone();
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    at::Tensor h = torch::relu(torch::nn::functional::linear(
        x, round_to(w0, kWeightStep), net[0]->as<torch::nn::Linear>()->bias));
    h = round_to(h, kActivationStep);
    expected = torch::nn::functional::linear(h, round_to(w2, kWeightStep),
                                             net[2]->as<torch::nn::Linear>()->bias);
  }
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Linear"]},
                 {"quant_types": ["output"], "quant_bits": 8, "op_types": ["ReLU"]}])"));
  session.compress();
  const at::Tensor out = model->forward(x);
  EXPECT_TRUE(torch::allclose(out, expected, 0, 1e-6));
  out.sum().backward();
  EXPECT_TRUE(net[0]->as<torch::nn::Linear>()->weight.grad().defined());
  EXPECT_TRUE(net[0]->as<torch::nn::Linear>()->weight.equal(w0)) << "float weight kept";
  // The state became buffers of the modules: torch::save writes it.
  EXPECT_NE(net[0]->named_buffers(false).find("lithe_q_weight_scale"), nullptr);
}

TEST(QuantizationSessionTest, CxxFrontendSequentialWithNamedChildren) {
  torch::manual_seed(5);
  torch::nn::Sequential net({{"fc", torch::nn::Linear(6, 5)},
                             {"act", torch::nn::ReLU()},
                             {"head", torch::nn::Linear(5, 3)}});
  auto model = make_nn_model(net.ptr());
  const at::Tensor x = torch::randn({4, 6});
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    expected = net->forward(x);
    expected = round_to(expected, kActivationStep);
  }
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["output"], "quant_bits": 8, "op_names": ["head"]}])"));
  session.compress();
  EXPECT_TRUE(torch::allclose(model->forward(x), expected, 0, 1e-6));
}

TEST(QuantizationSessionTest, NonFloatingPointTensorsAreRefusedNamingTheLayer) {
  auto net = torch::nn::Sequential(torch::nn::Embedding(10, 4));
  auto model = make_nn_model(net.ptr());
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["input"], "quant_bits": 8, "op_types": ["Embedding"]}])"));
  session.compress();
  EXPECT_THAT([&] { model->forward(torch::randint(0, 10, {3}, at::kLong)); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "quantizer 'rounding' on layer '0': its input is a Long tensor; only "
                  "floating-point tensors can be fake-quantized")));
}

// NNI's save/load flow on a C++-frontend model: build the same session on a fresh model, then
// load the saved state into it; the quantizer continues from the saved state.
TEST(QuantizationSessionTest, CxxFrontendStateIsSavedByTorchSaveAndRestoredByTorchLoad) {
  const auto dir = test::scratch_dir("quantization_nn_state");
  const std::string list =
      R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Linear"]}])";
  auto make_net = [] {
    return torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::ReLU(),
                                 torch::nn::Linear(5, 3));
  };
  {
    torch::manual_seed(5);
    auto net = make_net();
    auto model = make_nn_model(net.ptr());
    QuantizationSession session(*model, registry(), config(list));
    session.compress();
    model->train(true);
    at::NoGradGuard no_grad;
    for (int i = 0; i < 3; ++i) {
      model->forward(torch::randn({4, 6}));
    }
    torch::save(net, (dir / "net.pt").string());
  }
  torch::manual_seed(6);  // other initial weights: everything must come from the file
  auto net = make_net();
  auto model = make_nn_model(net.ptr());
  QuantizationSession session(*model, registry(), config(list));
  session.compress();
  const auto* before_load = session.layers()[0]->attribute("weight_training_calls");
  ASSERT_NE(before_load, nullptr);
  EXPECT_EQ(std::get<at::Tensor>(*before_load).item<float>(), 0.0f);
  torch::load(net, (dir / "net.pt").string());
  EXPECT_EQ(std::get<at::Tensor>(*session.layers()[0]->attribute("weight_training_calls"))
                .item<float>(),
            3.0f);
  EXPECT_EQ(std::get<at::Tensor>(*session.layers()[1]->attribute("weight_training_calls"))
                .item<float>(),
            3.0f);
}

TEST(QuantizationSessionTest, SavedStateOfAnotherConfigurationIsRefusedByName) {
  const auto dir = test::scratch_dir("quantization_identity");
  {
    auto model = load_torchscript_model(test::lenet_model());
    QuantizationSession session(
        *model, registry(),
        config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Linear"]}])"));
    session.compress();
    model->save(dir / "w8.pt");
  }
  auto model = load_torchscript_model(dir / "w8.pt");
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 4, "op_types": ["Linear"]}])"));
  EXPECT_THAT([&] { session.compress(); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("layer 'fc1' carries the quantization state of an earlier session "
                            "({\"algorithm\":\"rounding\",\"quant_bits\":{\"weight\":8}})"),
                  HasSubstr("but this session is {\"algorithm\":\"rounding\",\"quant_bits\":{\"weight\":4}}"))));
  // Nothing was installed: the forward is the float model's.
  auto plain = load_torchscript_model(test::lenet_model());
  model->train(false);
  plain->train(false);
  EXPECT_TRUE(model->forward(sample_input()).equal(plain->forward(sample_input())));
  EXPECT_THAT([&] { session.compress(); },
              ThrowsMessage<sdk::Error>(HasSubstr("this quantization session cannot continue")));
}

TEST(QuantizationSessionTest, ModelBuffersWithoutTheLithePrefixAreNeverTakenForState) {
  torch::jit::Module module = torch::jit::load(test::lenet_model().string());
  module.attr("fc1").toModule().register_buffer("weight_scale", at::full({1}, 123.0));
  auto model = make_torchscript_model(module);
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Linear"]}])"));
  session.compress();
  EXPECT_FLOAT_EQ(sdk::tensor_attribute(*session.layers()[0], "weight_scale").item<float>(),
                  static_cast<float>(kWeightStep));
}

// A quantizer error inside a TorchScript forward reaches the caller as the quantizer's own
// message (the interpreter would otherwise replace it by a generic one).
class FailingQuantizer final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {sdk::QuantType::kOutput}, "failing");
  }
  at::Tensor quantize_output(const at::Tensor&, sdk::LayerView& layer, bool) override {
    LITHE_CHECK(false, sdk::Errc::kInvalidConfig, "layer '", layer.name(),
                "': failing quantizer refuses output of this layer");
  }
};

TEST(QuantizationSessionTest, QuantizerErrorsInsideATorchScriptForwardKeepTheirMessage) {
  PluginRegistry r;
  r.add_quantizer({"failing", "test"}, [](const sdk::Options&, const sdk::Registry&) {
    return std::make_unique<FailingQuantizer>();
  });
  auto model = load_torchscript_model(test::lenet_model());
  QuantizationSession session(
      *model, r, {"failing", R"([{"quant_types": ["output"], "quant_bits": 8, "op_names": ["fc2"]}])",
                  "{}", "<test>"});
  session.compress();
  EXPECT_THAT([&] { model->forward(sample_input()); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("quantizer 'failing' on layer 'fc2' (output)"),
                  HasSubstr("layer 'fc2': failing quantizer refuses output of this layer"))));
}

TEST(QuantizationSessionTest, TrainingBeforeCompressIsAnError) {
  auto model = load_torchscript_model(test::lenet_model());
  QuantizationSession session(
      *model, registry(),
      config(R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Linear"]}])"));
  EXPECT_THAT([&] { session.extra_parameters(); },
              ThrowsMessage<sdk::Error>(HasSubstr("before compress(): the model is not quantized yet")));
}

TEST(QuantizationRegistryTest, QuantizersFromPreviewSdkPluginsAreRefusedByName) {
  PluginRegistry r;
  r.set_current_plugin("old_quant", "/plugins/libold_quant.so", /*sdk_minor=*/1);
  auto factory = [](const sdk::Options&, const sdk::Registry&) {
    return std::make_unique<RoundingQuantizer>();
  };
  EXPECT_THAT([&] { r.add_quantizer({"old", "built against SDK 1.1"}, factory); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("quantizer 'old'"),
                                              HasSubstr("Lithe SDK 1.1"),
                                              HasSubstr("rebuild the plugin against lithe-sdk 1.2"))));
  r.set_current_plugin("new_quant", "/plugins/libnew_quant.so", /*sdk_minor=*/2);
  r.add_quantizer({"new", "built against SDK 1.2"}, factory);
  EXPECT_NE(r.find(AlgorithmKind::kQuantizer, "new"), nullptr);
}

struct BadConfig {
  const char* config_list;
  const char* message;
};

class QuantizationBadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(QuantizationBadConfigTest, IsRejectedBeforeAnyWork) {
  auto model = load_torchscript_model(test::lenet_model());
  const auto before = test::snapshot_weights(*model);
  const at::Tensor x = sample_input();
  model->train(false);
  const at::Tensor out = model->forward(x);
  EXPECT_THAT([&] { QuantizationSession(*model, registry(), config(GetParam().config_list)); },
              ThrowsMessage<sdk::Error>(HasSubstr(GetParam().message)));
  EXPECT_TRUE(model->forward(x).equal(out));
  for (const auto& [name, w] : test::snapshot_weights(*model)) {
    EXPECT_TRUE(w.equal(before.at(name))) << name;
  }
  EXPECT_TRUE(model->module_buffers("conv1").empty()) << "no state was added";
}

INSTANTIATE_TEST_SUITE_P(
    Errors, QuantizationBadConfigTest,
    ::testing::Values(
        BadConfig{R"([{"quant_types": ["weight"], "quant_bits": 0, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_bits: bits must be in 1..32, got 0"},
        BadConfig{R"([{"quant_types": ["weight"], "quant_bits": {"weight": 33}, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_bits/weight: bits must be in 1..32, got 33"},
        BadConfig{R"([{"quant_types": ["weight", "bias"], "quant_bits": 8, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_types: unknown quant type 'bias'"},
        BadConfig{R"([{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["ReLU"]}])",
                  "/config_list/0 selects module 'relu1' (ReLU), which has no weight tensor to "
                  "quantize"},
        BadConfig{R"([{"quant_types": ["weight"], "quant_bits": {"weight": 8, "output": 8}, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_bits/output: gives bits for \"output\", which is not in "
                  "quant_types"},
        BadConfig{R"([{"quant_types": ["weight", "output"], "quant_bits": {"weight": 8}, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_bits: gives no bits for \"output\""},
        BadConfig{R"([{"quant_types": [], "quant_bits": 8, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_types: must name at least one"},
        BadConfig{R"([{"quant_bits": 8, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_types: required key missing"},
        BadConfig{R"([{"quant_types": ["weight", "weight"], "quant_bits": 8, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_types: \"weight\" is listed twice"},
        BadConfig{R"([{"quant_types": "weight", "quant_bits": 8, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_types: must be a list of \"input\", \"weight\", \"output\", "
                  "got \"weight\""},
        BadConfig{R"([{"quant_types": ["weight"], "op_types": ["Linear"]}])",
                  "/config_list/0/quant_bits: required key missing"},
        BadConfig{R"([{"quant_types": ["weight"], "quant_bits": 7.5, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_bits: bits must be an integer in 1..32, got 7.5"},
        BadConfig{R"([{"quant_types": ["weight"], "quant_bits": {"weights": 8}, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_bits/weights: unknown quant type 'weights'"},
        BadConfig{R"([{"quant_types": ["weight"], "quant_bits": 8, "quant_bitz": 4, "op_types": ["Linear"]}])",
                  "/config_list/0/quant_bitz: unknown key for quantizer 'rounding'"}));

}  // namespace
}  // namespace lithe::host
