// PluginRegistry's rules for NNI counterparts (SDK 1.4 add_nni_counterpart): a plugin may only
// point at a pruner or quantizer it registered itself, every field is required, an NNI class has
// one owner, and withdrawing a plugin withdraws what it declared.
#include "lithe/host/runtime/plugin_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::host {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::ThrowsMessage;

// Factories are never called here: the rules under test look only at names and owners.
void add_pruner(PluginRegistry& registry, const std::string& name) {
  registry.add_pruner({name, "test pruner"}, [](const sdk::Options&, const sdk::Registry&) {
    return std::unique_ptr<sdk::Pruner>();
  });
}

void add_quantizer(PluginRegistry& registry, const std::string& name) {
  registry.add_quantizer({name, "test quantizer"}, [](const sdk::Options&, const sdk::Registry&) {
    return std::unique_ptr<sdk::Quantizer>();
  });
}

void add_masker(PluginRegistry& registry, const std::string& name) {
  registry.add_masker({name, "test masker"}, [](const sdk::Options&, const sdk::Registry&) {
    return std::unique_ptr<sdk::WeightMasker>();
  });
}

TEST(PluginRegistryCounterpartTest, RecordsTheKindAndOwnerOfEachDeclaredClass) {
  PluginRegistry registry;
  registry.set_current_plugin("acme", "/plugins/lithe_plugin_acme.so");
  add_pruner(registry, "acme_prune");
  add_quantizer(registry, "acme_quant");
  registry.add_nni_counterpart({"acme_prune", "LevelPruner", "one_shot"});
  registry.add_nni_counterpart({"acme_quant", "NaiveQuantizer", "eval_forwards"});

  const NniCounterpartEntry* pruner = registry.find_nni_counterpart("LevelPruner");
  ASSERT_NE(pruner, nullptr);
  EXPECT_EQ(pruner->counterpart.algorithm, "acme_prune");
  EXPECT_EQ(pruner->counterpart.replay, "one_shot");
  EXPECT_EQ(pruner->kind, AlgorithmKind::kPruner);
  EXPECT_EQ(pruner->plugin, "acme");
  const NniCounterpartEntry* quantizer = registry.find_nni_counterpart("NaiveQuantizer");
  ASSERT_NE(quantizer, nullptr);
  EXPECT_EQ(quantizer->kind, AlgorithmKind::kQuantizer);
  EXPECT_EQ(registry.find_nni_counterpart("AGPPruner"), nullptr);
  ASSERT_THAT(registry.nni_counterparts(), SizeIs(2));
  EXPECT_EQ(registry.nni_counterparts()[0].counterpart.nni_class, "LevelPruner");  // sorted
}

TEST(PluginRegistryCounterpartTest, RefusesAnAlgorithmThePluginDidNotRegister) {
  PluginRegistry registry;
  registry.set_current_plugin("owner", "/p/lithe_plugin_owner.so");
  add_pruner(registry, "owned");
  add_masker(registry, "only_a_masker");
  registry.set_current_plugin("thief", "/p/lithe_plugin_thief.so");
  // Another plugin's pruner: a counterpart may not vouch for behaviour it does not control.
  EXPECT_THAT([&] { registry.add_nni_counterpart({"owned", "LevelPruner", "one_shot"}); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("plugin 'thief' (/p/lithe_plugin_thief.so) declared NNI class "
                            "'LevelPruner' for 'owned'"),
                  HasSubstr("not a pruner or quantizer it registered"))));
  registry.set_current_plugin("owner", "/p/lithe_plugin_owner.so");
  EXPECT_THAT([&] { registry.add_nni_counterpart({"missing", "LevelPruner", "one_shot"}); },
              ThrowsMessage<sdk::Error>(HasSubstr("for 'missing', which is not a pruner")));
  // A masker alone has no compress() to replay.
  EXPECT_THAT([&] { registry.add_nni_counterpart({"only_a_masker", "LevelPruner", "one_shot"}); },
              ThrowsMessage<sdk::Error>(HasSubstr("for 'only_a_masker', which is not a pruner")));
  EXPECT_THAT(registry.nni_counterparts(), IsEmpty());
}

TEST(PluginRegistryCounterpartTest, RefusesEmptyFieldsNamingAllThree) {
  PluginRegistry registry;
  registry.set_current_plugin("acme", "");
  add_pruner(registry, "acme_prune");
  EXPECT_THAT([&] { registry.add_nni_counterpart({"acme_prune", "", "one_shot"}); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "plugin 'acme' (linked in) declared an NNI counterpart with an empty field "
                  "(algorithm 'acme_prune', nni_class '', replay 'one_shot')")));
  EXPECT_THAT([&] { registry.add_nni_counterpart({"acme_prune", "LevelPruner", ""}); },
              ThrowsMessage<sdk::Error>(HasSubstr("replay '')")));
  EXPECT_THAT(registry.nni_counterparts(), IsEmpty());
}

