// config_list resolution, following NNI v2.0's Compressor.select_config (reference §1.1) with
// Lithe's departure 2: `exclude` is a boolean honoured by value, and selecting a module that
// has no weight is a config error naming it instead of a crash later.
#include "lithe/host/session/config_list.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "config_entries.h"
#include "lithe/host/io/json_document.h"
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

namespace detail {

std::vector<ConfigEntry> parse_config_entries(const json& list, const std::string& path) {
  LITHE_CHECK(list.is_array(), sdk::Errc::kInvalidConfig, path, " must be a list of objects, got ",
              sdk::printable(list.dump(), 120));
  LITHE_CHECK(!list.empty(), sdk::Errc::kInvalidConfig, path,
              " is empty; it needs at least one entry with op_types or op_names");
  std::vector<ConfigEntry> entries;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string entry_path = path + "/" + std::to_string(i);
    json entry = list[i];
    LITHE_CHECK(entry.is_object(), sdk::Errc::kInvalidConfig, entry_path,
                " must be an object, got ", sdk::printable(entry.dump(), 120));
    ConfigEntry parsed;
    if (entry.contains("op_types")) {
      parsed.has_op_types = true;
      for (const std::string& type : string_list(entry, "op_types", entry_path)) {
        if (type == "default") {
          // NNI replaces 'default' in place by the weighted module types, keeping order.
          const auto& defaults = default_op_types();
          parsed.op_types_default = true;
          parsed.op_types.insert(parsed.op_types.end(), defaults.begin(), defaults.end());
        } else {
          parsed.op_types.push_back(type);
        }
      }
      entry["op_types"] = parsed.op_types;
    }
    if (entry.contains("op_names")) {
      parsed.has_op_names = true;
      parsed.op_names = string_list(entry, "op_names", entry_path);
    }
    LITHE_CHECK(parsed.has_op_types || parsed.has_op_names, sdk::Errc::kInvalidConfig, entry_path,
                " must contain op_types or op_names, got ", sdk::printable(list[i].dump(), 120));
    if (entry.contains("exclude")) {
      LITHE_CHECK(entry["exclude"].is_boolean(), sdk::Errc::kInvalidConfig, entry_path,
                  "/exclude must be true or false, got ", sdk::printable(entry["exclude"].dump(), 60));
      parsed.exclude = entry["exclude"].get<bool>();
    }
    parsed.options = sdk::options_from_json(entry, entry_path);
    parsed.options.mark_read("op_types");
    parsed.options.mark_read("op_names");
    parsed.options.mark_read("exclude");
    entries.push_back(std::move(parsed));
  }
  return entries;
}

}  // namespace detail

ResolvedConfig resolve_config_list(const std::vector<ConfigEntry>& entries,
                                   const std::string& path, const Model& model,
                                   const std::function<bool(const ConfigEntry&)>& needs_weight,
                                   const std::string& what_needs_weight) {
  LITHE_CHECK(!entries.empty(), sdk::Errc::kInvalidConfig, path,
              " is empty; it needs at least one entry with op_types or op_names");
  std::set<std::string> model_types;
  std::set<std::string> model_names;
  for (const ModuleRecord& record : model.modules()) {
    model_types.insert(record.op_type);
    if (!record.class_name.empty()) {
      model_types.insert(record.class_name);
    }
    model_names.insert(record.name);
  }

  ResolvedConfig resolved;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string entry_path = path + "/" + std::to_string(i);
    ConfigEntry entry = entries[i];
    // A fresh record of read keys per resolution: one parsed config may serve several sessions.
    entry.options = sdk::options_from_json(sdk::options_json(entries[i].options),
                                           entries[i].options.path());
    entry.options.mark_read("op_types");
    entry.options.mark_read("op_names");
    entry.options.mark_read("exclude");
    for (const std::string& type : entry.op_types) {
      const bool from_default = entry.op_types_default && contains(default_op_types(), type);
      if (model_types.count(type) == 0 && !from_default) {
        LITHE_LOG(kWarn, entry_path, "/op_types: the model has no module of type '", type, "'");
      }
    }
    for (size_t n = 0; n < entry.op_names.size(); ++n) {
      LITHE_CHECK(model_names.count(entry.op_names[n]) != 0, sdk::Errc::kInvalidConfig,
                  entry_path, "/op_names/", n, ": the model has no module named '",
                  sdk::printable(entry.op_names[n], 120), "' (see `lithe inspect` for the names)");
    }
    resolved.entries.push_back(std::move(entry));
  }

  const auto& modules = model.modules();
  for (size_t m = 0; m < modules.size(); ++m) {
    const ModuleRecord& record = modules[m];
    std::optional<size_t> chosen;
    for (size_t e = 0; e < resolved.entries.size(); ++e) {
      const ConfigEntry& entry = resolved.entries[e];
      if (entry.has_op_types && !contains(entry.op_types, record.op_type) &&
          (record.class_name.empty() || !contains(entry.op_types, record.class_name))) {
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

ResolvedConfig resolve_config_list(const std::string& config_list_json, const std::string& path,
                                   const Model& model,
                                   const std::function<bool(const ConfigEntry&)>& needs_weight,
                                   const std::string& what_needs_weight) {
  return resolve_config_list(
      detail::parse_config_entries(parse_json_document(config_list_json, path), path), path,
      model, needs_weight, what_needs_weight);
}

}  // namespace lithe::host
