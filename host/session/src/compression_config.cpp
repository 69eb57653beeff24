// The `lithe compress` config file: {"algorithm": name, "config_list": [...], "options": {...}}.
#include <nlohmann/json.hpp>

#include "lithe/host/session/compression_config.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/io/json_document.h"
#include "lithe/sdk_internal/options_json.h"
#include "lithe/sdk/error.h"

namespace lithe::host {

CompressionConfig parse_compression_config(const std::string& json_text,
                                           const std::string& source) {
  using json = nlohmann::ordered_json;
  // Bounded depth and unique keys, checked while parsing (untrusted input).
  const json document = parse_json_document(json_text, source);
  LITHE_CHECK(document.is_object(), sdk::Errc::kInvalidConfig, source,
              ": the config must be a JSON object with keys algorithm, config_list, options; got ",
              sdk::printable(document.dump(), 120));
  for (const auto& item : document.items()) {
    const std::string& key = item.key();
    LITHE_CHECK(key == "algorithm" || key == "config_list" || key == "options",
                sdk::Errc::kInvalidConfig, source, ": ", sdk::json_pointer_append("", sdk::printable(key, 60)),
                " is not a known key (expected algorithm, config_list, options)");
  }
  CompressionConfig config;
  config.source = source;
  LITHE_CHECK(document.contains("algorithm"), sdk::Errc::kInvalidConfig, source,
              ": missing required key /algorithm (e.g. \"level\")");
  LITHE_CHECK(document["algorithm"].is_string(), sdk::Errc::kInvalidConfig, source,
              ": /algorithm must be a string, got ", sdk::printable(document["algorithm"].dump(), 120));
  config.algorithm = document["algorithm"].get<std::string>();
  LITHE_CHECK(!config.algorithm.empty() && config.algorithm.size() <= 128 &&
                  config.algorithm.find_first_of(std::string("\0/\\", 3)) == std::string::npos,
              sdk::Errc::kInvalidConfig, source,
              ": /algorithm must be an algorithm name (1 to 128 characters, no '/'), got \"",
              sdk::printable(config.algorithm, 60), "\"");
  LITHE_CHECK(document.contains("config_list"), sdk::Errc::kInvalidConfig, source,
              ": missing required key /config_list");
  config.config_list_json = document["config_list"].dump();
  if (document.contains("options")) {
    LITHE_CHECK(document["options"].is_object(), sdk::Errc::kInvalidConfig, source,
                ": /options must be an object, got ", sdk::printable(document["options"].dump(), 120));
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
