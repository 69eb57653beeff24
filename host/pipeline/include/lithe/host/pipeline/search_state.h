#pragma once
/// \file
/// The state file of `lithe search`: the options that decide the trials (the fingerprint), the
/// dense model's measurements and every finished trial, rewritten atomically after each one.
/// A search started again with the same fingerprint continues after the last finished trial
/// (a kill loses at most the trial in flight); another fingerprint is refused, naming the
/// first option that differs.

#include <string>

#include <nlohmann/json.hpp>

#include "lithe/host/pipeline/budget_search.h"

namespace lithe::host {

/// Everything that decides a search's trials: the options (not the trial count, which may grow
/// on resume, nor the thread count), the model's digest and a description of the test data.
nlohmann::ordered_json search_fingerprint(const SearchOptions& options,
                                          const std::string& model_digest,
                                          const std::string& data_description);

/// FNV-1a 64 of `bytes`, as 16 hex digits: the model's digest in the fingerprint.
std::string content_digest(const std::string& bytes);

/// The state file's text.
std::string search_state_json(const SearchResult& result,
                              const nlohmann::ordered_json& fingerprint);

/// Reads a state file's text (`source` names it in errors). sdk::Error(kInvalidConfig) naming
/// the source, the JSON path, the rule and the value for anything malformed (wrong types,
/// non-finite numbers, trials out of order, a direction or sparsity list whose length is not
/// the layer count, a sparsity outside [0, 1)), and for a fingerprint other than `expected`
/// (naming the first differing key and both values). best is recomputed by the search, not read.
SearchResult read_search_state(const std::string& text, const std::string& source,
                               const nlohmann::ordered_json& expected);

}  // namespace lithe::host
