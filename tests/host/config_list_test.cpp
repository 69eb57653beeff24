#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lithe/host/session/config_list.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

class ConfigListTest : public ::testing::Test {
 protected:
  ConfigListTest() : model_(load_torchscript_model(test::lenet_model())) {}

  // Selected layer name -> index of the entry that selected it.
  std::vector<std::pair<std::string, size_t>> resolve(const std::string& json) {
    const ResolvedConfig r = resolve_config_list(json, "/config_list", *model_);
    std::vector<std::pair<std::string, size_t>> out;
    for (const SelectedLayer& layer : r.layers) {
      out.emplace_back(model_->modules()[layer.module_index].name, layer.entry_index);
    }
    return out;
  }

  std::unique_ptr<Model> model_;
};

using Sel = std::pair<std::string, size_t>;

TEST_F(ConfigListTest, DefaultSelectsWeightedModulesInNamedModulesOrder) {
  EXPECT_THAT(resolve(R"([{"sparsity": 0.5, "op_types": ["default"]}])"),
              ElementsAre(Sel{"conv1", 0}, Sel{"conv2", 0}, Sel{"fc1", 0}, Sel{"fc2", 0},
                          Sel{"fc3", 0}));
}

TEST_F(ConfigListTest, DefaultIsExpandedInPlaceInTheEntry) {
  const ResolvedConfig r = resolve_config_list(
      R"([{"sparsity": 0.5, "op_types": ["BatchNorm2d", "default"]}])", "/config_list", *model_);
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.entries[0].op_types.front(), "BatchNorm2d");
  EXPECT_EQ(r.entries[0].op_types.size(), 1 + default_op_types().size());
  EXPECT_THAT(r.entries[0].options.dump(), HasSubstr("\"EmbeddingBag\""));
}

TEST_F(ConfigListTest, LastMatchWinsWholeAndTypesAndNamesMustBothMatch) {
  // NNI golden case level_lenet_op_names_override.
  EXPECT_THAT(resolve(R"([{"sparsity": 0.5, "op_types": ["default"]},
                          {"sparsity": 0.8, "op_names": ["fc1"]},
                          {"sparsity": 0.2, "op_types": ["Conv2d"], "op_names": ["conv2"]},
                          {"sparsity": 0.9, "op_types": ["Linear"], "op_names": ["conv1"]}])"),
              ElementsAre(Sel{"conv1", 0}, Sel{"conv2", 2}, Sel{"fc1", 1}, Sel{"fc2", 0},
                          Sel{"fc3", 0}));
}

TEST(ConfigListConvolutionSubclassTest, MatchesItsConvolutionTypeAndItsOwnClassName) {
  // ops_video.pt's `conv` is a PlainConv3d (torchvision's Conv3DSimple pattern): scripting drops
  // the base class, so its op type is read from its structure; NNI-style configs that name
  // the class itself keep matching.
  const std::unique_ptr<Model> video =
      load_torchscript_model(test::source_dir() / "tests/data/ops_video.pt");
  const ModuleRecord* conv = video->find_module("conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->op_type, "Conv3d");
  EXPECT_EQ(conv->class_name, "PlainConv3d");
  EXPECT_EQ(video->find_module("stem")->class_name, "") << "torch.nn's own class: no alias";
  const auto names = [&](const std::string& json) {
    std::vector<std::string> out;
    for (const SelectedLayer& layer : resolve_config_list(json, "/config_list", *video).layers) {
      out.push_back(video->modules()[layer.module_index].name);
    }
    return out;
  };
  EXPECT_THAT(names(R"([{"sparsity": 0.5, "op_types": ["Conv3d"]}])"),
              ElementsAre("stem", "conv", "dw"));
  EXPECT_THAT(names(R"([{"sparsity": 0.5, "op_types": ["PlainConv3d"]}])"), ElementsAre("conv"));
}

TEST_F(ConfigListTest, ExcludeWorksOnlyWhenItIsTheLastMatch) {
  EXPECT_THAT(resolve(R"([{"sparsity": 0.5, "op_types": ["Linear"]},
                          {"exclude": true, "op_names": ["fc2"]}])"),
              ElementsAre(Sel{"fc1", 0}, Sel{"fc3", 0}));
  EXPECT_THAT(resolve(R"([{"exclude": true, "op_names": ["fc2"]},
                          {"sparsity": 0.5, "op_types": ["Linear"]}])"),
              ElementsAre(Sel{"fc1", 1}, Sel{"fc2", 1}, Sel{"fc3", 1}));
}

TEST_F(ConfigListTest, ExcludeFalseMeansNotExcluded) {
  EXPECT_THAT(resolve(R"([{"sparsity": 0.5, "op_names": ["fc2"], "exclude": false}])"),
              ElementsAre(Sel{"fc2", 0}));
}

TEST_F(ConfigListTest, SelectingAWeightlessModuleIsAnErrorNamingIt) {
  EXPECT_THAT([&] { resolve(R"([{"sparsity": 0.5, "op_names": ["relu1"]}])"); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "/config_list/0 selects module 'relu1' (ReLU), which has no weight")));
}

TEST_F(ConfigListTest, UnknownOpNameIsAnErrorWithItsPath) {
  EXPECT_THAT([&] { resolve(R"([{"sparsity": 0.5, "op_names": ["fc1", "fc9"]}])"); },
              ThrowsMessage<sdk::Error>(
                  HasSubstr("/config_list/0/op_names/1: the model has no module named 'fc9'")));
}

TEST_F(ConfigListTest, EntryNeedsOpTypesOrOpNames) {
  EXPECT_THAT([&] { resolve(R"([{"sparsity": 0.5}])"); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "/config_list/0 must contain op_types or op_names, got {\"sparsity\":0.5}")));
}

TEST_F(ConfigListTest, StructuralErrorsNamePathRuleAndValue) {
  EXPECT_THAT([&] { resolve(R"({"sparsity": 0.5})"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list must be a list of objects")));
  EXPECT_THAT([&] { resolve("[]"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list is empty")));
  EXPECT_THAT([&] { resolve(R"([{"op_types": ["Linear"]}, 3])"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/1 must be an object, got 3")));
  EXPECT_THAT([&] { resolve(R"([{"op_types": "Linear"}])"); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "/config_list/0/op_types must be a list of strings, got \"Linear\"")));
  EXPECT_THAT([&] { resolve(R"([{"op_types": ["Linear", 1]}])"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list/0/op_types/1 must be a string")));
  EXPECT_THAT([&] { resolve(R"([{"op_types": ["Linear"], "exclude": 1}])"); },
              ThrowsMessage<sdk::Error>(
                  HasSubstr("/config_list/0/exclude must be true or false, got 1")));
  EXPECT_THAT([&] { resolve("[{"); },
              ThrowsMessage<sdk::Error>(HasSubstr("/config_list: not valid JSON at /0 (byte 3)")));
}

TEST_F(ConfigListTest, RootModuleIsNeverSelected) {
  for (const ModuleRecord& m : model_->modules()) {
    EXPECT_FALSE(m.name.empty());
  }
  EXPECT_EQ(model_->modules().size(), 12u);
}

}  // namespace
}  // namespace lithe::host
