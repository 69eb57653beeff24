// The state file of `lithe search`: what is written reads back to the same trials, a state of
// another search is refused naming the option that differs, and malformed files are refused
// naming the JSON path, the rule and the value.
#include "lithe/host/pipeline/search_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

SearchResult sample() {
  SearchResult r;
  r.layers = {"conv1", "conv2"};
  r.dense.flops = 281640;
  r.dense.params = 44426;
  r.dense.latency_ms = 0.1234567890123;
  r.dense.dense_latency_ms = 0.1234567890123;
  r.dense_accuracy = 0.8123;
  SearchTrial a;
  a.index = 0;
  a.origin = "uniform";
  a.direction = {1, 1};
  a.scale = 0.45703125;
  a.sparsities = {0.457031, 0.457031};
  a.feasible = true;
  a.use = {140000, 30000, 0.07, 0.11};
  a.accuracy = 0.1 + 0.2;  // not a short decimal: must come back bit for bit
  a.seconds = 1.5;
  SearchTrial b = a;
  b.index = 1;
  b.origin = "annealing";
  b.direction = {0.05, 1};
  b.feasible = false;
  b.accuracy.reset();
  r.trials = {a, b};
  return r;
}

nlohmann::ordered_json fingerprint(uint64_t seed) {
  SearchOptions o;
  o.algorithm = "l1_filter";
  o.seed = seed;
  o.latency.input_shape = {1, 1, 28, 28};
  return search_fingerprint(o, content_digest("model bytes"), "test data");
}

TEST(SearchStateTest, WrittenStateReadsBackTheSameTrials) {
  const SearchResult written = sample();
  const std::string text = search_state_json(written, fingerprint(3));
  const SearchResult read = read_search_state(text, "state.json", fingerprint(3));
  EXPECT_EQ(read.layers, written.layers);
  EXPECT_EQ(read.dense.flops, written.dense.flops);
  EXPECT_EQ(read.dense.latency_ms, written.dense.latency_ms);
  EXPECT_EQ(read.dense_accuracy, written.dense_accuracy);
  ASSERT_EQ(read.trials.size(), 2U);
  for (size_t i = 0; i < 2; ++i) {
    const SearchTrial& x = read.trials[i];
    const SearchTrial& y = written.trials[i];
    EXPECT_EQ(x.origin, y.origin);
    EXPECT_EQ(x.algorithm, y.algorithm);
    EXPECT_EQ(x.direction, y.direction);
    EXPECT_EQ(x.scale, y.scale);
    EXPECT_EQ(x.sparsities, y.sparsities);
    EXPECT_EQ(x.feasible, y.feasible);
    EXPECT_EQ(x.use.flops, y.use.flops);
    EXPECT_EQ(x.use.latency_ms, y.use.latency_ms);
    EXPECT_EQ(x.accuracy, y.accuracy);
  }
  EXPECT_EQ(search_state_json(read, fingerprint(3)), text);  // and writes the same bytes
}

// A search with alternative pruners records each trial's; one the search does not name is
// refused with its path; the alternatives are part of the fingerprint.
TEST(SearchStateTest, EachTrialsPrunerIsRecordedAndMustBeOneOfTheSearchs) {
  SearchOptions o;
  o.algorithm = "l1_filter";
  o.alternatives = {"l2_filter"};
  o.latency.input_shape = {1, 1, 28, 28};
  const nlohmann::ordered_json print = search_fingerprint(o, content_digest("m"), "d");
  SearchResult written = sample();
  written.trials[0].algorithm = "l1_filter";
  written.trials[1].algorithm = "l2_filter";
  const std::string text = search_state_json(written, print);
  const SearchResult read = read_search_state(text, "s.json", print);
  EXPECT_EQ(read.trials[1].algorithm, "l2_filter");
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text);
  doc["trials"][1]["algorithm"] = "fpgm";
  EXPECT_THAT([&] { (void)read_search_state(doc.dump(), "s.json", print); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "s.json: /trials/1/algorithm: must be the search's pruner or one of its "
                  "alternatives, got \"fpgm\"")));
  o.alternatives = {"fpgm"};
  EXPECT_THAT([&] {
    (void)read_search_state(text, "s.json", search_fingerprint(o, content_digest("m"), "d"));
  }, ThrowsMessage<sdk::Error>(HasSubstr("/search/alternatives is [\"l2_filter\"] there and "
                                         "[\"fpgm\"] now")));
}

