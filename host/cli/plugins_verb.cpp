// `lithe plugins`: what was found where, and why a file was skipped; `--describe NAME`: the
// keys one algorithm accepts, from its own declaration (SDK 1.4 describe_options).
#include <algorithm>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "lithe/host/runtime/torch_runtime.h"
#include "lithe/sdk/error.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

nlohmann::ordered_json spec_json(const sdk::OptionSpec& spec) {
  nlohmann::ordered_json out{{"key", spec.key},
                             {"type", sdk::option_type_name(spec.type)},
                             {"rule", spec.rule()},
                             {"required", spec.required}};
  out["default"] = spec.default_json.empty() ? nlohmann::ordered_json()
                                             : nlohmann::ordered_json::parse(spec.default_json);
  out["help"] = spec.help;
  return out;
}

// One table of keys (one scope): key, rule, default or "required", help; columns as wide as
// the widest of `all` so that both scopes' tables line up.
void print_keys(const std::vector<const sdk::OptionSpec*>& specs,
                const std::vector<sdk::OptionSpec>& all) {
  size_t key_width = 0;
  size_t rule_width = 0;
  for (const sdk::OptionSpec& spec : all) {
    key_width = std::max(key_width, spec.key.size());
    rule_width = std::max(rule_width, spec.rule().size());
  }
  for (const sdk::OptionSpec* spec : specs) {
    const std::string presence = spec->required            ? "required"
                                 : spec->default_json.empty() ? "optional"
                                                              : "default " + spec->default_json;
    std::cout << "  " << std::left << std::setw(static_cast<int>(key_width)) << spec->key << "  "
              << std::setw(static_cast<int>(rule_width)) << spec->rule() << "  "
              << std::setw(16) << presence << "  " << spec->help << "\n";
  }
}

