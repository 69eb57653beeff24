// The `lithe compress` config file: {"algorithm": name, "config_list": [...], "options": {...}},
// parsed once into CompressionConfig's typed form.
#include "lithe/host/session/compression_config.h"

#include <nlohmann/json.hpp>

#include "config_entries.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/io/json_document.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;

void set_options(CompressionConfig& config, const json& options) {
  LITHE_CHECK(options.is_object(), sdk::Errc::kInvalidConfig, config.source,
              ": /options must be an object, got ", sdk::printable(options.dump(), 120));
  config.options = sdk::options_from_json(options, "/options");
}

void check_algorithm(const CompressionConfig& config) {
  LITHE_CHECK(!config.algorithm.empty() && config.algorithm.size() <= 128 &&
                  config.algorithm.find_first_of(std::string("\0/\\", 3)) == std::string::npos,
              sdk::Errc::kInvalidConfig, config.source,
              ": /algorithm must be an algorithm name (1 to 128 characters, no '/'), got \"",
              sdk::printable(config.algorithm, 60), "\"");
}

}  // namespace

CompressionConfig parse_compression_config(const std::string& json_text,
                                           const std::string& source) {
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
  check_algorithm(config);
  LITHE_CHECK(document.contains("config_list"), sdk::Errc::kInvalidConfig, source,
              ": missing required key /config_list");
  try {
    config.config_list = detail::parse_config_entries(document["config_list"], "/config_list");
  } catch (const sdk::Error& e) {
    throw sdk::Error(e.code(), source + ": " + e.what());  // the entries' messages name the path
  }
  set_options(config, document.contains("options") ? document["options"] : json::object());
  return config;
}

CompressionConfig read_compression_config(const std::string& file) {
  return parse_compression_config(read_file(file), file);
}

CompressionConfig make_compression_config(const std::string& algorithm,
                                          const std::string& config_list_json,
                                          const std::string& options_json,
                                          const std::string& source) {
  CompressionConfig config;
  config.algorithm = algorithm;
  config.source = source;
  check_algorithm(config);
  config.config_list = detail::parse_config_entries(
      parse_json_document(config_list_json, source + " /config_list"), "/config_list");
  set_options(config, options_json.empty()
                          ? json::object()
                          : parse_json_document(options_json, source + " /options"));
  return config;
}

CompressionConfig parsed_compression_config(const CompressionConfig& config) {
  if (!config.config_list.empty()) {
    return config;
  }
  LITHE_CHECK(!config.config_list_json.empty(), sdk::Errc::kInvalidConfig,
              config.source.empty() ? "<memory>" : config.source,
              ": the config has no config_list (fill it with parse_compression_config or "
              "make_compression_config)");
  return make_compression_config(config.algorithm, config.config_list_json, config.options_json,
                                 config.source.empty() ? "<memory>" : config.source);
}

}  // namespace lithe::host
