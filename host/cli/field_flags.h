#pragma once
// How the CLI writes the fields of a job's request: as the options that set them. A job's
// FieldError names request fields (`output`, `onnx_export.opset`); a verb runs its job through
// in_flags() with its own table, so its errors and notes name what the user typed (--output).

#include <map>
#include <string>

#include "lithe/host/io/field_error.h"
#include "lithe/sdk/error.h"

namespace lithe::cli {

/// Request field -> option text ("output" -> "--output").
using FlagWords = std::map<std::string, std::string>;

/// The words of `lithe compress` for CompressionRequest's fields.
const FlagWords& compress_flags();

/// `words` as a FieldWords function (fields it lacks keep their backquoted name).
host::FieldWords field_words(const FlagWords& words);

/// Runs `job`; its FieldError leaves as an sdk::Error with the same code in `words`.
template <class F>
auto in_flags(const FlagWords& words, F&& job) -> decltype(job()) {
  try {
    return job();
  } catch (const host::FieldError& e) {
    throw sdk::Error(e.code(), e.in_words(field_words(words)));
  }
}

}  // namespace lithe::cli
