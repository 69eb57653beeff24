// OptionSchema (SDK 1.4): a key is read through its declaration — default, type, range and
// choices come from one place — and a declaration that contradicts itself is a plugin bug.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "lithe/sdk/error.h"
#include "lithe/sdk/option_spec.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::sdk {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::ThrowsMessage;

Options opts(const std::string& text, const std::string& path = "/options") {
  return options_from_json(nlohmann::ordered_json::parse(text), path);
}

const OptionSchema& schema() {
  static const OptionSchema s{
      option("batches", OptionType::kInteger, "batches to observe").defaults_to("1").above(0),
      option("act", OptionType::kString, "activation").defaults_to("\"relu\"").one_of({"relu", "relu6"}),
      option("ratios", OptionType::kNumberList, "per-stage ratios").at_least(0).at_most(1),
      option("tags", OptionType::kStringList, "tags").one_of({"a", "b"}),
      option("flag", OptionType::kBool, "a switch").defaults_to("true"),
      entry_key("sparsity", OptionType::kNumber, "fraction pruned").mandatory().at_least(0).below(1)};
  return s;
}

TEST(OptionSchemaTest, AbsentKeysReadAsTheDeclaredDefault) {
  const Options o = opts("{}");
  EXPECT_EQ(schema().read<int64_t>(o, "batches"), 1);
  EXPECT_EQ(schema().read<std::string>(o, "act"), "relu");
  EXPECT_TRUE(schema().read<bool>(o, "flag"));
  EXPECT_THAT(unread_option_paths(o), IsEmpty());
}

TEST(OptionSchemaTest, PresentKeysAreConvertedCheckedAndMarkedRead) {
  const Options o = opts(R"({"batches": 4, "act": "relu6", "ratios": [0, 0.5, 1], "x": 1})");
  EXPECT_EQ(schema().read<int64_t>(o, "batches"), 4);
  EXPECT_EQ(schema().read<std::string>(o, "act"), "relu6");
  EXPECT_THAT(schema().read<std::vector<double>>(o, "ratios"), ElementsAre(0.0, 0.5, 1.0));
  EXPECT_THAT(unread_option_paths(o), ElementsAre("/options/x"));
}

TEST(OptionSchemaTest, ValuesBreakingTheDeclarationNamePathRuleAndValue) {
  EXPECT_THAT([] { (void)schema().read<int64_t>(opts(R"({"batches": 0})"), "batches"); },
              ThrowsMessage<Error>(HasSubstr("/options/batches must be an integer > 0, got 0")));
  EXPECT_THAT([] { (void)schema().read<std::string>(opts(R"({"act": "tanh"})"), "act"); },
              ThrowsMessage<Error>(HasSubstr(
                  "/options/act must be one of \"relu\", \"relu6\", got \"tanh\"")));
  EXPECT_THAT(
      [] { (void)schema().read<std::vector<double>>(opts(R"({"ratios": [0.5, 1.5]})"), "ratios"); },
      ThrowsMessage<Error>(HasSubstr("/options/ratios/1 must be a number in [0, 1], got 1.5")));
  EXPECT_THAT(
      [] { (void)schema().read<std::vector<std::string>>(opts(R"({"tags": ["a", "c"]})"), "tags"); },
      ThrowsMessage<Error>(HasSubstr("/options/tags/1 must be one of \"a\", \"b\", got \"c\"")));
  EXPECT_THAT([] { (void)schema().read<double>(opts(R"({"sparsity": 1})", "/config_list/0"),
                                               "sparsity"); },
              ThrowsMessage<Error>(
                  HasSubstr("/config_list/0/sparsity must be a number in [0, 1), got 1")));
  // The shortest text that reads back: 0.1, not 0.10000000000000001.
  EXPECT_THAT([] { (void)schema().read<double>(opts(R"({"sparsity": -0.1})"), "sparsity"); },
              ThrowsMessage<Error>(HasSubstr("got -0.1")));
  // Wrong JSON types keep Options' own messages.
  EXPECT_THAT([] { (void)schema().read<int64_t>(opts(R"({"batches": 1.5})"), "batches"); },
              ThrowsMessage<Error>(HasSubstr("/options/batches must be an integer, got 1.5")));
}

TEST(OptionSchemaTest, MissingRequiredKeySuggestsTheMisspelling) {
  const Options o = opts(R"({"sparsty": 0.5})", "/config_list/0");
  EXPECT_THAT([&] { (void)schema().read<double>(o, "sparsity"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("/config_list/0: missing required key 'sparsity'"),
                                         HasSubstr("did you mean 'sparsity'"))));
  EXPECT_THAT([&] { schema().check(o, OptionScope::kConfigEntry); },
              ThrowsMessage<Error>(AllOf(HasSubstr("missing required key 'sparsity'"),
                                         HasSubstr("a number in [0, 1)"),
                                         HasSubstr("fraction pruned"))));
}

