// config_list resolution, following NNI v2.0's Compressor.select_config (reference §1.1) with
// Lithe's departure 2: `exclude` is a boolean honoured by value, and selecting a module that
// has no weight is a config error naming it instead of a crash later.
#include "lithe/host/session/config_list.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "lithe/sdk/error.h"
#include "lithe/sdk/log.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;

std::vector<std::string> string_list(const json& entry, const std::string& key,
                                     const std::string& path) {
  const std::string where = sdk::json_pointer_append(path, key);
  const json& value = entry.at(key);
  LITHE_CHECK(value.is_array(), sdk::Errc::kInvalidConfig, where,
              " must be a list of strings, got ", value.dump());
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i) {
    LITHE_CHECK(value[i].is_string(), sdk::Errc::kInvalidConfig, where, "/", i,
                " must be a string, got ", value[i].dump());
    out.push_back(value[i].get<std::string>());
  }
  return out;
}

bool contains(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

const std::vector<std::string>& default_op_types() {
  static const std::vector<std::string> types = {
      "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
      "Linear", "Bilinear", "PReLU", "Embedding", "EmbeddingBag"};
  return types;
}

ResolvedConfig resolve_config_list(const std::string& config_list_json, const std::string& path,
                                   const Model& model,
                                   const std::function<bool(const ConfigEntry&)>& needs_weight,
                                   const std::string& what_needs_weight) {
  json list;
  try {
    list = json::parse(config_list_json);
  } catch (const json::parse_error& e) {
    throw sdk::Error(sdk::Errc::kInvalidConfig, path + " is not valid JSON: " + e.what());
  }
  LITHE_CHECK(list.is_array(), sdk::Errc::kInvalidConfig, path, " must be a list of objects, got ",
              list.dump());
  LITHE_CHECK(!list.empty(), sdk::Errc::kInvalidConfig, path,
              " is empty; it needs at least one entry with op_types or op_names");

  std::set<std::string> model_types;
  std::set<std::string> model_names;
  for (const ModuleRecord& record : model.modules()) {
    model_types.insert(record.op_type);
    model_names.insert(record.name);
  }

  ResolvedConfig resolved;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string entry_path = path + "/" + std::to_string(i);
    json entry = list[i];
    LITHE_CHECK(entry.is_object(), sdk::Errc::kInvalidConfig, entry_path,
                " must be an object, got ", entry.dump());
    ConfigEntry parsed;
    if (entry.contains("op_types")) {
      parsed.has_op_types = true;
      for (const std::string& type : string_list(entry, "op_types", entry_path)) {
        if (type == "default") {
          // NNI replaces 'default' in place by the weighted module types, keeping order.
          const auto& defaults = default_op_types();
          parsed.op_types.insert(parsed.op_types.end(), defaults.begin(), defaults.end());
        } else {
          parsed.op_types.push_back(type);
          if (model_types.count(type) == 0) {
            LITHE_LOG(kWarn, entry_path, "/op_types: the model has no module of type '", type,
                      "'");
          }
        }
      }
      entry["op_types"] = parsed.op_types;
    }
    if (entry.contains("op_names")) {
      parsed.has_op_names = true;
      parsed.op_names = string_list(entry, "op_names", entry_path);
      for (size_t n = 0; n < parsed.op_names.size(); ++n) {
        LITHE_CHECK(model_names.count(parsed.op_names[n]) != 0, sdk::Errc::kInvalidConfig,
                    entry_path, "/op_names/", n, ": the model has no module named '",
                    parsed.op_names[n], "' (see `lithe inspect` for the names)");
      }
    }
    LITHE_CHECK(parsed.has_op_types || parsed.has_op_names, sdk::Errc::kInvalidConfig, entry_path,
                " must contain op_types or op_names, got ", list[i].dump());
    if (entry.contains("exclude")) {
      LITHE_CHECK(entry["exclude"].is_boolean(), sdk::Errc::kInvalidConfig, entry_path,
                  "/exclude must be true or false, got ", entry["exclude"].dump());
      parsed.exclude = entry["exclude"].get<bool>();
    }
    parsed.options = sdk::options_from_json(entry, entry_path);
    parsed.options.mark_read("op_types");
    parsed.options.mark_read("op_names");
    parsed.options.mark_read("exclude");
    resolved.entries.push_back(std::move(parsed));
  }

  const auto& modules = model.modules();
  for (size_t m = 0; m < modules.size(); ++m) {
    const ModuleRecord& record = modules[m];
    std::optional<size_t> chosen;
    for (size_t e = 0; e < resolved.entries.size(); ++e) {
      const ConfigEntry& entry = resolved.entries[e];
      if (entry.has_op_types && !contains(entry.op_types, record.op_type)) {
        continue;
      }
      if (entry.has_op_names && !contains(entry.op_names, record.name)) {
        continue;
      }
      chosen = e;  // the last match wins as a whole
    }
    if (!chosen.has_value() || resolved.entries[*chosen].exclude) {
      continue;
    }
    const bool weight_required = !needs_weight || needs_weight(resolved.entries[*chosen]);
    LITHE_CHECK(record.weight.has_value() || !weight_required,
                sdk::Errc::kInvalidConfig, path, "/", *chosen, " selects module '", record.name,
                "' (", record.op_type, "), which has no weight tensor to ",
                what_needs_weight, "; restrict the entry with op_types");
    resolved.layers.push_back({m, *chosen});
  }
  return resolved;
}

}  // namespace lithe::host
