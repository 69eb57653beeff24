// LayerCachedEvaluation and the forward cut under it: with one layer's weights changed between
// runs, evaluating only the part of the forward after the cut gives exactly what the whole
// forward gives, on every weighted layer of the LeNet and of the residual, BatchNorm and
// depthwise conformance models; so does overwriting the kept output of a layer whose whole
// output channels were zeroed (filter pruning, the first layer included, with the bias zeroed
// or kept); a suffix that writes in place to a value computed before the layer does not corrupt
// what is kept; models and layers that cannot be cut are evaluated in full and say why.
#include "lithe/host/train/layer_cached_evaluation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/graph/forward_cut.h"
#include "lithe/sdk/error.h"
#include "support/conformance_models.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// `samples` random images of `shape` (one sample) and labels in [0, classes).
Dataset random_data(std::vector<int64_t> shape, int64_t samples, int64_t classes) {
  torch::manual_seed(7);
  shape.insert(shape.begin(), samples);
  Dataset data;
  data.images = torch::randn(shape);
  data.labels = torch::randint(classes, {samples}, torch::kLong);
  data.source = "random";
  return data;
}

// Zeroes a seeded random half of `weight` in place; returns the original values.
at::Tensor prune_half(const at::Tensor& weight, int seed) {
  torch::manual_seed(seed);
  const at::Tensor original = weight.detach().clone();
  at::NoGradGuard no_grad;
  weight.detach().mul_(torch::rand(weight.sizes()).ge(0.5).to(weight.dtype()));
  return original;
}

// Zeroes a seeded random half of the output channels (rows) of `layer`'s weight in place, and
// their bias elements too when `bias_too`. Returns the original weight and bias.
std::pair<at::Tensor, at::Tensor> prune_filters(const ModuleRecord& layer, int seed,
                                                bool bias_too) {
  torch::manual_seed(seed);
  const at::Tensor weight = layer.weight->detach();
  std::pair<at::Tensor, at::Tensor> original = {weight.clone(), at::Tensor()};
  std::vector<int64_t> shape(static_cast<size_t>(weight.dim()), 1);
  shape[0] = weight.size(0);
  const at::Tensor keep = torch::rand({weight.size(0)}).ge(0.5).to(weight.dtype());
  at::NoGradGuard no_grad;
  weight.mul_(keep.view(shape));
  if (layer.bias) {
    original.second = layer.bias->detach().clone();
    if (bias_too) {
      layer.bias->detach().mul_(keep);
    }
  }
  return original;
}

void expect_same(const EvalResult& cached, const EvalResult& whole, const std::string& where) {
  EXPECT_EQ(cached.samples, whole.samples) << where;
  EXPECT_EQ(cached.accuracy, whole.accuracy) << where;
  EXPECT_EQ(cached.loss, whole.loss) << where;  // bit for bit, not approximately
}

// For every weighted layer: two different prunings in a row, each evaluated both ways, then
// the weights put back. Returns the layers that were evaluated from kept values.
std::vector<std::string> check_every_layer(Model& model, const Dataset& data) {
  LayerCachedEvaluation evaluation(model, data, /*batch_size=*/32);
  std::vector<std::string> cached;
  expect_same(evaluation.evaluate(""), evaluate(model, data, 32), "the model as it came");
  for (const ModuleRecord& m : model.modules()) {
    if (!m.weight.has_value()) {
      continue;
    }
    for (int seed = 1; seed <= 2; ++seed) {
      const at::Tensor original = prune_half(*m.weight, seed);
      const EvalResult fast = evaluation.evaluate(m.name);
      if (evaluation.last_mode() == "cached before the layer" && seed == 2) {
        cached.push_back(m.name);
      }
      expect_same(fast, evaluate(model, data, 32), m.name + " pruned with seed " +
                                                       std::to_string(seed) + " (" +
                                                       evaluation.last_mode() + ")");
      m.weight->detach().copy_(original);
    }
  }
  return cached;
}

TEST(LayerCachedEvaluationTest, EqualsTheWholeForwardOnTheLeNetAndKeepsWhatPrecedesEachLayer) {
  auto model = load_torchscript_model(test::lenet_model());
  const Dataset data = random_data({1, 28, 28}, 70, 10);  // batches of 32, 32 and 6
  const std::vector<std::string> cached = check_every_layer(*model, data);
  // conv1 reads the image alone: nothing to keep before it, for a change that is not whole
  // channels.
  EXPECT_EQ(cached, (std::vector<std::string>{"conv2", "fc1", "fc2", "fc3"}));
  LayerCachedEvaluation evaluation(*model, data, 32);
  const ModuleRecord& conv1 = model->modules().front();
  ASSERT_EQ(conv1.name, "conv1");
  const at::Tensor original = prune_half(*conv1.weight, 1);
  evaluation.evaluate("conv1");
  EXPECT_THAT(evaluation.last_mode(), HasSubstr("reads only the forward's inputs"));
  conv1.weight->detach().copy_(original);
}

