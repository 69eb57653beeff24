// The `lithe compress` config file: {"algorithm": name, "config_list": [...], "options": {...}}.
#include <nlohmann/json.hpp>

#include "lithe/host/compressor.h"
#include "lithe/host/export.h"
#include "lithe/sdk/error.h"

namespace lithe::host {

CompressionConfig parse_compression_config(const std::string& json_text,
                                           const std::string& source) {
  using json = nlohmann::ordered_json;
  json document;
  try {
    document = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw sdk::Error(sdk::Errc::kInvalidConfig, source + ": not valid JSON: " + e.what());
  }
  LITHE_CHECK(document.is_object(), sdk::Errc::kInvalidConfig, source,
              ": the config must be a JSON object with keys algorithm, config_list, options; got ",
              document.dump().substr(0, 200));
  for (const auto& item : document.items()) {
    const std::string& key = item.key();
    LITHE_CHECK(key == "algorithm" || key == "config_list" || key == "options",
                sdk::Errc::kInvalidConfig, source, ": /", key,
                " is not a known key (expected algorithm, config_list, options)");
  }
  CompressionConfig config;
  config.source = source;
  LITHE_CHECK(document.contains("algorithm"), sdk::Errc::kInvalidConfig, source,
              ": missing required key /algorithm (e.g. \"level\")");
  LITHE_CHECK(document["algorithm"].is_string(), sdk::Errc::kInvalidConfig, source,
              ": /algorithm must be a string, got ", document["algorithm"].dump());
  config.algorithm = document["algorithm"].get<std::string>();
  LITHE_CHECK(document.contains("config_list"), sdk::Errc::kInvalidConfig, source,
              ": missing required key /config_list");
  config.config_list_json = document["config_list"].dump();
  if (document.contains("options")) {
    LITHE_CHECK(document["options"].is_object(), sdk::Errc::kInvalidConfig, source,
                ": /options must be an object, got ", document["options"].dump());
    config.options_json = document["options"].dump();
  } else {
    config.options_json = "{}";
  }
  return config;
}

CompressionConfig read_compression_config(const std::string& file) {
  return parse_compression_config(read_file(file), file);
}

}  // namespace lithe::host
