#include "search_auto_compress.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lithe/host/io/file_io.h"
#include "lithe/host/model/model.h"
#include "lithe/host/pipeline/auto_compress_state.h"
#include "lithe/host/pipeline/search_state.h"
#include "lithe/sdk/error.h"

namespace lithe::cli {
using json = nlohmann::ordered_json;

std::string auto_compress_round_model_path(const std::string& state_path, int64_t round) {
  return state_path + ".round-" + std::to_string(round) + ".pt";
}

std::vector<host::NamedPath> auto_compress_round_outputs(const std::string& state_path,
                                                         int64_t rounds) {
  std::vector<host::NamedPath> out;
  for (int64_t r = 1; r <= rounds; ++r) {
    out.push_back({"--state (round " + std::to_string(r) + " model)",
                   auto_compress_round_model_path(state_path, r)});
  }
  return out;
}

host::AutoCompressResult run_search_auto_compress(const torch::jit::Module& dense,
                                                  const host::PluginRegistry& registry,
                                                  const host::AutoCompressOptions& options,
                                                  const host::SearchData& data,
                                                  const std::string& state_path,
                                                  const json& fingerprint) {
  std::optional<host::AutoCompressResume> resumed;
  std::vector<std::string> digests;
  std::error_code ec;
  if (std::filesystem::exists(state_path, ec)) {
    host::AutoCompressState state =
        host::read_auto_compress_state(host::read_file(state_path), state_path, fingerprint);
    if (!state.resume.rounds.empty()) {
      const int64_t last = static_cast<int64_t>(state.resume.rounds.size());
      const std::string path = auto_compress_round_model_path(state_path, last);
      const std::string digest = host::content_digest(host::read_file(path));
      LITHE_CHECK(digest == state.model_digests.back(), sdk::Errc::kInvalidConfig, path,
                  ": the model of round ", last, " has digest ", digest, ", but ", state_path,
                  " recorded ", state.model_digests.back(),
                  " (the file was changed; remove the state to start over)");
      state.resume.model = host::load_torchscript_module(path);
    }
    std::fprintf(stderr, "search: resuming auto_compress from %s: %zu of %lld rounds done%s\n",
                 state_path.c_str(), state.resume.rounds.size(),
                 static_cast<long long>(options.rounds),
                 state.resume.in_flight
                     ? (", " + std::to_string(state.resume.in_flight->trials.size()) +
                        " trials of the next")
                           .c_str()
                     : "");
    digests = state.model_digests;
    resumed = std::move(state.resume);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto on_progress = [&](const host::AutoCompressResult& so_far,
                               const host::SearchResult* in_flight) {
    const size_t round = so_far.rounds.size() + (in_flight != nullptr ? 1 : 0);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (in_flight == nullptr) {  // a round just finished: keep its model, then the state
      const std::string bytes = host::make_torchscript_model(so_far.model)->serialize();
      host::write_file_atomic(
          auto_compress_round_model_path(state_path, static_cast<int64_t>(round)), bytes);
      digests.push_back(host::content_digest(bytes));
      host::write_file_atomic(state_path, host::auto_compress_state_json(so_far, nullptr,
                                                                         digests, fingerprint));
      const host::AutoCompressRound& done = so_far.rounds.back();
      std::fprintf(stderr,
                   "search: round %zu/%lld done (trained, sped up): FLOPs %.4fx, params %.4fx, "
                   "latency %.4fx of the dense model, accuracy %.4f | %.0fs\n",
                   round, static_cast<long long>(options.rounds),
                   done.use.ratio(host::ResourceKind::kFlops, so_far.dense),
                   done.use.ratio(host::ResourceKind::kParams, so_far.dense),
                   done.use.ratio(host::ResourceKind::kLatency, so_far.dense), done.accuracy,
                   elapsed);
      return;
    }
    host::write_file_atomic(state_path, host::auto_compress_state_json(so_far, in_flight,
                                                                       digests, fingerprint));
    if (in_flight->trials.empty()) {
      std::fprintf(stderr, "search: round %zu/%lld searches %lld trials for %s\n", round,
                   static_cast<long long>(options.rounds),
                   static_cast<long long>(options.search.trials),
                   host::auto_compress_round_budget(options.search.budget, so_far.dense,
                                                    static_cast<int64_t>(round), options.rounds)
                       .describe()
                       .c_str());
      return;
    }
    const host::SearchTrial& t = in_flight->trials.back();
    std::fprintf(stderr, "search: round %zu/%lld [%zu/%lld] trial %lld (%s) accuracy %s%s\n",
                 round, static_cast<long long>(options.rounds), in_flight->trials.size(),
                 static_cast<long long>(options.search.trials), static_cast<long long>(t.index),
                 t.origin.c_str(),
                 t.accuracy ? std::to_string(*t.accuracy).substr(0, 6).c_str() : "-",
                 t.feasible ? "" : " (over budget)");
  };
  return host::run_auto_compress(dense, registry, options, data, resumed ? &*resumed : nullptr,
                                 on_progress);
}

}  // namespace lithe::cli
