#pragma once
/// \file
/// Reading JSON that came from a user or the network: configs, calibration files, case files.
/// nlohmann::json's own parser accepts any nesting depth and keeps the last of two equal keys;
/// Lithe's documents are shallow and a repeated key is always a mistake, so both are refused
/// while parsing, and every error names the source, the JSON Pointer and the value seen.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace lithe::host {

/// How deep objects and arrays may nest in a document Lithe reads. Configs need about 4 levels;
/// the bound keeps every later recursive walk (dump, comparison, destruction) shallow.
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text`; `source` (a file name) starts every error message. Throws
/// sdk::Error(kInvalidConfig) for invalid JSON (with the JSON Pointer of the value being read
/// and the byte offset), a number out of range, nesting deeper than `max_depth` and a key that
/// appears twice in one object. The check runs during parsing: depth never grows past the
/// limit, whatever the input.
nlohmann::ordered_json parse_json_document(const std::string& text, const std::string& source,
                                           int max_depth = kMaxJsonDepth);

/// read_file + parse_json_document, with the path as the source.
nlohmann::ordered_json read_json_document(const std::filesystem::path& path,
                                          int max_depth = kMaxJsonDepth);

}  // namespace lithe::host
