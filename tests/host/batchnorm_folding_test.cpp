// BatchNorm folding on the conformance models with BatchNorm (a ResNet block net with a
// Sequential shortcut, a VGG, a MobileNet with depthwise convolutions): every conv → BatchNorm
// pair is folded, the forward calls no BatchNorm any more, and the model computes the same.
#include "lithe/host/model/batchnorm_folding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <sstream>
#include <string>
#include <vector>

#include "lithe/host/graph/graph_trace.h"
#include "support/conformance_models.h"

namespace lithe::host {
namespace {

// Statistics and affine parameters far from the identity, so a fold that is wrong shows.
void randomize_batchnorms(torch::jit::Module& model) {
  torch::manual_seed(3);
  for (const torch::jit::NameModule& item : model.named_modules()) {
    if (!item.value.hasattr("running_var")) {
      continue;
    }
    torch::NoGradGuard no_grad;
    const int64_t n = item.value.attr("running_var").toTensor().numel();
    item.value.attr("running_mean").toTensor().copy_(torch::randn({n}));
    item.value.attr("running_var").toTensor().copy_(torch::rand({n}) * 2 + 0.1);
    item.value.attr("weight").toTensor().copy_(torch::randn({n}));
    item.value.attr("bias").toTensor().copy_(torch::randn({n}));
  }
}

int batch_norm_ops(const torch::jit::Block* block) {
  int n = 0;
  for (const torch::jit::Node* node : block->nodes()) {
    n += node->kind() == c10::aten::batch_norm ? 1 : 0;
    for (const torch::jit::Block* inner : node->blocks()) {
      n += batch_norm_ops(inner);
    }
  }
  return n;
}
int batch_norm_ops(const torch::jit::Module& model) {
  return batch_norm_ops(graph_trace::inline_forward(model)->block());
}

TEST(BatchNormFoldingTest, EveryConvBatchNormPairFoldsAndTheModelComputesTheSame) {
  const std::vector<std::pair<std::string, size_t>> models = {
      {"resblock", 6}, {"vgg_bn", 3}, {"mobilenet_tiny", 5}};
  for (const auto& [name, pairs] : models) {
    torch::jit::Module model = test::load_conformance_model(name);
    randomize_batchnorms(model);
    const int64_t side = name == "resblock" ? 16 : 32;
    const at::Tensor x = torch::randn({4, 3, side, side});
    torch::NoGradGuard no_grad;
    const at::Tensor before = model.forward({x}).toTensor();
    ASSERT_GT(batch_norm_ops(model), 0) << name;

    const BatchNormFolding folding = fold_batchnorms(model);
    EXPECT_EQ(folding.folded.size(), pairs) << name;
    EXPECT_TRUE(folding.kept.empty()) << name << ": " << folding.kept.front().reason;
    EXPECT_EQ(batch_norm_ops(model), 0) << name << ": no BatchNorm is called any more";
    const at::Tensor after = model.forward({x}).toTensor();
    const double scale = before.abs().max().item<double>();
    EXPECT_LE((after - before).abs().max().item<double>(), 1e-5 * scale) << name;

    // Saved and loaded, the folded model is the same model.
    std::stringstream file;
    model.save(file);
    torch::jit::Module back = torch::jit::load(file);
    EXPECT_TRUE(torch::equal(back.forward({x}).toTensor(), after)) << name;
  }
}

TEST(BatchNormFoldingTest, NamesEachPairAndGivesConvolutionsWithoutBiasOne) {
  torch::jit::Module model = test::load_conformance_model("resblock");
  const BatchNormFolding folding = fold_batchnorms(model);
  std::vector<std::string> pairs;
  for (const FoldedBatchNorm& f : folding.folded) {
    pairs.push_back(f.convolution + "+" + f.batchnorm);
  }
  EXPECT_THAT(pairs, ::testing::UnorderedElementsAre(
                         "conv1+bn1", "layer1.conv1+layer1.bn1", "layer1.conv2+layer1.bn2",
                         "layer2.conv1+layer2.bn1", "layer2.conv2+layer2.bn2",
                         "layer2.shortcut.0+layer2.shortcut.1"));
  for (const FoldedBatchNorm& f : folding.folded) {
    torch::jit::Module conv = model;
    std::stringstream path(f.convolution);
    for (std::string atom; std::getline(path, atom, '.');) {
      conv = conv.attr(atom).toModule();
    }
    EXPECT_TRUE(conv.attr("bias").isTensor()) << f.convolution;
  }
  // Folding again finds nothing: the calls are gone.
  EXPECT_TRUE(fold_batchnorms(model).folded.empty());
}

}  // namespace
}  // namespace lithe::host
