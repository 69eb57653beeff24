#include "plugins/slim/slim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/fake_context.h"
#include "support/plugin_test.h"
#include "support/paths.h"

namespace lithe::plugins::slim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

host::PluginRegistry& slim_registry() {
  static host::PluginRegistry* registry = [] {
    auto* r = new host::PluginRegistry();
    register_algorithms(*r);
    return r;
  }();
  return *registry;
}

host::CompressionConfig slim_config(const std::string& config_list) {
  return {"slim", config_list, "{}", "<test>"};
}

sdk::Options entry(const nlohmann::ordered_json& json, int index = 0) {
  return test::config_entry(json, index);
}
using test::error_code;


// Sequential of BatchNorm2d layers (named "0", "1", ...) with the given γ values.
torch::nn::Sequential batchnorms(const std::vector<std::vector<float>>& gammas) {
  torch::nn::Sequential seq;
  at::NoGradGuard no_grad;
  for (const auto& gamma : gammas) {
    torch::nn::BatchNorm2d bn(static_cast<int64_t>(gamma.size()));
    bn->weight.copy_(at::tensor(gamma));
    bn->bias.fill_(0.5);  // non-zero β, so that masking it is visible
    seq->push_back(bn);
  }
  return seq;
}

std::map<std::string, sdk::Masks> compress(host::Model& model, const std::string& config_list) {
  host::PruningSession session(model, slim_registry(), slim_config(config_list));
  session.compress();
  std::map<std::string, sdk::Masks> out;
  for (const auto& [name, masks] : session.masks()) {
    out[name] = masks;
  }
  return out;
}

at::Tensor mask(std::vector<float> values) { return at::tensor(values); }

constexpr const char* kHalf = R"([{"sparsity": 0.5, "op_types": ["BatchNorm2d"]}])";

TEST(SlimPrunerTest, NniExampleUsesOneGlobalThreshold) {
  // Reference §2.5: the four smallest |γ| of both layers (.05, .1, .2, .3) go, whatever layer
  // they are in.
  torch::nn::Sequential seq = batchnorms({{.1f, .5f, -.9f, .3f}, {.2f, .8f, .05f, -.6f}});
  auto model = host::make_nn_model(seq.ptr());
  const auto masks = compress(*model, kHalf);
  ASSERT_EQ(masks.size(), 2u);
  EXPECT_TRUE(masks.at("0").weight.equal(mask({0, 1, 1, 0})));
  EXPECT_TRUE(masks.at("1").weight.equal(mask({0, 1, 0, 1})));
  ASSERT_TRUE(masks.at("0").bias.has_value());
  ASSERT_TRUE(masks.at("1").bias.has_value());
  EXPECT_TRUE(masks.at("0").bias->equal(mask({0, 1, 1, 0}))) << "bias mask = weight mask";
  EXPECT_TRUE(masks.at("1").bias->equal(mask({0, 1, 0, 1})));
  // The host applied the masks to γ and β in place.
  const auto* bn1 = model->find_module("0");
  EXPECT_TRUE(bn1->weight->detach().equal(at::tensor({0.f, .5f, -.9f, 0.f})));
  EXPECT_TRUE(bn1->bias->detach().eq(0).equal(mask({1, 0, 0, 1}).to(at::kBool)));
}

TEST(SlimPrunerTest, AllEqualGammaPrunesExactlyKLowerGlobalIndicesFirst) {
  // Default BN init: every γ = 1. NNI prunes every channel (all tied with the threshold);
  // Lithe prunes exactly k = int(10 * 0.5) = 5: the first layer's 4, then channel 0 of the next.
  torch::nn::Sequential seq = batchnorms({{1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}});
  auto model = host::make_nn_model(seq.ptr());
  const auto masks = compress(*model, kHalf);
  EXPECT_TRUE(masks.at("0").weight.equal(mask({0, 0, 0, 0})));
  EXPECT_TRUE(masks.at("1").weight.equal(mask({0, 1, 1, 1, 1, 1})));
}

