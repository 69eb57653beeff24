// FieldError and FieldText: a job's message names request fields, which a front end writes in
// its own words; marks around anything but a field name (as a hostile path could carry) stay
// text, and no input makes the rendering fail.
#include "lithe/host/io/field_error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace lithe::host {
namespace {

std::string flags(const std::string& field) {
  return field == "output" ? "--output" : field == "onnx_export.opset" ? "--onnx-opset" : "";
}

TEST(FieldErrorTest, FieldsRenderAsTheirNamesOrAsAFrontEndsWords) {
  const FieldError e(sdk::Errc::kInvalidConfig,
                     field_ref("output") + " '/tmp/a' is the same file as " + field_ref("model") +
                         "; " + field_ref("onnx_export.opset") + " must be 13..17");
  EXPECT_STREQ(e.what(),
               "`output` '/tmp/a' is the same file as `model`; `onnx_export.opset` must be 13..17");
  EXPECT_EQ(e.in_words(flags),
            "--output '/tmp/a' is the same file as `model`; --onnx-opset must be 13..17");
  EXPECT_EQ(e.text().fields(), (std::vector<std::string>{"output", "model", "onnx_export.opset"}));
  EXPECT_EQ(e.code(), sdk::Errc::kInvalidConfig);
}

TEST(FieldErrorTest, LowerLayersErrorsBecomeFieldErrorsAtTheJobsBoundary) {
  const auto marked = [] {
    throw sdk::Error(sdk::Errc::kIo, field_ref("masks") + " '/x' cannot be written");
  };
  EXPECT_THROW(rethrow_with_fields(marked), FieldError);
  const auto plain = []() -> int { throw sdk::Error(sdk::Errc::kIo, "disk full"); };
  try {
    (void)rethrow_with_fields(plain);
  } catch (const FieldError&) {
    FAIL() << "an error naming no field became a FieldError";
  } catch (const sdk::Error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
  EXPECT_EQ(rethrow_with_fields([] { return 7; }), 7);
}

TEST(FieldErrorTest, MarksAroundAnythingButAFieldNameStayText) {
  const std::string open = "\xee\x80\x80";
  const std::string close = "\xee\x80\x81";
  // A path holding the marks around a name that is not a field name ("Bad Name/"), and an
  // unmatched mark: both are kept byte for byte; the real field is still found.
  const std::string path = "/tmp/" + open + "Bad Name/" + close + open + "x";
  const FieldText text(path + " and " + field_ref("output"));
  EXPECT_EQ(text.plain(), path + " and `output`");
  EXPECT_EQ(text.fields(), std::vector<std::string>{"output"});
  EXPECT_FALSE(has_field_refs(path));
  EXPECT_THROW((void)field_ref("Not A Field"), sdk::Error);
  EXPECT_THROW((void)field_ref(""), sdk::Error);
}

TEST(FieldErrorTest, RandomBytesNeverBreakTheRendering) {
  // Fuzz: any bytes, with marks spliced in at random, render without throwing, keep every byte
  // outside well-formed marks, and render again to the same text.
  std::mt19937 random(20261129);
  const std::vector<std::string> pieces = {"\xee\x80\x80", "\xee\x80\x81", "output", "a.b",
                                           "`",            "\n",           "\xee\x80",  "--x"};
  for (int round = 0; round < 2000; ++round) {
    std::string message;
    const int parts = static_cast<int>(random() % 12);
    for (int i = 0; i < parts; ++i) {
      if (random() % 2 == 0) {
        message += pieces[random() % pieces.size()];
      } else {
        message += static_cast<char>(random() % 256);
      }
    }
    const FieldError e(sdk::Errc::kInvalidConfig, message);
    const std::string once = e.in_words(flags);
    EXPECT_EQ(once, e.in_words(flags));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);  // one line
    if (!has_field_refs(message)) {
      EXPECT_EQ(e.text().plain(), sdk::Error(sdk::Errc::kInvalidConfig, message).what());
    }
  }
}

}  // namespace
}  // namespace lithe::host
