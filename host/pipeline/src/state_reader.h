#pragma once
// Checked reads of Lithe's state files (search_state.cpp, auto_compress_state.cpp): every
// failure names the file, the JSON path, the rule and what was there. Internal to the pipeline
// area.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lithe/host/pipeline/resource_budget.h"
#include "lithe/sdk/error.h"

namespace lithe::host::detail {

using json = nlohmann::ordered_json;

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& rule,
                         const json& seen) const {
    std::string shown = seen.dump();
    if (shown.size() > 80) {
      shown = shown.substr(0, 77) + "...";
    }
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     source_ + ": " + path + ": " + rule + ", got " + shown);
  }
  const json& member(const json& object, const std::string& path, const std::string& key) const {
    if (!object.is_object()) {
      fail(path, "must be an object", object);
    }
    const auto it = object.find(key);
    if (it == object.end()) {
      fail(path, "has no \"" + key + "\"", json(nullptr));
    }
    return *it;
  }
  double number(const json& value, const std::string& path) const {
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      fail(path, "must be a finite number", value);
    }
    return value.get<double>();
  }
  double non_negative(const json& value, const std::string& path) const {
    const double v = number(value, path);
    if (v < 0) {
      fail(path, "must be >= 0", value);
    }
    return v;
  }
  int64_t count(const json& value, const std::string& path) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      fail(path, "must be an integer >= 0", value);
    }
    return value.get<int64_t>();
  }
  bool boolean(const json& value, const std::string& path) const {
    if (!value.is_boolean()) {
      fail(path, "must be true or false", value);
    }
    return value.get<bool>();
  }
  std::vector<double> numbers(const json& value, const std::string& path, size_t size,
                              double lo, double hi, bool hi_open) const {
    if (!value.is_array() || value.size() != size) {
      fail(path, "must be an array of " + std::to_string(size) + " numbers (one per layer)",
           value);
    }
    std::vector<double> out;
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string at = path + "/" + std::to_string(i);
      const double v = number(value[i], at);
      if (v < lo || v > hi || (hi_open && v == hi)) {
        char range[64];
        std::snprintf(range, sizeof range, "must be in [%g, %g%s", lo, hi, hi_open ? ")" : "]");
        fail(at, range, value[i]);
      }
      out.push_back(v);
    }
    return out;
  }

 private:
  std::string source_;
};

inline json use_json(const ResourceUse& use) {
  return {{"flops", use.flops},
          {"params", use.params},
          {"latency_ms", use.latency_ms},
          {"dense_latency_ms", use.dense_latency_ms}};
}

inline ResourceUse read_use(const Reader& r, const json& object, const std::string& path) {
  ResourceUse use;
  use.flops = r.count(r.member(object, path, "flops"), path + "/flops");
  use.params = r.count(r.member(object, path, "params"), path + "/params");
  use.latency_ms = r.non_negative(r.member(object, path, "latency_ms"), path + "/latency_ms");
  use.dense_latency_ms =
      r.non_negative(r.member(object, path, "dense_latency_ms"), path + "/dense_latency_ms");
  return use;
}

// The first key whose value differs between the two objects, as "/key", with both values.
inline std::string first_difference(const json& stored, const json& expected,
                                    std::string* was, std::string* now) {
  for (const auto& [key, value] : expected.items()) {
    const auto it = stored.find(key);
    if (it == stored.end() || *it != value) {
      *was = it == stored.end() ? "absent" : it->dump();
      *now = value.dump();
      return "/" + key;
    }
  }
  for (const auto& [key, value] : stored.items()) {
    if (expected.find(key) == expected.end()) {
      *was = value.dump();
      *now = "absent";
      return "/" + key;
    }
  }
  return "";
}

/// sdk::Error(kInvalidConfig) naming `source`, the first key of /search that differs from
/// `expected` and both values.
inline void check_fingerprint(const json& stored, const json& expected,
                              const std::string& source) {
  std::string was;
  std::string now;
  const std::string differs = first_difference(stored, expected, &was, &now);
  LITHE_CHECK(differs.empty(), sdk::Errc::kInvalidConfig, source,
              ": was written by another search: /search", differs, " is ", was, " there and ",
              now, " now (give the same options and model to resume, or another --state)");
}

/// The header every Lithe state file starts with: "format" (`format`; `what` says what else the
/// file would be), "version" (`version`) and the fingerprint "search", which must equal
/// `expected` (check_fingerprint).
inline void check_state_header(const Reader& r, const json& doc, const std::string& format,
                               int version, const std::string& what, const json& expected,
                               const std::string& source) {
  const json& stored_format = r.member(doc, "", "format");
  if (stored_format != format) {
    r.fail("/format", "must be \"" + format + "\" (" + what + ")", stored_format);
  }
  const json& stored_version = r.member(doc, "", "version");
  if (stored_version != version) {
    r.fail("/version", "must be " + std::to_string(version) + " (written by another Lithe)",
           stored_version);
  }
  const json& search = r.member(doc, "", "search");
  if (!search.is_object()) {
    r.fail("/search", "must be an object", search);
  }
  check_fingerprint(search, expected, source);
}

}  // namespace lithe::host::detail
