// trainable_clone: a deep copy of a TorchScript model that an optimizer accepts (Module::clone()
// gives non-leaf parameters), trains without touching the original, and keeps which parameters
// require grad.
#include "lithe/host/model/trainable_clone.h"

#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <memory>

#include "lithe/host/model/model.h"
#include "lithe/host/train/trainer.h"
#include "support/fashion_data.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

TEST(TrainableCloneTest, TheCopyTrainsAndTheOriginalStaysAsItWas) {
  if (!test::fashion_installed()) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  torch::jit::Module original = load_torchscript_module(test::lenet_model());
  original.attr("fc3").toModule().attr("bias").toTensor().requires_grad_(false);
  const at::Tensor before = original.attr("conv1").toModule().attr("weight").toTensor().clone();

  // What this replaces: Module::clone() under grad mode.
  bool plain_clone_leaves = true;
  for (const auto& p : original.clone().named_parameters()) {
    plain_clone_leaves = plain_clone_leaves && p.value.is_leaf();
  }
  EXPECT_FALSE(plain_clone_leaves);

  torch::jit::Module copy = trainable_clone(original);
  for (const auto& p : copy.named_parameters()) {
    EXPECT_TRUE(p.value.is_leaf()) << p.name;
    EXPECT_EQ(p.value.requires_grad(), p.name != "fc3.bias") << p.name;
  }
  const std::unique_ptr<Model> model = make_torchscript_model(copy);
  TrainOptions options;
  options.epochs = 1;
  options.batch_size = 50;
  options.progress = false;
  (void)train(*model, test::fashion("train", 100), nullptr, options);
  const at::Tensor trained = copy.attr("conv1").toModule().attr("weight").toTensor();
  EXPECT_FALSE(at::equal(trained, before));
  EXPECT_TRUE(at::equal(original.attr("conv1").toModule().attr("weight").toTensor(), before));
}

}  // namespace
}  // namespace lithe::host
