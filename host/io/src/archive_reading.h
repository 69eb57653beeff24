#pragma once
// What the archive checks share (zip directory, pickle scan, tensor extents): their error
// messages, names quoted as libtorch compares them, and bounds-checked little-endian reads.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "lithe/sdk/error.h"

namespace lithe::host::archive {

/// Builds the errors of one check: every message starts with "<what> '<source>'".
class Reporter {
 public:
  Reporter(const std::string& what, const std::string& source)
      : subject_(what + " '" + source + "'") {}

  /// "<what> '<source>': <problem>".
  [[noreturn]] void fail(const std::string& problem) const {
    throw sdk::Error(sdk::Errc::kInvalidModel, subject_ + ": " + problem);
  }

  /// "<what> '<source>' <statement>", for statements about the whole file.
  [[noreturn]] void fail_file(const std::string& statement) const {
    throw sdk::Error(sdk::Errc::kInvalidModel, subject_ + " " + statement);
  }

 private:
  std::string subject_;
};

inline std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

/// A name from the file, quoted for a message (control characters escaped, long names cut).
// libtorch finds records through miniz without MZ_ZIP_FLAG_CASE_SENSITIVE: "data.Pkl" is its
// "data.pkl". Names are compared the same way here.
inline std::string folded(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

inline std::string quote_name(std::string_view text) {
  return "'" + sdk::printable(std::string(text), 200) + "'";
}

/// True when [offset, offset + length) lies within [0, size), without overflow.
inline bool within(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

/// Little-endian reads from a range the caller has bounds-checked (a failure here is a bug in
/// the archive checks, not a bad archive).
inline uint64_t read_le(std::string_view bytes, uint64_t offset, unsigned width) {
  LITHE_INTERNAL_ASSERT(within(offset, width, bytes.size()));
  uint64_t value = 0;
  for (unsigned i = 0; i < width; ++i) {
    value |= uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  }
  return value;
}

}  // namespace lithe::host::archive
