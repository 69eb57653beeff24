// parse_device (what --device accepts) and Model::to (how a model moves): the spellings, the
// refusal of devices this machine lacks, and the in-place move that keeps live tensors valid
// (checked on a GPU machine; here, that a failed move moves nothing).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "lithe/host/io/device.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;

sdk::Error parse_error(const std::string& text) {
  try {
    parse_device(text, "--device");
  } catch (const sdk::Error& e) {
    return e;
  }
  ADD_FAILURE() << "'" << text << "' was accepted";
  return sdk::Error(sdk::Errc::kInternal, "accepted");
}

TEST(DeviceTest, ParseAcceptsTheCpuAndRefusesEverySpellingButCudaN) {
  EXPECT_EQ(parse_device("cpu"), c10::Device(c10::kCPU));
  // c10's parser takes "cuda:+1", "cuda: 1" and others; a typo must not become a device.
  for (const char* text : {"", "gpu", "CPU", "CUDA", "cuda:", "cuda:-1", "cuda:+1", "cuda: 1",
                           "cuda:1x", "cuda:1000", "cuda0", "cpu:0", " cuda", "cuda ", "mps",
                           "meta", "cuda:0:0"}) {
    const sdk::Error e = parse_error(text);
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidConfig) << text;
    EXPECT_THAT(e.what(), HasSubstr("--device must be cpu, cuda or cuda:N (N a device index), "
                                    "got '" + std::string(text) + "'"));
  }
}

TEST(DeviceTest, ParseRefusesCudaDevicesLibtorchDoesNotSee) {
  if (at::hasCUDA()) {
    EXPECT_EQ(parse_device("cuda"), c10::Device(c10::kCUDA, 0));
    EXPECT_EQ(parse_device("cuda:0"), c10::Device(c10::kCUDA, 0));
    const sdk::Error e = parse_error("cuda:999");
    EXPECT_EQ(e.code(), sdk::Errc::kUnsupported);
    EXPECT_THAT(e.what(), HasSubstr("--device cuda:999: libtorch sees "));
    return;
  }
  for (const char* text : {"cuda", "cuda:0", "cuda:7"}) {
    const sdk::Error e = parse_error(text);
    EXPECT_EQ(e.code(), sdk::Errc::kUnsupported) << text;
    EXPECT_THAT(e.what(), HasSubstr("--device " + std::string(text) +
                                    ": libtorch sees no CUDA device here"));
    EXPECT_THAT(e.what(), HasSubstr("use --device cpu"));
  }
}

TEST(DeviceTest, MovingAModelToTheDeviceItIsOnChangesNothing) {
  const std::unique_ptr<Model> model = load_torchscript_model(test::lenet_model());
  EXPECT_EQ(model->device(), c10::Device(c10::kCPU));
  const at::Tensor weight = *model->modules().front().weight;
  const at::Tensor before = model->forward(at::ones({2, 1, 28, 28}));
  model->to(c10::Device(c10::kCPU));
  EXPECT_EQ(model->modules().front().weight->unsafeGetTensorImpl(),
            weight.unsafeGetTensorImpl());
  EXPECT_TRUE(model->forward(at::ones({2, 1, 28, 28})).equal(before));
}

// libtorch moves a tensor in place only between dense backends (CPU, CUDA, ...); the meta
// device is not one. The refusal comes at the first tensor, so nothing has moved.
TEST(DeviceTest, ADeviceATensorCannotMoveToInPlaceIsAnErrorThatMovesNothing) {
  torch::nn::Sequential net(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2));
  const std::vector<std::unique_ptr<Model>> models = [&] {
    std::vector<std::unique_ptr<Model>> out;
    out.push_back(load_torchscript_model(test::lenet_model()));
    out.push_back(make_nn_model(net.ptr()));
    return out;
  }();
  for (const std::unique_ptr<Model>& model : models) {
    try {
      model->to(c10::Device(c10::kMeta));
      ADD_FAILURE() << model->kind() << " model moved to meta";
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), sdk::Errc::kUnsupported);
      EXPECT_THAT(e.what(), HasSubstr("cannot move the model to meta"));
    }
    for (const at::Tensor& t : model->state_tensors()) {
      EXPECT_TRUE(t.is_cpu()) << model->kind();
    }
  }
}

// On a GPU machine (skipped elsewhere, like every CudaPipelineTest): the move is in place, so
// tensors handed out before it (records, parameters) follow, and forward() (the TorchScript
// working clone) computes on the moved tensors.
TEST(CudaPipelineTest, ModelsMoveToCudaInPlace) {
  if (!at::hasCUDA()) {
    GTEST_SKIP() << "libtorch sees no CUDA device (a CPU-only libtorch, or no GPU here)";
  }
  const c10::Device cuda(c10::kCUDA, 0);
  const std::unique_ptr<Model> model = load_torchscript_model(test::lenet_model());
  const at::Tensor weight = *model->modules().front().weight;
  const at::Tensor input = at::randn({2, 1, 28, 28});
  const at::Tensor expected = model->forward(input);
  model->to(cuda);
  EXPECT_EQ(model->device(), cuda);
  EXPECT_TRUE(weight.is_cuda()) << "a tensor handed out before the move must follow it";
  for (const at::Tensor& t : model->state_tensors()) {
    EXPECT_TRUE(t.is_cuda());
  }
  const at::Tensor output = model->forward(input.to(cuda));
  EXPECT_TRUE(output.is_cuda());
  EXPECT_TRUE(output.cpu().allclose(expected, 1e-4, 1e-5));
  model->to(c10::Device(c10::kCPU));
  EXPECT_TRUE(weight.is_cpu());

  torch::nn::Sequential net(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2));
  const std::unique_ptr<Model> nn = make_nn_model(net.ptr());
  const at::Tensor first = *nn->modules().front().weight;
  nn->to(cuda);
  EXPECT_EQ(nn->device(), cuda);
  EXPECT_TRUE(first.is_cuda());
  EXPECT_TRUE(nn->forward(at::ones({5, 4}, at::device(cuda))).is_cuda());
}

}  // namespace
}  // namespace lithe::host
