#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lithe/sdk/error.h"
#include "lithe/sdk/options.h"
#include "lithe/sdk/pruner.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::sdk {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

Options parse(const std::string& text, const std::string& path = "/options") {
  return options_from_json(nlohmann::ordered_json::parse(text), path);
}

TEST(OptionsTest, ReadsTypedValuesAndRecordsReadKeys) {
  const Options o = parse(R"({"b": true, "i": 3, "d": 0.5, "s": "x", "l": [1, 2], "n": ["a"]})");
  EXPECT_TRUE(o.require<bool>("b"));
  EXPECT_EQ(o.require<int64_t>("i"), 3);
  EXPECT_DOUBLE_EQ(o.require<double>("d"), 0.5);
  EXPECT_EQ(o.require<std::string>("s"), "x");
  EXPECT_THAT(o.require<std::vector<int64_t>>("l"), ElementsAre(1, 2));
  EXPECT_THAT(unread_option_paths(o), ElementsAre("/options/n"));
}

TEST(OptionsTest, DoubleAcceptsIntegersButIntegerRejectsFractions) {
  const Options o = parse(R"({"d": 1, "i": 1.5})");
  EXPECT_DOUBLE_EQ(o.require<double>("d"), 1.0);
  EXPECT_THAT([&] { (void)o.require<int64_t>("i"); },
              ThrowsMessage<Error>(HasSubstr("/options/i must be an integer, got 1.5")));
}

TEST(OptionsTest, MissingRequiredKeyNamesPathAndKey) {
  const Options o = parse(R"({"sparsty": 0.5})", "/config_list/0");
  EXPECT_THAT([&] { (void)o.require<double>("sparsity"); },
              ThrowsMessage<Error>(HasSubstr("/config_list/0: missing required key 'sparsity'")));
}

TEST(OptionsTest, WrongTypeNamesPathRuleAndValue) {
  const Options o = parse(R"({"flag": "yes", "names": ["a", 3]})");
  EXPECT_THAT([&] { (void)o.require<bool>("flag"); },
              ThrowsMessage<Error>(HasSubstr("/options/flag must be true or false, got \"yes\"")));
  EXPECT_THAT([&] { (void)o.require<std::vector<std::string>>("names"); },
              ThrowsMessage<Error>(HasSubstr("/options/names/1 must be a string, got 3")));
}

TEST(OptionsTest, GetOrFallsBackOnlyWhenAbsent) {
  const Options o = parse(R"({"present": 2})");
  EXPECT_EQ(o.get_or<int64_t>("absent", 7), 7);
  EXPECT_EQ(o.get_or<int64_t>("present", 7), 2);
  EXPECT_TRUE(unread_option_paths(o).empty());
}

TEST(OptionsTest, UnreadKeysAreFoundInsideChildObjects) {
  const Options o = parse(R"({"child": {"used": 1, "typo": 2}})");
  const Options child = o.child("child");
  EXPECT_EQ(child.path(), "/options/child");
  (void)child.require<int64_t>("used");
  EXPECT_THAT(unread_option_paths(o), ElementsAre("/options/child/typo"));
}

TEST(OptionsTest, CopiesShareTheReadRecord) {
  const Options o = parse(R"({"a": 1})");
  const Options copy = o;  // NOLINT(performance-unnecessary-copy-initialization)
  (void)copy.require<int64_t>("a");
  EXPECT_TRUE(unread_option_paths(o).empty());
}

TEST(OptionsTest, JsonPointerEscapesSlashAndTilde) {
  EXPECT_EQ(json_pointer_append("/x", "a/b~c"), "/x/a~1b~0c");
}

TEST(OptionsTest, NonObjectDocumentIsRejected) {
  EXPECT_THAT([] { (void)parse("[1]", "/options"); },
              ThrowsMessage<Error>(HasSubstr("/options must be a JSON object, got [1]")));
}

TEST(ErrorTest, CheckThrowsWithCodeAndConcatenatedMessage) {
  try {
    LITHE_CHECK(1 + 1 == 3, Errc::kShapeMismatch, "layer '", "fc1", "': got ", 42);
    FAIL() << "LITHE_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kShapeMismatch);
    EXPECT_STREQ(e.what(), "layer 'fc1': got 42");
    EXPECT_STREQ(errc_name(e.code()), "shape_mismatch");
  }
}

TEST(ErrorTest, InternalAssertSaysItIsABug) {
  EXPECT_THAT([] { LITHE_INTERNAL_ASSERT(false); },
              ThrowsMessage<Error>(HasSubstr("this is a bug in lithe")));
}

TEST(PruneCountTest, TruncatesTheDoubleProductLikePythonInt) {
  EXPECT_EQ(prune_count(150, 0.82), 122);    // 122.99999999999999
  EXPECT_EQ(prune_count(2400, 0.82), 1967);  // 1967.9999999999998
  EXPECT_EQ(prune_count(100, 0.29), 28);
  EXPECT_EQ(prune_count(100, 0.57), 56);
  EXPECT_EQ(prune_count(4, 0.2), 0);
  EXPECT_EQ(prune_count(150, 0.006), 0);
  EXPECT_EQ(prune_count(10, 0.0), 0);
}

}  // namespace
}  // namespace lithe::sdk
