#pragma once
// Host-side access to sdk::Options: building them from nlohmann::json and finding the keys no
// algorithm read. Not installed and never included by plugins (nlohmann::json's ABI depends on
// its configuration macros, so it stays out of the SDK's public headers).

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lithe/sdk/options.h"

namespace lithe::sdk {

struct Options::Impl {
  nlohmann::ordered_json value;  // always an object (document order kept)
  std::string path;      // JSON Pointer of `value` in the user's document ("" = root)
  std::vector<std::string> read_keys;
  std::vector<std::pair<std::string, std::shared_ptr<Impl>>> children;
};

/// Wraps `object` (must be a JSON object, else sdk::Error(kInvalidConfig) naming `path`).
LITHE_SDK_API Options options_from_json(const nlohmann::ordered_json& object, const std::string& path);

/// JSON Pointers of every key that was never read, recursively through child() objects.
LITHE_SDK_API std::vector<std::string> unread_option_paths(const Options& options);

/// The underlying JSON value.
LITHE_SDK_API const nlohmann::ordered_json& options_json(const Options& options);

/// `path` + "/" + key, escaped per RFC 6901 ("~" -> "~0", "/" -> "~1").
LITHE_SDK_API std::string json_pointer_append(const std::string& path, const std::string& key);

}  // namespace lithe::sdk
