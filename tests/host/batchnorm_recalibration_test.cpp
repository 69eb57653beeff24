// BatchNorm re-estimation (recalibrate_batchnorm): the new running statistics are the average
// of the batches' own statistics, computed here by hand from the layer's input; the layer's
// momentum does not change them; dropout stays off; the same data gives the same bytes; bad
// requests fail before any change, and a layer called twice per forward is refused with every
// layer left as it was. Also through run_compression: pruning then re-estimation.
#include "lithe/host/train/batchnorm_recalibration.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>

#include "lithe/host/model/model.h"
#include "lithe/host/jobs/compression_job.h"
#include "lithe/sdk/error.h"
#include "support/conformance_models.h"
#include "support/paths.h"
#include "support/registry.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

Dataset random_data(std::vector<int64_t> shape, int64_t classes, uint64_t seed) {
  Dataset data;
  const auto generator = at::detail::createCPUGenerator(seed);
  data.images = at::randn(shape, generator) * 2 + 0.5;
  data.labels = at::randint(classes, {shape[0]}, generator);
  data.source = "<random>";
  return data;
}

// What PyTorch's cumulative average (momentum None) gives for a BatchNorm layer whose input
// on batch b is inputs[b]: the mean of the batches' means and unbiased variances.
std::pair<at::Tensor, at::Tensor> expected_statistics(const std::vector<at::Tensor>& inputs) {
  at::Tensor mean = at::zeros({inputs[0].size(1)}, at::kDouble);
  at::Tensor var = at::zeros({inputs[0].size(1)}, at::kDouble);
  for (const at::Tensor& x : inputs) {
    const at::Tensor per_channel = x.transpose(0, 1).reshape({x.size(1), -1}).to(at::kDouble);
    mean += per_channel.mean(1);
    var += per_channel.var(1, /*unbiased=*/true);
  }
  return {mean / static_cast<double>(inputs.size()), var / static_cast<double>(inputs.size())};
}

std::map<std::string, at::Tensor> buffers_of(const Model& model, const std::string& layer) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : model.module_buffers(layer)) {
    out[name] = tensor.clone();
  }
  return out;
}

TEST(BatchNormRecalibrationTest, StatisticsAreTheAverageOfTheBatchesOwnOnAScriptedModel) {
  torch::jit::Module module = test::load_conformance_model("vgg_bn");
  module.eval();
  const std::unique_ptr<Model> model = make_torchscript_model(module);
  const Dataset data = random_data({40, 3, 32, 32}, 10, 7);
  const std::map<std::string, at::Tensor> weights_before = [&] {
    std::map<std::string, at::Tensor> out;
    for (const auto& item : module.named_parameters()) {
      out[item.name] = item.value.clone();
    }
    return out;
  }();

  const BatchNormRecalibration result = recalibrate_batchnorm(*model, data, 3, 16);
  EXPECT_EQ(result.layers, (std::vector<std::string>{"bn1", "bn2", "bn3"}));
  EXPECT_TRUE(result.not_reached.empty());
  EXPECT_EQ(result.batches, 3);
  EXPECT_EQ(result.samples, 40);  // 16 + 16 + 8
  EXPECT_FALSE(model->is_training());

  // bn1 reads conv1's output: its statistics by hand, batch by batch.
  torch::NoGradGuard no_grad;
  torch::jit::Module conv1 = module.attr("conv1").toModule();
  std::vector<at::Tensor> inputs;
  for (int64_t start = 0; start < 40; start += 16) {
    inputs.push_back(
        conv1.forward({data.images.narrow(0, start, std::min<int64_t>(16, 40 - start))})
            .toTensor());
  }
  const auto [mean, var] = expected_statistics(inputs);
  const auto bn1 = buffers_of(*model, "bn1");
  EXPECT_TRUE(torch::allclose(bn1.at("running_mean").to(at::kDouble), mean, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(bn1.at("running_var").to(at::kDouble), var, 1e-5, 1e-6));
  for (const std::string& layer : result.layers) {
    EXPECT_EQ(buffers_of(*model, layer).at("num_batches_tracked").item<int64_t>(), 3) << layer;
  }
  // Weights are untouched.
  for (const auto& item : module.named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value, weights_before.at(item.name))) << item.name;
  }

  // Again from other statistics: the same bytes (nothing of the old statistics remains).
  auto stats = buffers_of(*model, "bn2");
  model->module_buffers("bn2")[0].second.fill_(42);
  recalibrate_batchnorm(*model, data, 3, 16);
  EXPECT_TRUE(torch::equal(buffers_of(*model, "bn2").at("running_mean"), stats.at("running_mean")));
  EXPECT_TRUE(torch::equal(buffers_of(*model, "bn2").at("running_var"), stats.at("running_var")));
}

