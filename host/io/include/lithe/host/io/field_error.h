#pragma once
/// \file
/// Errors that name a field of a job's request. A job says which field broke a rule in the
/// request's own words (`output`, `onnx.opset`); a front end that sets those fields from its own
/// options (the `lithe` CLI: `--output`, `--onnx-opset`) rewrites the names into those words
/// with FieldError::in_words, so the message points at what its user typed.
///
/// Inside the library a field travels as field_ref(name), a marked name that every area embeds
/// wherever it names what it checks (a staged file's role, an output-path rule, an option of
/// an analysis); every job's entry point (host/jobs) turns an sdk::Error carrying such marks
/// into a FieldError (rethrow_with_fields). It lives in io, the lowest area, so that every
/// area can name a field without knowing the front end.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/sdk/error.h"

namespace lithe::host {

/// The marked form of a request field's name, to pass as the "role" or "option" text of a
/// lower-layer check. Names are lower-case letters, digits, '_' and '.'.
std::string field_ref(std::string_view name);

/// How a front end writes a field: its own word for `name` ("--output"), or "" to keep the
/// request's name (shown backquoted).
using FieldWords = std::function<std::string(const std::string& name)>;

/// A sentence that names request fields (an error, or a job's note to its caller).
class FieldText {
 public:
  FieldText() = default;
  /// `marked`: text with field_ref() marks.
  explicit FieldText(std::string marked);
  /// The text with each field as `name` (backquoted).
  std::string plain() const { return in_words({}); }
  /// The text with each field as word(name).
  std::string in_words(const FieldWords& word) const;
  /// The field names mentioned, in order of appearance.
  std::vector<std::string> fields() const;
  /// The text with its field_ref() marks, to embed in a longer message that stays marked.
  const std::string& marked() const { return marked_; }

 private:
  std::string marked_;
};

/// An sdk::Error whose message names request fields. what() shows each as `name` (backquoted).
class FieldError : public sdk::Error {
 public:
  /// `marked` is a message with field_ref() marks (as built by the job or a lower layer).
  FieldError(sdk::Errc code, const std::string& marked);
  /// The message, to be written in a front end's words.
  const FieldText& text() const { return text_; }
  /// text().in_words(word).
  std::string in_words(const FieldWords& word) const { return text_.in_words(word); }

 private:
  FieldText text_;  // one line already (sdk::Error's rule)
};

/// Whether `message` carries field_ref() marks.
bool has_field_refs(const std::string& message);

/// Calls `job`; an sdk::Error whose message carries field marks leaves as a FieldError with the
/// same code, any other exception unchanged. Every job's entry point runs through it.
template <class F>
auto rethrow_with_fields(F&& job) -> decltype(job()) {
  try {
    return job();
  } catch (const FieldError&) {
    throw;
  } catch (const sdk::Error& e) {
    if (has_field_refs(e.what())) {
      throw FieldError(e.code(), e.what());
    }
    throw;
  }
}

}  // namespace lithe::host