// For every convolution and linear layer: filter-style prunings (bias zeroed, then kept), each
// evaluated both ways. Returns the layers evaluated from their kept output.
std::vector<std::string> check_filter_pruning(Model& model, const Dataset& data) {
  LayerCachedEvaluation evaluation(model, data, /*batch_size=*/32);
  std::vector<std::string> after;
  for (const ModuleRecord& m : model.modules()) {
    if (m.op_type != "Conv2d" && m.op_type != "Linear") {
      continue;
    }
    bool every_run_after = true;
    for (int seed = 1; seed <= 2; ++seed) {
      const auto [weight, bias] = prune_filters(m, seed, /*bias_too=*/seed == 1);
      const EvalResult fast = evaluation.evaluate(m.name);
      every_run_after = every_run_after && evaluation.last_mode() == "cached after the layer";
      expect_same(fast, evaluate(model, data, 32),
                  m.name + " filters pruned with seed " + std::to_string(seed) + " (" +
                      evaluation.last_mode() + ")");
      m.weight->detach().copy_(weight);
      if (bias.defined()) {
        m.bias->detach().copy_(bias);
      }
    }
    if (every_run_after) {
      after.push_back(m.name);
    }
  }
  return after;
}

TEST(LayerCachedEvaluationTest, FilterPruningOverwritesTheLayersKeptOutputTheFirstLayerIncluded) {
  auto model = load_torchscript_model(test::lenet_model());
  const Dataset data = random_data({1, 28, 28}, 70, 10);
  EXPECT_EQ(check_filter_pruning(*model, data),
            (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2", "fc3"}));
  for (const auto& [name, side] : std::vector<std::pair<std::string, int64_t>>{
           {"resblock", 16}, {"vgg_bn", 32}, {"mobilenet_tiny", 32}}) {
    SCOPED_TRACE(name);
    torch::jit::Module module = test::load_conformance_model(name);
    auto conformance = make_torchscript_model(module);
    const int64_t classes = conformance->forward(torch::zeros({1, 3, side, side})).size(1);
    const Dataset images = random_data({3, side, side}, 40, classes);
    size_t layers = 0;
    for (const ModuleRecord& m : conformance->modules()) {
      layers += m.op_type == "Conv2d" || m.op_type == "Linear" ? 1 : 0;
    }
    EXPECT_EQ(check_filter_pruning(*conformance, images).size(), layers);
  }
  // Unstructured changes of the same layer in between go back to a cut before it.
  LayerCachedEvaluation evaluation(*model, data, 32);
  const auto& modules = model->modules();
  const ModuleRecord& conv2 = *std::find_if(
      modules.begin(), modules.end(), [](const ModuleRecord& m) { return m.name == "conv2"; });
  const at::Tensor original = prune_half(*conv2.weight, 4);
  expect_same(evaluation.evaluate("conv2"), evaluate(*model, data, 32), "unstructured");
  EXPECT_EQ(evaluation.last_mode(), "cached before the layer");
  conv2.weight->detach().copy_(original);
}

TEST(LayerCachedEvaluationTest, EqualsTheWholeForwardOnResidualBatchNormAndDepthwiseModels) {
  for (const auto& [name, side] : std::vector<std::pair<std::string, int64_t>>{
           {"resblock", 16}, {"vgg_bn", 32}, {"mobilenet_tiny", 32}}) {
    SCOPED_TRACE(name);
    torch::jit::Module module = test::load_conformance_model(name);
    auto model = make_torchscript_model(module);
    const int64_t classes =
        model->forward(torch::zeros({1, 3, side, side})).size(1);
    const Dataset data = random_data({3, side, side}, 40, classes);
    const std::vector<std::string> cached = check_every_layer(*model, data);
    // Every weighted layer after the first convolution is cut (BatchNorms included: their
    // weight is a parameter like any other).
    size_t weighted = 0;
    for (const ModuleRecord& m : model->modules()) {
      weighted += m.weight.has_value() ? 1 : 0;
    }
    EXPECT_EQ(cached.size(), weighted - 1);
  }
}

// y = relu(a(x)); z = b(y); y += z; return c(y): analysing b, the suffix adds into y, which the
// prefix computed. Kept as it is, the second run would add into the first run's sum.
torch::jit::Module in_place_model() {
  const auto layer = [](const char* name, int64_t out, int64_t in) {
    torch::jit::Module m(name);
    m.register_parameter("weight", torch::randn({out, in}), false);
    m.define("def forward(self, x):\n  return torch.matmul(x, self.weight.t())\n");
    return m;
  };
  torch::manual_seed(3);
  torch::jit::Module root("InPlace");
  root.register_module("a", layer("A", 8, 6));
  root.register_module("b", layer("B", 8, 8));
  root.register_module("c", layer("C", 4, 8));
  root.define(
      "def forward(self, x):\n"
      "  y = torch.relu_(self.a.forward(x))\n"
      "  z = self.b.forward(y)\n"
      "  y.add_(z)\n"
      "  return self.c.forward(y)\n");
  return root;
}

TEST(LayerCachedEvaluationTest, ASuffixWritingInPlaceIntoAKeptValueGetsACopyEachRun) {
  torch::jit::Module module = in_place_model();
  std::string why_not;
  const std::optional<ForwardCutGraphs> graphs = cut_forward_graph(module, "b", &why_not);
  ASSERT_TRUE(graphs.has_value()) << why_not;
  EXPECT_EQ(graphs->written, (std::vector<bool>{true})) << *graphs->suffix;

  auto model = make_torchscript_model(module);
  const Dataset data = random_data({6}, 50, 4);
  EXPECT_EQ(check_every_layer(*model, data), (std::vector<std::string>{"b", "c"}));
  // The same run three times: what is kept is not consumed.
  LayerCachedEvaluation evaluation(*model, data, 32);
  const EvalResult first = evaluation.evaluate("b");
  for (int run = 0; run < 2; ++run) {
    expect_same(evaluation.evaluate("b"), first, "run " + std::to_string(run + 2));
  }
}

TEST(LayerCachedEvaluationTest, ModelsAndLayersThatCannotBeCutAreEvaluatedWhole) {
  // A forward that assigns an attribute cannot be cut (the assignment is state).
  torch::jit::Module counting("Counting");
  counting.register_attribute("calls", c10::IntType::get(), int64_t{0});
  torch::jit::Module inner("Inner");
  inner.register_parameter("weight", torch::randn({3, 5}), false);
  inner.define("def forward(self, x):\n  return torch.matmul(x, self.weight.t())\n");
  counting.register_module("fc", inner);
  counting.define(
      "def forward(self, x):\n"
      "  self.calls = self.calls + 1\n"
      "  return self.fc.forward(torch.relu(x))\n");
  std::string why_not;
  EXPECT_FALSE(cut_forward_graph(counting, "fc", &why_not).has_value());
  EXPECT_THAT(why_not, HasSubstr("assigns module attribute 'calls'"));
  EXPECT_FALSE(cut_forward_graph(in_place_model(), "nothing", &why_not).has_value());
  EXPECT_THAT(why_not, HasSubstr("never reads module 'nothing'"));
  // After a layer: only one convolution or linear op taking the weight and bias.
  EXPECT_FALSE(
      cut_forward_graph(in_place_model(), "b", &why_not, CutAt::kLayerOutput).has_value());
  EXPECT_THAT(why_not, HasSubstr("is read by 'aten::t', not one convolution or linear op"));
  // A layer whose weight something else reads too: more than one op.
  torch::jit::Module twice("Twice");
  torch::jit::Module conv("Conv");
  conv.register_parameter("weight", torch::randn({4, 1, 3, 3}), false);
  conv.register_parameter("bias", torch::randn({4}), false);
  conv.define("def forward(self, x):\n  return torch.conv2d(x, self.weight, self.bias)\n");
  twice.register_module("conv", conv);
  twice.define(
      "def forward(self, x):\n"
      "  return self.conv.forward(x) + self.conv.weight.sum()\n");
  EXPECT_FALSE(cut_forward_graph(twice, "conv", &why_not, CutAt::kLayerOutput).has_value());
  EXPECT_THAT(why_not, HasSubstr("module 'conv' is read by more than one op"));

  // A C++-frontend model has no graph.
  torch::nn::Sequential net(torch::nn::Linear(5, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3));
  auto nn_model = make_nn_model(net.ptr());
  const Dataset data = random_data({5}, 40, 3);
  LayerCachedEvaluation nn_evaluation(*nn_model, data, 16);
  expect_same(nn_evaluation.evaluate("2"), evaluate(*nn_model, data, 16), "nn model");
  EXPECT_THAT(nn_evaluation.last_mode(), HasSubstr("expose no graph"));

  // Only a weighted module of the model can be named.
  LayerCachedEvaluation named(*nn_model, data, 16);
  EXPECT_THAT([&] { (void)named.evaluate("nothing"); },
              ThrowsMessage<sdk::Error>(HasSubstr("the model has no weighted module 'nothing'")));

  // Kept values past the bound: the whole forward, with the reason.
  auto lenet = load_torchscript_model(test::lenet_model());
  const Dataset images = random_data({1, 28, 28}, 40, 10);
  LayerCachedEvaluation bounded(*lenet, images, 16, /*cache_bytes=*/1024);
  expect_same(bounded.evaluate("fc1"), evaluate(*lenet, images, 16), "bounded");
  EXPECT_THAT(bounded.last_mode(), HasSubstr("passes the 1024 bytes kept at most"));
}

}  // namespace
}  // namespace lithe::host