TEST(SlimPrunerTest, LayerSparsityOnlyGatesTheGlobalCut) {
  // int(4 * 0.2) == 0 channels per layer: the gate is closed although the global
  // k = int(8 * 0.2) = 1 would select the .05 channel.
  torch::nn::Sequential seq = batchnorms({{.1f, .5f, -.9f, .3f}, {.2f, .8f, .05f, -.6f}});
  auto model = host::make_nn_model(seq.ptr());
  const auto masks = compress(*model, R"([{"sparsity": 0.2, "op_types": ["BatchNorm2d"]}])");
  for (const auto& [name, m] : masks) {
    EXPECT_TRUE(m.weight.eq(1).all().item<bool>()) << name;
    EXPECT_TRUE(m.bias->eq(1).all().item<bool>()) << name;
  }
}

TEST(SlimPrunerTest, FirstEntrySparsitySetsTheGlobalCountLaterOnesOnlyGate) {
  torch::nn::Sequential seq = batchnorms({{.1f, .5f, -.9f, .3f}, {.2f, .8f, .05f, -.6f}});
  {
    // Entry 1 (s=0.25, one channel per layer) selects layer "1", yet it loses the two channels
    // of the global cut made with entry 0's s=0.5.
    auto model = host::make_nn_model(seq.ptr());
    const auto masks = compress(*model, R"([{"sparsity": 0.5, "op_types": ["BatchNorm2d"]},
        {"sparsity": 0.25, "op_types": ["BatchNorm2d"], "op_names": ["1"]}])");
    EXPECT_TRUE(masks.at("0").weight.equal(mask({0, 1, 1, 0})));
    EXPECT_TRUE(masks.at("1").weight.equal(mask({0, 1, 0, 1})));
  }
  {
    // Reversed: k = int(8 * 0.25) = 2 (.05 and .1), although layer "0" asks for 0.5.
    torch::nn::Sequential fresh = batchnorms({{.1f, .5f, -.9f, .3f}, {.2f, .8f, .05f, -.6f}});
    auto model = host::make_nn_model(fresh.ptr());
    const auto masks = compress(*model, R"([{"sparsity": 0.25, "op_types": ["BatchNorm2d"]},
        {"sparsity": 0.5, "op_types": ["BatchNorm2d"], "op_names": ["0"]}])");
    EXPECT_TRUE(masks.at("0").weight.equal(mask({0, 1, 1, 1})));
    EXPECT_TRUE(masks.at("1").weight.equal(mask({1, 1, 0, 1})));
  }
}

TEST(SlimPrunerTest, ExcludedLayersAreNeitherRankedNorPruned) {
  // Departure 2: exclude is honoured. Only layer "1" is ranked: k = int(4 * 0.5) = 2.
  torch::nn::Sequential seq = batchnorms({{.1f, .5f, -.9f, .3f}, {.2f, .8f, .05f, -.6f}});
  auto model = host::make_nn_model(seq.ptr());
  const auto masks = compress(*model, R"([{"sparsity": 0.5, "op_types": ["BatchNorm2d"]},
      {"exclude": true, "op_names": ["0"]}])");
  ASSERT_EQ(masks.size(), 1u);
  EXPECT_TRUE(masks.at("1").weight.equal(mask({0, 1, 0, 1})));
  EXPECT_TRUE(model->find_module("0")->weight->detach().equal(at::tensor({.1f, .5f, -.9f, .3f})));
}

using test::FakeContext;

sdk::Options half() { return entry({{"sparsity", 0.5}, {"op_types", {"BatchNorm2d"}}}); }