// A C++-frontend net: Conv2d, BatchNorm2d (momentum given), Dropout, ReLU, pooling, Linear.
struct SmallNet {
  torch::nn::Sequential net;
  explicit SmallNet(c10::optional<double> momentum) {
    torch::manual_seed(11);
    net = torch::nn::Sequential(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
        torch::nn::BatchNorm2d(torch::nn::BatchNormOptions(4).momentum(momentum)),
        torch::nn::Dropout(0.5), torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1),
        torch::nn::Flatten(), torch::nn::Linear(4, 3));
  }
};

TEST(BatchNormRecalibrationTest, TheLayersMomentumDoesNotChangeTheResultAndDropoutStaysOff) {
  const Dataset data = random_data({24, 1, 8, 8}, 3, 5);
  std::map<std::string, at::Tensor> results;
  for (const auto& [label, momentum] :
       std::vector<std::pair<std::string, c10::optional<double>>>{
           {"0.1", 0.1}, {"0.3", 0.3}, {"1", 1.0}, {"None", c10::nullopt}}) {
    SmallNet small(momentum);
    const std::unique_ptr<Model> model = make_nn_model(small.net.ptr());
    model->train(false);
    const BatchNormRecalibration result = recalibrate_batchnorm(*model, data, 4, 6);
    ASSERT_EQ(result.layers, std::vector<std::string>{"1"}) << label;
    const auto bn = buffers_of(*model, "1");
    results[label] = at::cat({bn.at("running_mean"), bn.at("running_var")});
    EXPECT_FALSE(small.net->is_training()) << label;
    EXPECT_FALSE(small.net[2]->is_training()) << label << ": dropout back in evaluation mode";

    // By hand from conv's output; dropout comes after the BatchNorm here, but an active
    // dropout before it would change these statistics, and it is off throughout.
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> inputs;
    for (int64_t start = 0; start < 24; start += 6) {
      inputs.push_back(small.net[0]->as<torch::nn::Conv2d>()->forward(data.images.narrow(0, start, 6)));
    }
    const auto [mean, var] = expected_statistics(inputs);
    EXPECT_TRUE(torch::allclose(bn.at("running_mean").to(at::kDouble), mean, 1e-5, 1e-6)) << label;
    EXPECT_TRUE(torch::allclose(bn.at("running_var").to(at::kDouble), var, 1e-5, 1e-6)) << label;
  }
  for (const char* label : {"0.1", "0.3", "1"}) {
    EXPECT_TRUE(torch::allclose(results.at(label), results.at("None"), 1e-6, 1e-7)) << label;
  }
}

TEST(BatchNormRecalibrationTest, BadRequestsFailBeforeAnyChange) {
  const Dataset data = random_data({10, 3, 32, 32}, 10, 3);
  torch::jit::Module module = test::load_conformance_model("vgg_bn");
  const std::unique_ptr<Model> model = make_torchscript_model(module);
  const auto before = buffers_of(*model, "bn1");
  EXPECT_THAT([&] { recalibrate_batchnorm(*model, data, 4, 4); },
              ThrowsMessage<sdk::Error>(
                  HasSubstr("4 BatchNorm re-estimation batches asked for, but dataset "
                            "'<random>' holds only 3 batches of 4 samples")));
  EXPECT_THAT([&] { recalibrate_batchnorm(*model, data, 0, 4); },
              ThrowsMessage<sdk::Error>(HasSubstr("batches must be > 0, got 0")));
  const Dataset wrong = random_data({10, 1, 28, 28}, 10, 3);
  EXPECT_THROW(recalibrate_batchnorm(*model, wrong, 1, 4), sdk::Error);
  EXPECT_TRUE(torch::equal(buffers_of(*model, "bn1").at("running_mean"), before.at("running_mean")));

  // No BatchNorm at all: an error, not a silent no-op.
  const std::unique_ptr<Model> lenet = load_torchscript_model(test::lenet_model());
  EXPECT_THAT([&] { recalibrate_batchnorm(*lenet, random_data({8, 1, 28, 28}, 10, 1), 1, 8); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "the model has no BatchNorm1d/2d/3d layer with running statistics")));
}