TEST(PluginRegistryCounterpartTest, AnNniClassHasOneOwnerAcrossPlugins) {
  PluginRegistry registry;
  registry.set_current_plugin("first", "/p/lithe_plugin_first.so");
  add_pruner(registry, "first_level");
  registry.add_nni_counterpart({"first_level", "LevelPruner", "one_shot"});
  registry.set_current_plugin("second", "/p/lithe_plugin_second.so");
  add_pruner(registry, "second_level");
  EXPECT_THAT(
      [&] { registry.add_nni_counterpart({"second_level", "LevelPruner", "one_shot"}); },
      ThrowsMessage<sdk::Error>(HasSubstr(
          "NNI class 'LevelPruner' declared twice: for 'first_level' by plugin 'first' "
          "(/p/lithe_plugin_first.so) and for 'second_level' by plugin 'second' "
          "(/p/lithe_plugin_second.so)")));
  EXPECT_EQ(registry.find_nni_counterpart("LevelPruner")->counterpart.algorithm, "first_level");
}

TEST(PluginRegistryCounterpartTest, WithdrawingAPluginWithdrawsItsCounterpartsOnly) {
  PluginRegistry registry;
  registry.set_current_plugin("keep", "");
  add_pruner(registry, "kept");
  registry.add_nni_counterpart({"kept", "FPGMPruner", "one_shot"});
  registry.set_current_plugin("drop", "");
  add_pruner(registry, "dropped");
  registry.add_nni_counterpart({"dropped", "SlimPruner", "one_shot_global"});
  registry.remove_plugin("drop");
  EXPECT_EQ(registry.find_nni_counterpart("SlimPruner"), nullptr);
  ASSERT_NE(registry.find_nni_counterpart("FPGMPruner"), nullptr);
  // The class is free again for a plugin loaded later.
  registry.set_current_plugin("later", "");
  add_pruner(registry, "slim_again");
  registry.add_nni_counterpart({"slim_again", "SlimPruner", "one_shot_global"});
  EXPECT_EQ(registry.find_nni_counterpart("SlimPruner")->plugin, "later");
}

}  // namespace
}  // namespace lithe::host

// ---- describe_options (SDK 1.4): declared keys, checked before the factory runs ----

namespace lithe::host {
namespace {

const sdk::OptionSchema& declared_keys() {
  static const sdk::OptionSchema schema{
      sdk::option("batches", sdk::OptionType::kInteger, "batches to observe")
          .defaults_to("1")
          .above(0),
      sdk::entry_key("sparsity", sdk::OptionType::kNumber, "fraction pruned")
          .mandatory()
          .at_least(0)
          .below(1)};
  return schema;
}

TEST(PluginRegistryOptionsTest, ADeclarationAppliesToEveryKindOfThatNameOfThePlugin) {
  PluginRegistry registry;
  registry.set_current_plugin("acme", "/p/lithe_plugin_acme.so");
  add_pruner(registry, "acme");
  add_masker(registry, "acme");
  add_pruner(registry, "acme_other");
  registry.describe_options("acme", declared_keys());
  ASSERT_NE(registry.declared_options(AlgorithmKind::kPruner, "acme"), nullptr);
  ASSERT_NE(registry.declared_options(AlgorithmKind::kMasker, "acme"), nullptr);
  EXPECT_EQ(registry.declared_options(AlgorithmKind::kPruner, "acme")->specs().size(), 2U);
  EXPECT_EQ(registry.declared_options(AlgorithmKind::kPruner, "acme_other"), nullptr);
  EXPECT_EQ(registry.declared_options(AlgorithmKind::kQuantizer, "acme"), nullptr);
  EXPECT_THAT([&] { registry.describe_options("acme", declared_keys()); },
              ThrowsMessage<sdk::Error>(HasSubstr("declared the option keys of 'acme' twice")));
}

TEST(PluginRegistryOptionsTest, RefusesADeclarationForAnotherPluginsAlgorithm) {
  PluginRegistry registry;
  registry.set_current_plugin("owner", "/p/lithe_plugin_owner.so");
  add_pruner(registry, "owned");
  registry.set_current_plugin("thief", "/p/lithe_plugin_thief.so");
  try {
    registry.describe_options("owned", declared_keys());
    FAIL() << "expected an error";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kPluginLoad);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("plugin 'thief' (/p/lithe_plugin_thief.so) declared "
                                          "option keys for 'owned'"),
                                HasSubstr("not an algorithm it registered")));
  }
  EXPECT_EQ(registry.declared_options(AlgorithmKind::kPruner, "owned"), nullptr);
}

TEST(PluginRegistryOptionsTest, DeclaredOptionsAreCheckedBeforeTheFactoryRuns) {
  PluginRegistry registry;
  registry.set_current_plugin("acme", "/p/lithe_plugin_acme.so");
  int factory_calls = 0;
  registry.add_pruner({"acme", "test pruner"},
                      [&factory_calls](const sdk::Options&, const sdk::Registry&) {
                        ++factory_calls;
                        return std::unique_ptr<sdk::Pruner>();
                      });
  registry.describe_options("acme", declared_keys());
  const sdk::Options bad = sdk::options_from_json(nlohmann::ordered_json{{"batches", 0}}, "/options");
  EXPECT_THAT([&] { (void)registry.make_pruner("acme", bad); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("pruner 'acme'"),
                  HasSubstr("/options/batches must be an integer > 0, got 0"),
                  HasSubstr("(batches: batches to observe)"))));
  EXPECT_EQ(factory_calls, 0);
}

}  // namespace
}  // namespace lithe::host