TEST(SlimPrunerTest, AlreadyPrunedChannelsCountAmongTheSmallestAndMasksAreOneShot) {
  auto pruner = slim_registry().make_pruner("slim", sdk::Options());
  pruner->validate_config(half());
  sdk::LayerView bn1(0, "bn1", "BatchNorm2d", at::tensor({9.f, 8.f, 1.f, 2.f}), at::zeros({4}),
                     half());
  sdk::LayerView bn2(1, "bn2", "BatchNorm2d", at::tensor({7.f, 6.f, 5.f, 4.f}), std::nullopt,
                     half());
  sdk::Masks previous;
  previous.weight = mask({0, 1, 1, 1});  // γ = 9 pruned earlier: its score is 0
  previous.bias = mask({0, 1, 1, 1});
  bn1.set_masks(previous);
  FakeContext context({&bn1, &bn2}, slim_registry());
  pruner->attach(context);
  // k = int(8 * 0.5) = 4: scores 0, 8, 1, 2 | 7, 6, 5, 4 -> the 0, 1, 2 and 4 go.
  const auto m1 = pruner->calc_mask(bn1);
  const auto m2 = pruner->calc_mask(bn2);
  ASSERT_TRUE(m1.has_value());
  ASSERT_TRUE(m2.has_value());
  EXPECT_TRUE(m1->weight.equal(mask({0, 1, 0, 0})));
  EXPECT_TRUE(m1->bias->equal(mask({0, 1, 0, 0})));
  EXPECT_TRUE(m2->weight.equal(mask({1, 1, 1, 0})));
  EXPECT_FALSE(m2->bias.has_value()) << "a BatchNorm2d without bias gets no bias mask";
  EXPECT_EQ(m1->weight.scalar_type(), at::kFloat);
  EXPECT_FALSE(pruner->calc_mask(bn1).has_value()) << "one-shot: computed once";
}

TEST(SlimPrunerTest, RejectsLayersThatAreNotBatchNorm2d) {
  auto pruner = slim_registry().make_pruner("slim", sdk::Options());
  sdk::LayerView conv(0, "features.0", "Conv2d", at::ones({4, 3, 3, 3}), at::zeros({4}), half());
  EXPECT_THAT([&] { pruner->calc_mask(conv); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("layer 'features.0'"),
                                              HasSubstr("op type 'Conv2d'"),
                                              HasSubstr("BatchNorm2d layers only"))));
  EXPECT_EQ(error_code([&] { pruner->calc_mask(conv); }), sdk::Errc::kUnsupportedLayer);
  FakeContext context({&conv}, slim_registry());
  EXPECT_EQ(error_code([&] { pruner->attach(context); }), sdk::Errc::kUnsupportedLayer);
}

TEST(SlimPrunerConfigTest, OpTypesMustBeExactlyBatchNorm2d) {
  auto pruner = slim_registry().make_pruner("slim", sdk::Options());
  const auto conv = entry({{"sparsity", 0.5}, {"op_types", {"Conv2d"}}});
  EXPECT_THAT([&] { pruner->validate_config(conv); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("/config_list/0/op_types must be exactly [\"BatchNorm2d\"]"),
                  HasSubstr("got [\"Conv2d\"]"))));
  EXPECT_EQ(error_code([&] { pruner->validate_config(conv); }), sdk::Errc::kInvalidConfig);
  const auto extra = entry({{"sparsity", 0.5}, {"op_types", {"BatchNorm2d", "Conv2d"}}}, 2);
  EXPECT_THAT([&] { pruner->validate_config(extra); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("/config_list/2/op_types must be exactly"),
                                              HasSubstr("got [\"BatchNorm2d\", \"Conv2d\"]"))));
  const auto missing = entry({{"sparsity", 0.5}, {"op_names", {"bn1"}}});
  EXPECT_THAT([&] { pruner->validate_config(missing); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("/config_list/0/op_types must be exactly [\"BatchNorm2d\"]"),
                  HasSubstr("missing"))));
  EXPECT_EQ(error_code([&] { pruner->validate_config(missing); }), sdk::Errc::kInvalidConfig);
  EXPECT_NO_THROW(pruner->validate_config(
      entry({{"sparsity", 0.0}, {"op_types", {"BatchNorm2d"}}, {"op_names", {"bn1"}}})));
}