TEST(SearchStateTest, AnotherSearchsStateIsRefusedNamingTheOption) {
  const std::string text = search_state_json(sample(), fingerprint(3));
  EXPECT_THAT([&] { (void)read_search_state(text, "s.json", fingerprint(4)); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "s.json: was written by another search: /search/seed is 3 there and 4 now")));
  // A search with the fill does not resume trials made without it.
  SearchOptions plain;
  plain.fill_budget = false;
  const std::string unfilled =
      search_state_json(sample(), search_fingerprint(plain, content_digest("m"), "d"));
  EXPECT_THAT([&] {
    (void)read_search_state(unfilled, "s.json",
                            search_fingerprint(SearchOptions(), content_digest("m"), "d"));
  }, ThrowsMessage<sdk::Error>(HasSubstr("fill_budget")));
  EXPECT_EQ(content_digest(""), "cbf29ce484222325");  // FNV-1a 64's offset basis
  EXPECT_NE(content_digest("a"), content_digest("b"));
}

TEST(SearchStateTest, MalformedStatesAreRefusedWithThePathAndTheValue) {
  const nlohmann::ordered_json good =
      nlohmann::ordered_json::parse(search_state_json(sample(), fingerprint(3)));
  const auto error = [](const nlohmann::ordered_json& doc) {
    try {
      (void)read_search_state(doc.dump(), "s.json", fingerprint(3));
    } catch (const sdk::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto doc = good;
  doc["format"] = "other";
  EXPECT_THAT(error(doc), HasSubstr("s.json: /format: must be \"lithe-search-state\""));
  doc = good;
  doc["version"] = 9;
  EXPECT_THAT(error(doc), HasSubstr("/version: must be 1 (written by another Lithe), got 9"));
  doc = good;
  doc["trials"][1]["index"] = 5;
  EXPECT_THAT(error(doc), HasSubstr("/trials/1/index: must be 1 (trials in order), got 5"));
  doc = good;
  doc["trials"][0]["sparsities"] = {0.5};
  EXPECT_THAT(error(doc), HasSubstr("/trials/0/sparsities: must be an array of 2 numbers"));
  doc = good;
  doc["trials"][0]["sparsities"][1] = 1.0;
  EXPECT_THAT(error(doc), HasSubstr("/trials/0/sparsities/1: must be in [0, 1), got 1.0"));
  doc = good;
  doc["trials"][0]["direction"][0] = 0.0;
  EXPECT_THAT(error(doc), HasSubstr("/trials/0/direction/0: must be in [0.05, 1], got 0.0"));
  doc = good;
  doc["trials"][0]["accuracy"] = nullptr;
  EXPECT_THAT(error(doc), HasSubstr("/trials/0/accuracy: must be a number for a feasible trial"));
  doc = good;
  doc["trials"][1]["accuracy"] = 0.5;
  EXPECT_THAT(error(doc),
              HasSubstr("/trials/1/accuracy: must be null for an infeasible annealing trial"));
  doc["trials"][1]["origin"] = "netadapt";  // NetAdapt scores candidates above the budget
  EXPECT_THAT(error(doc), HasSubstr("/trials/1/direction: must be [] for a netadapt trial"));
  doc["trials"][1]["direction"] = nlohmann::ordered_json::array();
  EXPECT_EQ(error(doc), "no error");
  doc = good;
  doc["trials"][0]["use"]["flops"] = "many";
  EXPECT_THAT(error(doc), HasSubstr("/trials/0/use/flops: must be an integer >= 0, got \"many\""));
  doc = good;
  doc["trials"][1]["origin"] = "guess";
  EXPECT_THAT(error(doc), HasSubstr("/trials/1/origin: must be \"uniform\", \"sensitivity\", \"random\","));
  doc = good;
  doc["dense"].erase("accuracy");
  EXPECT_THAT(error(doc), HasSubstr("/dense: has no \"accuracy\""));
  doc = good;
  doc["layers"] = nlohmann::ordered_json::array();
  EXPECT_THAT(error(doc), HasSubstr("/layers: must be a non-empty array"));
  EXPECT_THAT([] { (void)read_search_state("{\"format\": ", "s.json", fingerprint(3)); },
              ThrowsMessage<sdk::Error>(HasSubstr("s.json")));
}

}  // namespace
}  // namespace lithe::host
