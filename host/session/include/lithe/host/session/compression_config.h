#pragma once
/// \file
/// A compression config ({"algorithm", "config_list", "options"}) parsed and checked once, into
/// the typed form every session and the pipeline take.

#include <string>
#include <vector>

#include "lithe/sdk/options.h"

namespace lithe::host {

/// One entry of config_list as parsed (before it is matched against a model's modules).
struct ConfigEntry {
  sdk::Options options;                 ///< the entry (path "/config_list/<i>"), 'default' expanded
  std::vector<std::string> op_types;    ///< empty = key absent
  bool has_op_types = false;
  bool op_types_default = false;        ///< op_types contained "default"
  std::vector<std::string> op_names;
  bool has_op_names = false;
  bool exclude = false;
};

/// What `lithe compress` reads: {"algorithm": name, "config_list": [...], "options": {...}}.
///
/// parse_compression_config() and read_compression_config() fill `algorithm`, `source`,
/// `config_list` and `options`; sessions read those and parse nothing. Sessions and the
/// pipeline treat their config as read-only and copy what plugins will read, so one config
/// can serve several sessions.
struct CompressionConfig {
  std::string algorithm;
  /// Deprecated since 1.4 (removed in 2.0): JSON text of the list, for configs built by hand
  /// as in 1.3. Read only when `config_list` is empty; use make_compression_config() instead.
  std::string config_list_json;
  /// Deprecated since 1.4 (removed in 2.0): JSON text of the options, read with
  /// `config_list_json`.
  std::string options_json;
  std::string source;  ///< where it came from, for messages (file name or "<memory>")
  /// The entries of config_list, in order (never empty once parsed).
  std::vector<ConfigEntry> config_list{};
  /// The "options" object (path "/options"); an empty object when the file has none.
  sdk::Options options{};
};

/// Parses the JSON text of a whole config file; unknown top-level keys are errors, and so is
/// every entry of config_list that is not an object with op_types and/or op_names (lists of
/// strings) and an optional boolean `exclude`. Throws sdk::Error(kInvalidConfig) naming
/// `source`, the JSON path, the rule and the value seen.
CompressionConfig parse_compression_config(const std::string& json_text, const std::string& source);
/// Reads and parses a config file (sdk::Error(kIo) naming the file when unreadable).
CompressionConfig read_compression_config(const std::string& file);
/// A config from its parts given as JSON text (`options_json` empty: no options), checked as
/// parse_compression_config() checks a file.
CompressionConfig make_compression_config(const std::string& algorithm,
                                          const std::string& config_list_json,
                                          const std::string& options_json = "{}",
                                          const std::string& source = "<memory>");
/// `config` with `config_list` and `options` filled: itself when it was parsed, else the
/// deprecated text fields parsed (a 1.3-style config built by hand). Throws like
/// make_compression_config().
CompressionConfig parsed_compression_config(const CompressionConfig& config);

}  // namespace lithe::host