// `lithe plugins --describe NAME`: every kind registered under NAME, its plugin, and the keys
// it declared. An unknown name is an error listing the known ones.
int describe(const host::PluginRegistry& registry, const host::PluginLoader& loader,
             const std::string& name, bool json) {
  std::vector<host::AlgorithmEntry> entries;
  std::vector<std::string> known;
  for (const host::AlgorithmEntry& entry : registry.algorithms()) {
    if (entry.info.name == name) {
      entries.push_back(entry);
    }
    if (std::find(known.begin(), known.end(), entry.info.name) == known.end()) {
      known.push_back(entry.info.name);
    }
  }
  if (entries.empty()) {
    std::sort(known.begin(), known.end());
    std::string list;
    for (const std::string& k : known) {
      list += (list.empty() ? "" : ", ") + k;
    }
    LITHE_CHECK(false, sdk::Errc::kInvalidConfig, "--describe '", name,
                "': no algorithm of that name is registered; known: ",
                list.empty() ? std::string("none (see `lithe plugins`)") : list);
  }
  const auto version_of = [&loader](const host::AlgorithmEntry& entry) {
    for (const host::LoadReport& r : loader.reports()) {
      if (r.plugin == entry.plugin && r.path.string() == entry.plugin_path) {
        return r.version;
      }
    }
    return std::string();
  };
  const auto nni_class_of = [&registry](const host::AlgorithmEntry& entry) {
    for (const host::NniCounterpartEntry& c : registry.nni_counterparts()) {
      if (c.counterpart.algorithm == entry.info.name && c.kind == entry.kind &&
          c.plugin == entry.plugin) {
        return c.counterpart.nni_class;
      }
    }
    return std::string();
  };
  // Each kind is listed with its own plugin; the keys are those of the first kind that declared
  // any. Kinds of one name normally come from one plugin, whose describe_options covers them
  // all; only an override that replaced one kind could make them differ.
  const sdk::OptionSchema* schema = nullptr;
  for (const host::AlgorithmEntry& entry : entries) {
    if (entry.options.has_value()) {
      schema = &*entry.options;
      break;
    }
  }
  std::vector<const sdk::OptionSpec*> options;
  std::vector<const sdk::OptionSpec*> entry_keys;
  if (schema != nullptr) {
    for (const sdk::OptionSpec& spec : schema->specs()) {
      (spec.scope == sdk::OptionScope::kOptions ? options : entry_keys).push_back(&spec);
    }
  }
  if (json) {
    nlohmann::ordered_json out{{"name", name}};
    out["kinds"] = nlohmann::ordered_json::array();
    for (const host::AlgorithmEntry& entry : entries) {
      const std::string nni_class = nni_class_of(entry);
      out["kinds"].push_back({{"kind", host::algorithm_kind_name(entry.kind)},
                              {"description", entry.info.description},
                              {"plugin", entry.plugin},
                              {"version", version_of(entry)},
                              {"path", entry.plugin_path},
                              {"declares_options", entry.options.has_value()},
                              {"nni_class", nni_class.empty() ? nlohmann::ordered_json()
                                                              : nlohmann::ordered_json(nni_class)}});
    }
    out["options"] = nlohmann::ordered_json::array();
    for (const sdk::OptionSpec* spec : options) {
      out["options"].push_back(spec_json(*spec));
    }
    out["config_entry"] = nlohmann::ordered_json::array();
    for (const sdk::OptionSpec* spec : entry_keys) {
      out["config_entry"].push_back(spec_json(*spec));
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  for (const host::AlgorithmEntry& entry : entries) {
    std::cout << host::algorithm_kind_name(entry.kind) << " '" << name << "': "
              << entry.info.description << "\n  plugin " << entry.plugin << " "
              << version_of(entry) << "  " << entry.plugin_path << "\n";
    if (const std::string nni_class = nni_class_of(entry); !nni_class.empty()) {
      std::cout << "  reproduces NNI v2.0 " << nni_class << "\n";
    }
  }
  if (schema == nullptr) {
    std::cout << "declares no option keys (its plugin was built before SDK 1.4's "
                 "describe_options; see its README)\n";
    return 0;
  }
  std::cout << "\"options\" keys:\n";
  if (options.empty()) {
    std::cout << "  none\n";
  }
  print_keys(options, schema->specs());
  std::cout << "config_list entry keys (besides op_types, op_names, exclude):\n";
  if (entry_keys.empty()) {
    std::cout << "  none\n";
  }
  print_keys(entry_keys, schema->specs());
  return 0;
}

}  // namespace

int run_plugins(const std::vector<std::string>& args) {
  CommonOptions common;
  bool json = false;
  po::options_description desc("options");
  add_common_options(desc, common);
  std::string describe_name;
  desc.add_options()("json", po::bool_switch(&json), "print the load reports as JSON")(
      "describe", po::value(&describe_name)->value_name("NAME"),
      "print the keys algorithm NAME accepts (type, range, default, meaning), as it declares "
      "them");
  if (!parse_verb_args("plugins",
                       "[--plugin-dir DIR]... [--override-plugin NAME]... [--describe NAME] "
                       "[--json]",
                       args, desc)) {
    return 0;
  }
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader, /*warn_failed_plugins=*/!describe_name.empty());
  if (!describe_name.empty()) {
    return describe(registry, loader, describe_name, json);
  }

  // NNI classes each plugin declared it reproduces (SDK 1.4 plugins; none for older ones).
  // (A file whose plugin was overridden by a later one of the same name owns nothing now.)
  const auto counterparts_of = [&registry](const host::LoadReport& report) {
    std::vector<sdk::NniCounterpart> out;
    for (const host::NniCounterpartEntry& entry : registry.nni_counterparts()) {
      if (entry.plugin == report.plugin && entry.plugin_path == report.path.string()) {
        out.push_back(entry.counterpart);
      }
    }
    return out;
  };
  std::vector<std::filesystem::path> dirs(common.plugin_dirs.begin(), common.plugin_dirs.end());
  if (json) {
    nlohmann::ordered_json out;
    out["runtime"] = host::torch_runtime_description();
    out["search_path"] = nlohmann::ordered_json::array();
    for (const auto& dir : host::plugin_search_path(dirs)) {
      out["search_path"].push_back(dir.string());
    }
    out["plugins"] = nlohmann::ordered_json::array();
    for (const host::LoadReport& r : loader.reports()) {
      const bool loaded = r.status == host::LoadReport::Status::kLoaded;
      nlohmann::ordered_json counterparts = nlohmann::ordered_json::array();
      for (const sdk::NniCounterpart& c : loaded ? counterparts_of(r)
                                                 : std::vector<sdk::NniCounterpart>()) {
        counterparts.push_back(
            {{"algorithm", c.algorithm}, {"nni_class", c.nni_class}, {"replay", c.replay}});
      }
      out["plugins"].push_back({{"path", r.path.string()},
                                {"status", loaded ? "loaded" : "failed"},
                                {"name", r.plugin},
                                {"version", r.version},
                                {"algorithms", r.algorithms},
                                {"nni_counterparts", counterparts},
                                {"message", r.message},
                                {"overrides", r.overrides}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "runtime: " << host::torch_runtime_description() << "\n";
  std::cout << "search path:\n";
  for (const auto& dir : host::plugin_search_path(dirs)) {
    std::error_code ec;
    std::cout << "  " << dir.string() << (std::filesystem::is_directory(dir, ec) ? "" : "  (missing)")
              << "\n";
  }
  std::cout << "plugins:\n";
  if (loader.reports().empty()) {
    std::cout << "  none found\n";
  }
  for (const host::LoadReport& r : loader.reports()) {
    if (r.status == host::LoadReport::Status::kLoaded) {
      std::cout << "  loaded  " << r.plugin << " " << r.version << "  " << r.path.string() << "\n";
      if (!r.overrides.empty()) {
        std::cout << "          (" << r.overrides << ")\n";
      }
      for (const std::string& algorithm : r.algorithms) {
        std::cout << "          " << algorithm << "\n";
      }
      for (const sdk::NniCounterpart& c : counterparts_of(r)) {
        std::cout << "          " << c.algorithm << " reproduces NNI v2.0 " << c.nni_class
                  << " (conformance replay: " << c.replay << ")\n";
      }
    } else {
      std::cout << "  FAILED  " << r.message << "\n";
    }
  }
  return 0;
}

}  // namespace lithe::cli