TEST(OptionSchemaTest, ReadingAKeyTheDeclarationDoesNotAllowIsAnInternalError) {
  const Options o = opts(R"({"batches": 2})");
  try {
    (void)schema().read<double>(o, "batches");  // declared integer
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInternal);
    EXPECT_THAT(e.what(), HasSubstr("declared as integer but read as number"));
  }
  try {
    (void)schema().read<int64_t>(o, "undeclared");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInternal);
    EXPECT_THAT(e.what(), HasSubstr("'undeclared' is read but not declared"));
  }
  try {
    (void)schema().read<std::vector<double>>(opts("{}"), "ratios");  // optional, no default
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInternal);
    EXPECT_THAT(e.what(), HasSubstr("check has() before reading it"));
  }
}

TEST(OptionSchemaTest, CheckValidatesOneScopeWithoutMarkingKeysRead) {
  const Options ok = opts(R"({"batches": 3, "act": "relu", "sparsity": 7})");
  schema().check(ok, OptionScope::kOptions);  // sparsity is an entry key: not this scope
  EXPECT_THAT(unread_option_paths(ok), ElementsAre("/options/batches", "/options/act",
                                                   "/options/sparsity"));
  EXPECT_THAT([] { schema().check(opts(R"({"batches": -1})"), OptionScope::kOptions); },
              ThrowsMessage<Error>(AllOf(HasSubstr("/options/batches must be an integer > 0, got -1"),
                                         HasSubstr("(batches: batches to observe)"))));
  EXPECT_THAT([] { schema().check(opts(R"({"sparsity": 2})"), OptionScope::kConfigEntry); },
              ThrowsMessage<Error>(HasSubstr("/options/sparsity must be a number in [0, 1), got 2")));
}

TEST(OptionSchemaTest, SelfContradictingDeclarationsAreRefused) {
  const auto internal = [](const std::function<void()>& declare, const std::string& what) {
    try {
      declare();
      ADD_FAILURE() << "expected a kInternal error containing " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInternal);
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  internal([] { OptionSchema{option("k", OptionType::kInteger, "").defaults_to("0").above(0)}; },
           "has a default that breaks its own declaration");
  internal([] { OptionSchema{option("k", OptionType::kString, "").defaults_to("3")}; },
           "has a default that breaks its own declaration");
  internal([] { OptionSchema{option("k", OptionType::kBool, "").defaults_to("not json")}; },
           "is not JSON");
  internal([] { OptionSchema{option("k", OptionType::kBool, "").mandatory().defaults_to("true")}; },
           "both required and with default");
  internal([] {
    OptionSchema{option("k", OptionType::kBool, ""), entry_key("k", OptionType::kBool, "")};
  }, "'k' is declared twice");
}

TEST(OptionSchemaTest, RulesReadAsPlainWords) {
  EXPECT_EQ(schema().find("batches")->rule(), "an integer > 0");
  EXPECT_EQ(schema().find("sparsity")->rule(), "a number in [0, 1)");
  EXPECT_EQ(schema().find("act")->rule(), "one of \"relu\", \"relu6\"");
  EXPECT_EQ(schema().find("ratios")->rule(), "a list of numbers, each in [0, 1]");
  EXPECT_EQ(schema().find("flag")->rule(), "true or false");
  EXPECT_EQ(quantizer_keys().find("quant_bits")->rule(),
            "an integer or an object of integers, each in [1, 32]");
  EXPECT_EQ(schema().find("missing"), nullptr);
}

TEST(OptionSchemaTest, SdkBuildingBlocksReadTheirKeysByDeclaration) {
  // make_one_shot_pruner and the quantizer helpers use these; a plugin adds them to its own.
  const OptionSchema combined = OptionSchema().add(sparsity_keys()).add(filter_pruner_keys());
  ASSERT_EQ(combined.specs().size(), 3U);
  EXPECT_TRUE(combined.find("sparsity")->required);
  EXPECT_EQ(combined.find("dependency_aware")->default_json, "false");
  EXPECT_THAT([] { quantizer_keys().check(opts(R"({"quant_types": ["weights"], "quant_bits": 8})",
                                                "/config_list/0"),
                                          OptionScope::kConfigEntry); },
              ThrowsMessage<Error>(HasSubstr(
                  "/config_list/0/quant_types/0 must be one of \"input\", \"weight\", \"output\", "
                  "got \"weights\"")));
  EXPECT_THAT([] { quantizer_keys().check(opts(R"({"quant_types": ["weight"], "quant_bits": "8"})",
                                                "/config_list/0"),
                                          OptionScope::kConfigEntry); },
              ThrowsMessage<Error>(HasSubstr("/config_list/0/quant_bits must be an integer or an "
                                             "object of integers")));
}

}  // namespace
}  // namespace lithe::sdk
