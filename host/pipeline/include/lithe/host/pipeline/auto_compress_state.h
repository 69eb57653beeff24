#pragma once
/// \file
/// The state file of `lithe search --strategy auto_compress`: the fingerprint (the search's,
/// plus the rounds and the round pruner with its options), the dense model's measurements, every finished round
/// (its search's trials, the best one, the round's sparsities, use and accuracy, and the digest
/// of the model it left, which is kept beside the state file) and the trials of the round in
/// flight. Rewritten atomically after every trial and every round: a kill loses at most the
/// trial (or the ADMM training) in flight.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lithe/host/pipeline/auto_compress.h"

namespace lithe::host {

/// search_fingerprint of options.search plus "rounds", "round_algorithm", "round_options" and
/// the training options.
nlohmann::ordered_json auto_compress_fingerprint(const AutoCompressOptions& options,
                                                 const std::string& model_digest,
                                                 const std::string& data_description);

/// The state file's text; `model_digests` holds content_digest of the model each finished
/// round left (one per round).
std::string auto_compress_state_json(const AutoCompressResult& result,
                                     const SearchResult* in_flight,
                                     const std::vector<std::string>& model_digests,
                                     const nlohmann::ordered_json& fingerprint);

struct AutoCompressState {
  AutoCompressResume resume;               ///< without the model (the caller reads it)
  std::vector<std::string> model_digests;  ///< one per finished round
};

/// Reads a state file's text (`source` names it in errors): sdk::Error(kInvalidConfig) naming
/// the source, the JSON path, the rule and the value for anything malformed, and for a
/// fingerprint other than `expected`.
AutoCompressState read_auto_compress_state(const std::string& text, const std::string& source,
                                           const nlohmann::ordered_json& expected);

}  // namespace lithe::host