TEST(SlimPrunerConfigTest, RejectsSparsityOutsideHalfOpenUnitInterval) {
  auto pruner = slim_registry().make_pruner("slim", sdk::Options());
  for (double bad : {1.0, -0.1, 1.5}) {
    EXPECT_THAT(
        [&] { pruner->validate_config(entry({{"sparsity", bad}, {"op_types", {"BatchNorm2d"}}})); },
        ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/sparsity must be a number in [0, 1)")));
  }
  EXPECT_THAT([&] { pruner->validate_config(entry({{"op_types", {"BatchNorm2d"}}})); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0: missing required key 'sparsity'")));
}

TEST(SlimPrunerConfigTest, SessionRejectsConvAndDefaultOpTypesBeforeTouchingTheModel) {
  auto model = host::load_torchscript_model(test::nni_data_dir() / "models/vgg_bn.pt");
  const at::Tensor before = model->find_module("bn1")->weight->detach().clone();
  for (const char* types : {R"(["Conv2d"])", R"(["default"])"}) {
    const std::string list = std::string(R"([{"sparsity": 0.5, "op_types": )") + types + "}]";
    EXPECT_THAT([&] { host::PruningSession(*model, slim_registry(), slim_config(list)); },
                ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/op_types must be exactly")))
        << types;
  }
  EXPECT_TRUE(model->find_module("bn1")->weight->equal(before));
}

TEST(SlimPrunerTest, RegistersThePrunerOnly) {
  host::PluginRegistry registry;
  register_algorithms(registry);
  EXPECT_NE(registry.find(host::AlgorithmKind::kPruner, "slim"), nullptr);
  EXPECT_EQ(registry.find(host::AlgorithmKind::kMasker, "slim"), nullptr);
  EXPECT_THAT([&] { register_algorithms(registry); },
              ThrowsMessage<sdk::Error>(HasSubstr("duplicate pruner 'slim'")));
}

// --- the real conformance model -------------------------------------------------------------

std::map<std::string, at::Tensor> golden_case_tensors(const std::string& case_name) {
  return test::load_tensor_dict(test::nni_data_dir() / "golden" / case_name / "tensors.pt");
}


TEST(SlimPrunerVggBnTest, MatchesNniGoldenMasksWhereNoTiesExist) {
  auto model = host::load_torchscript_model(test::nni_data_dir() / "models/vgg_bn.pt");
  const auto masks = compress(*model, kHalf);
  const auto golden = golden_case_tensors("slim_vgg_bn_s0.5");
  ASSERT_EQ(masks.size(), 3u);
  int64_t pruned = 0;
  for (const auto& [name, m] : masks) {
    EXPECT_TRUE(m.weight.equal(golden.at(name + ".weight_mask"))) << name;
    ASSERT_TRUE(m.bias.has_value()) << name;
    EXPECT_TRUE(m.bias->equal(golden.at(name + ".bias_mask"))) << name;
    pruned += m.weight.eq(0).sum().item<int64_t>();
  }
  EXPECT_EQ(pruned, 56) << "k = int((16 + 32 + 64) * 0.5)";
}

TEST(SlimPrunerVggBnTest, DefaultBnInitPrunesExactlyHalfInLayerOrder) {
  auto model = host::load_torchscript_model(test::nni_data_dir() / "models/vgg_bn.pt");
  {
    at::NoGradGuard no_grad;
    for (const char* bn : {"bn1", "bn2", "bn3"}) {
      model->find_module(bn)->weight->fill_(1.0);
    }
  }
  const auto masks = compress(*model, kHalf);
  // NNI prunes all 112 channels; Lithe the first 56 in global order: bn1 (16), bn2 (32), 8 of bn3.
  EXPECT_TRUE(masks.at("bn1").weight.eq(0).all().item<bool>());
  EXPECT_TRUE(masks.at("bn2").weight.eq(0).all().item<bool>());
  const at::Tensor bn3 = masks.at("bn3").weight;
  EXPECT_TRUE(bn3.narrow(0, 0, 8).eq(0).all().item<bool>());
  EXPECT_TRUE(bn3.narrow(0, 8, 56).eq(1).all().item<bool>());
}


// Sparse training (slim 1.2.0, SDK 1.7): the γ penalty trains through the host's fine-tuner
// before the ranking; γ shrinks far more than the same training without it, and the cut is
// still exactly k channels.
TEST(SlimPrunerVggBnTest, SparseTrainingShrinksGammaThroughTheFineTuner) {
  host::Dataset data;
  const auto generator = at::detail::createCPUGenerator(11);
  data.images = at::randn({128, 3, 32, 32}, generator);
  data.labels = at::randint(10, {128}, generator);
  data.source = "<random>";
  std::map<double, double> gamma_l1;
  for (const double scale : {0.0, 0.2}) {
    auto model = host::load_torchscript_model(test::nni_data_dir() / "models/vgg_bn.pt");
    host::PruningSession session(
        *model, slim_registry(),
        {"slim", kHalf,
         R"({"sparsity_training_epochs": 2, "scale": )" + std::to_string(scale) + "}", "t"});
    int64_t tuned = 0;
    session.set_fine_tuner([&](int64_t epochs) {
      tuned += epochs;
      host::TrainOptions options;
      options.epochs = epochs;
      options.batch_size = 16;
      options.lr = 0.05;
      options.weight_decay = 0;
      options.progress = false;
      host::train(*model, data, nullptr, options, &session);
    });
    session.compress();
    double l1 = 0;
    EXPECT_EQ(tuned, 2);
    int64_t pruned = 0;
    for (const auto& [name, masks] : session.masks()) {
      pruned += masks.weight.eq(0).sum().item<int64_t>();
      const at::Tensor gamma = *model->find_module(name)->weight;
      l1 += gamma.abs().sum().item<double>();  // pruned channels are 0 now
    }
    EXPECT_EQ(pruned, 56);
    gamma_l1[scale] = l1;  // Σ|γ| of the kept channels
  }
  EXPECT_LT(gamma_l1[0.2], 0.7 * gamma_l1[0.0]) << gamma_l1[0.2] << " vs " << gamma_l1[0.0];
}

TEST(SlimPrunerVggBnTest, SparseTrainingWithoutDataSaysSo) {
  auto model = host::load_torchscript_model(test::nni_data_dir() / "models/vgg_bn.pt");
  host::PruningSession session(*model, slim_registry(),
                               {"slim", kHalf, R"({"sparsity_training_epochs": 1})", "t"});
  EXPECT_THAT([&] { session.compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("pruner 'slim'"), HasSubstr("--data"))));
}


TEST(SlimPrunerVggBnTest, MaxSparsityPerLayerCapsEveryLayerAndKeepsTheGlobalCount) {
  auto model = host::load_torchscript_model(test::nni_data_dir() / "models/vgg_bn.pt");
  {
    // bn1's γ far below the others: uncapped, the cut of 78 (0.7 of 112) would take all 16.
    at::NoGradGuard no_grad;
    model->find_module("bn1")->weight->fill_(0.01);
  }
  host::PruningSession session(
      *model, slim_registry(),
      {"slim", R"([{"sparsity": 0.7, "op_types": ["BatchNorm2d"]}])",
       R"({"max_sparsity_per_layer": 0.75})", "t"});
  session.compress();
  int64_t pruned = 0;
  for (const auto& [name, masks] : session.masks()) {
    const int64_t layer_pruned = masks.weight.eq(0).sum().item<int64_t>();
    EXPECT_LE(layer_pruned, static_cast<int64_t>(masks.weight.numel() * 0.75)) << name;
    pruned += layer_pruned;
  }
  EXPECT_EQ(pruned, 78);
  EXPECT_EQ(session.masks().front().second.weight.eq(0).sum().item<int64_t>(), 12);  // 0.75 · 16

  host::PruningSession too_tight(
      *model, slim_registry(),
      {"slim", R"([{"sparsity": 0.7, "op_types": ["BatchNorm2d"]}])",
       R"({"max_sparsity_per_layer": 0.5})", "t"});
  EXPECT_THAT([&] { too_tight.compress(); },
              ThrowsMessage<sdk::Error>(AllOf(HasSubstr("78"), HasSubstr("56"))));
}

}  // namespace
}  // namespace lithe::plugins::slim
