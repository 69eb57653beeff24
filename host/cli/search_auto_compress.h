#pragma once
// `lithe search --strategy auto_compress`: AutoCompress rounds (search, ADMM, speedup) with the
// search's budget, state file and progress lines. The state file records every round and the
// trials of the round in flight; each finished round's model is kept beside it
// (STATE.round-N.pt) so that a restarted run continues from the last one.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/script.h>

#include "lithe/host/io/output_paths.h"
#include "lithe/host/pipeline/auto_compress.h"

namespace lithe::cli {

/// Where round `round` (1-based) keeps its model: STATE.round-N.pt.
std::string auto_compress_round_model_path(const std::string& state_path, int64_t round);

/// The round models' paths, for check_output_paths ("--state (round N model)").
std::vector<host::NamedPath> auto_compress_round_outputs(const std::string& state_path,
                                                         int64_t rounds);

/// Runs (or continues, when `state_path` exists) AutoCompress on `dense`, rewriting the state
/// after every trial and round and printing progress on stderr. sdk::Error naming the file for
/// a state of another run, or a round model whose digest is not the one the state recorded.
host::AutoCompressResult run_search_auto_compress(const torch::jit::Module& dense,
                                                  const host::PluginRegistry& registry,
                                                  const host::AutoCompressOptions& options,
                                                  const host::SearchData& data,
                                                  const std::string& state_path,
                                                  const nlohmann::ordered_json& fingerprint);

}  // namespace lithe::cli
