// TorchScriptModel::forward hands trainers, calibration and evaluation the model's main output,
// whatever container the TorchScript forward returns it in.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <string>

#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::unique_ptr<Model> model_returning(const std::string& body) {
  torch::jit::Module module("OutputProbe");
  module.define("def forward(self, x):\n    y = x * 2.0\n    return " + body + "\n");
  return make_torchscript_model(module);
}

TEST(TorchScriptModelTest, ForwardReturnsTheMainOutputOfTuplesListsAndSegmentationDicts) {
  const at::Tensor x = torch::arange(6, torch::kFloat).reshape({2, 3});
  const at::Tensor doubled = x * 2.0;
  // A tensor; GoogLeNet/Inception's (logits, aux2, aux1) with the auxiliary heads off; a list;
  // a torchvision segmentation model's {"out": ..., "aux": ...}.
  for (const char* body :
       {"y", "(y, None, None)", "(y, x)", "[y, x]", "{'aux': x, 'out': y}"}) {
    SCOPED_TRACE(body);
    EXPECT_TRUE(model_returning(body)->forward(x).equal(doubled));
  }
}

TEST(TorchScriptModelTest, ForwardRefusesAnOutputWithoutAMainTensorAndSaysWhatItGot) {
  const at::Tensor x = torch::ones({2, 3});
  for (const char* body : {"(None, y)", "{'logits': y}", "x.size(0)", "[x.size(0)]"}) {
    SCOPED_TRACE(body);
    const std::unique_ptr<Model> model = model_returning(body);
    EXPECT_THAT([&] { model->forward(x); },
                ThrowsMessage<sdk::Error>(HasSubstr(
                    "which is not a Tensor, a tuple or list whose first element is a Tensor, or "
                    "a dict with a Tensor under \"out\"")));
  }
  EXPECT_THAT([&] { model_returning("x.size(0)")->forward(x); },
              ThrowsMessage<sdk::Error>(HasSubstr("the model's forward returns Int,")));
}

}  // namespace
}  // namespace lithe::host
