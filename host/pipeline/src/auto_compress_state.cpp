#include "lithe/host/pipeline/auto_compress_state.h"

#include <string>
#include <utility>

#include "lithe/host/io/json_document.h"
#include "lithe/host/pipeline/search_state.h"
#include "lithe/sdk/error.h"
#include "state_reader.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;
using detail::read_use;
using detail::Reader;
using detail::use_json;

constexpr const char* kAutoCompressStateFormat = "lithe-auto-compress-state";
constexpr int kAutoCompressStateVersion = 1;

// A round's search is a search state of its own, its fingerprint the whole run's and the round.
json round_fingerprint(const json& fingerprint, size_t round) {
  json out = fingerprint;
  out["round"] = round;
  return out;
}

json search_object(const SearchResult& search, const json& fingerprint, size_t round) {
  return json::parse(search_state_json(search, round_fingerprint(fingerprint, round)));
}

SearchResult read_search_object(const json& object, const std::string& source,
                                const std::string& path, const json& expected, size_t round) {
  return read_search_state(object.dump(), source + " " + path,
                           round_fingerprint(expected, round));
}

}  // namespace

json auto_compress_fingerprint(const AutoCompressOptions& options,
                               const std::string& model_digest,
                               const std::string& data_description) {
  json fingerprint = search_fingerprint(options.search, model_digest, data_description);
  fingerprint["rounds"] = options.rounds;
  fingerprint["round_algorithm"] = options.round_algorithm;
  fingerprint["round_options"] = options.round_options_json;
  // The rounds train whatever the trial options say: the training options always decide.
  const TrainOptions& t = options.search.train;
  fingerprint["train"] = {{"batch_size", t.batch_size}, {"optimizer", t.optimizer},
                          {"lr", t.lr},                 {"momentum", t.momentum},
                          {"weight_decay", t.weight_decay}, {"lr_step", t.lr_step},
                          {"lr_gamma", t.lr_gamma},     {"seed", t.seed}};
  return fingerprint;
}

std::string auto_compress_state_json(const AutoCompressResult& result,
                                     const SearchResult* in_flight,
                                     const std::vector<std::string>& model_digests,
                                     const json& fingerprint) {
  LITHE_CHECK(model_digests.size() == result.rounds.size(), sdk::Errc::kInternal,
              "one model digest per finished round: ", model_digests.size(), " for ",
              result.rounds.size());
  json out;
  out["format"] = kAutoCompressStateFormat;
  out["version"] = kAutoCompressStateVersion;
  out["search"] = fingerprint;
  out["dense"] = use_json(result.dense);
  out["dense"]["accuracy"] = result.dense_accuracy;
  out["rounds"] = json::array();
  for (size_t i = 0; i < result.rounds.size(); ++i) {
    const AutoCompressRound& round = result.rounds[i];
    out["rounds"].push_back({{"search", search_object(round.search, fingerprint, i + 1)},
                             {"best", round.search.best.value_or(-1)},
                             {"use", use_json(round.use)},
                             {"accuracy", round.accuracy},
                             {"model_digest", model_digests[i]}});
  }
  out["in_flight"] = in_flight != nullptr
                         ? search_object(*in_flight, fingerprint, result.rounds.size() + 1)
                         : json(nullptr);
  return out.dump(1) + "\n";
}

AutoCompressState read_auto_compress_state(const std::string& text, const std::string& source,
                                           const json& expected) {
  const json doc = parse_json_document(text, source);
  const Reader r(source);
  detail::check_state_header(r, doc, kAutoCompressStateFormat, kAutoCompressStateVersion,
                             "not a state of --strategy auto_compress", expected, source);
  AutoCompressState state;
  const json& dense = r.member(doc, "", "dense");
  state.resume.dense = read_use(r, dense, "/dense");
  state.resume.dense_accuracy =
      r.number(r.member(dense, "/dense", "accuracy"), "/dense/accuracy");
  const json& rounds = r.member(doc, "", "rounds");
  if (!rounds.is_array() || rounds.size() > expected.value("rounds", size_t{0})) {
    r.fail("/rounds", "must be an array of at most " + expected["rounds"].dump() + " rounds",
           rounds);
  }
  for (size_t i = 0; i < rounds.size(); ++i) {
    const std::string path = "/rounds/" + std::to_string(i);
    const json& round = rounds[i];
    AutoCompressRound done;
    done.search = read_search_object(r.member(round, path, "search"), source, path + "/search",
                                      expected, i + 1);
    const json& best = r.member(round, path, "best");
    const int64_t index = r.count(best, path + "/best");
    if (index >= static_cast<int64_t>(done.search.trials.size()) ||
        !done.search.trials[index].feasible) {
      r.fail(path + "/best", "must be the index of a feasible trial of the round's search",
             best);
    }
    done.search.best = index;
    done.sparsities = done.search.trials[index].sparsities;
    done.use = read_use(r, r.member(round, path, "use"), path + "/use");
    done.accuracy = r.number(r.member(round, path, "accuracy"), path + "/accuracy");
    const json& digest = r.member(round, path, "model_digest");
    if (!digest.is_string() || digest.get<std::string>().size() != 16) {
      r.fail(path + "/model_digest", "must be a 16-digit model digest", digest);
    }
    state.model_digests.push_back(digest.get<std::string>());
    state.resume.rounds.push_back(std::move(done));
  }
  const json& in_flight = r.member(doc, "", "in_flight");
  if (!in_flight.is_null()) {
    state.resume.in_flight =
        read_search_object(in_flight, source, "/in_flight", expected, rounds.size() + 1);
  }
  return state;
}

}  // namespace lithe::host
