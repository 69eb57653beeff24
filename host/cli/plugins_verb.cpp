// `lithe plugins`: what was found where, and why a file was skipped.
#include <iostream>

#include <nlohmann/json.hpp>

#include "verbs.h"

namespace lithe::cli {

int run_plugins(const std::vector<std::string>& args) {
  CommonOptions common;
  bool json = false;
  po::options_description desc("options");
  add_common_options(desc, common);
  desc.add_options()("json", po::bool_switch(&json), "print the load reports as JSON");
  if (!parse_verb_args("plugins", "[--plugin-dir DIR]... [--override-plugin NAME]... [--json]", args, desc)) {
    return 0;
  }
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader, /*warn_failed_plugins=*/false);

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
