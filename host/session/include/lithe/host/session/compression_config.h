#pragma once
/// \file
/// A compression config file ({"algorithm", "config_list", "options"}) read and checked once.

#include <string>

namespace lithe::host {

/// What `lithe compress` reads: {"algorithm": name, "config_list": [...], "options": {...}}.
struct CompressionConfig {
  std::string algorithm;
  std::string config_list_json;  ///< JSON text of the list
  std::string options_json;      ///< JSON text of the options object ("{}" when absent)
  std::string source;            ///< where it came from, for messages (file name or "<memory>")
};

/// Parses the JSON text of a whole config file; unknown top-level keys are errors.
CompressionConfig parse_compression_config(const std::string& json_text, const std::string& source);
/// Reads and parses a config file (sdk::Error(kIo) naming the file when unreadable).
CompressionConfig read_compression_config(const std::string& file);

}  // namespace lithe::host