TEST(BatchNormRecalibrationTest, ALayerCalledTwicePerForwardIsRefusedAndNothingChanges) {
  torch::manual_seed(2);
  auto net = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 2, 1)),
                                   torch::nn::BatchNorm2d(2), torch::nn::Flatten(),
                                   torch::nn::Linear(2 * 4 * 4, 3));
  auto conv = net[0]->as<torch::nn::Conv2d>();
  auto bn = net[1]->as<torch::nn::BatchNorm2d>();
  auto fc = net[3]->as<torch::nn::Linear>();
  const std::unique_ptr<Model> model = make_nn_model(net.ptr(), [=](const at::Tensor& x) {
    return fc->forward(bn->forward(bn->forward(conv->forward(x))).flatten(1));
  });
  model->train(false);
  const auto before = buffers_of(*model, "1");
  EXPECT_THAT([&] { recalibrate_batchnorm(*model, random_data({8, 2, 4, 4}, 3, 4), 2, 4); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "BatchNorm layer '1' runs 2 times in one forward; its statistics per call "
                  "cannot be separated")));
  for (const auto& [name, tensor] : before) {
    EXPECT_TRUE(torch::equal(buffers_of(*model, "1").at(name), tensor)) << name;
  }
  EXPECT_FALSE(net->is_training());
}

TEST(BatchNormRecalibrationTest, CompressionJobPrunesThenReestimatesBeforeWriting) {
  const fs::path dir = test::scratch_dir("batchnorm_recalibration_job");
  save_tensor_file(random_data({32, 3, 32, 32}, 10, 9), dir / "data.pt");
  CompressionRequest request;
  request.model = ModelSource::file(test::conformance_model_file("vgg_bn"));
  request.config = parse_compression_config(
      R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]})",
      "<test>");
  request.output = Output::to_file(dir / "pruned.pt");
  request.data_path = dir / "data.pt";
  request.recalibrate_bn_batches = 2;
  request.train_options.batch_size = 16;
  ASSERT_TRUE(request.needs_data());
  const CompressionResult result = run_compression(request, test::level_registry());
  ASSERT_TRUE(result.batchnorm_recalibration.has_value());
  EXPECT_EQ(result.batchnorm_recalibration->layers.size(), 3u);
  EXPECT_FALSE(result.after_recalibration.has_value()) << "a tensor file has no test split";

  // The written model holds the statistics of the pruned conv1's output, not the original's.
  torch::jit::Module pruned = torch::jit::load((dir / "pruned.pt").string());
  torch::jit::Module original = test::load_conformance_model("vgg_bn");
  const Dataset data = load_tensor_file(dir / "data.pt");
  torch::NoGradGuard no_grad;
  torch::jit::Module conv1 = pruned.attr("conv1").toModule();
  const auto [mean, var] = expected_statistics(
      {conv1.forward({data.images.narrow(0, 0, 16)}).toTensor(),
       conv1.forward({data.images.narrow(0, 16, 16)}).toTensor()});
  const at::Tensor written = pruned.attr("bn1").toModule().attr("running_mean").toTensor();
  EXPECT_TRUE(torch::allclose(written.to(at::kDouble), mean, 1e-5, 1e-6));
  EXPECT_FALSE(torch::equal(written,
                            original.attr("bn1").toModule().attr("running_mean").toTensor()));
  EXPECT_EQ(pruned.attr("bn3").toModule().attr("num_batches_tracked").toTensor().item<int64_t>(),
            2);

  // A negative count is refused before any work, naming the field.
  request.recalibrate_bn_batches = -1;
  EXPECT_THAT([&] { run_compression(request, test::level_registry()); },
              ThrowsMessage<sdk::Error>(HasSubstr("`recalibrate_bn_batches` must be >= 0")));
}

}  // namespace
}  // namespace lithe::host
