#pragma once
// Parsing config_list entries from JSON (the model-independent half of NNI's config_list
// rules; matching them against a model's modules is resolve_config_list). Internal to the
// session area: nlohmann::json stays out of the public headers.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lithe/host/session/compression_config.h"

namespace lithe::host::detail {

/// The entries of `list` (JSON Pointer `path`, e.g. "/config_list"): a non-empty list of
/// objects, each with op_types and/or op_names (lists of strings; "default" in op_types
/// expanded in place to NNI's weighted module types) and an optional boolean `exclude`.
/// Throws sdk::Error(kInvalidConfig) with the path, the rule and the value seen.
std::vector<ConfigEntry> parse_config_entries(const nlohmann::ordered_json& list,
                                              const std::string& path);

}  // namespace lithe::host::detail
