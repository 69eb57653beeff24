#pragma once
/// \file
/// Finding and loading plugin libraries (Boost.DLL). For each file: load, find the entry point,
/// check the API version, then the ABI tag, then refuse duplicate plugin names, then call the
/// registration function. The first failing step is recorded in a LoadReport and the file is
/// skipped; other files still load. Loaded libraries are never unloaded.
///
/// Trust (like ssh's StrictModes), checked before a file is opened: a plugin file, its
/// directory and every directory above it must be owned by root or the current user and not
/// be writable by group or others (a root-owned sticky directory such as /tmp is accepted above
/// the plugin's own directory); paths are resolved through symbolic links first. A relative
/// $LITHE_PLUGIN_PATH entry is refused. Each refusal is a failed LoadReport naming the path and
/// the rule. Setting LITHE_ALLOW_INSECURE_PLUGINS=1 turns these checks off (development trees).

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"

namespace lithe::host {

/// Outcome of one plugin file.
struct LoadReport {
  enum class Status { kLoaded, kFailed };
  std::filesystem::path path;
  Status status = Status::kFailed;
  std::string plugin;          ///< plugin name (if the entry point could be read)
  std::string version;         ///< plugin version (idem)
  std::string message;         ///< why it failed; empty when loaded
  std::vector<std::string> algorithms;  ///< "pruner level", ... registered by this file
  /// For a loaded plugin that replaced an earlier one by an allowed override: "overrides
  /// plugin 'level' of <file>"; empty otherwise.
  std::string overrides;
};

/// Directories searched, in order, each once: <directory of liblithe_host>/lithe/plugins (the
/// plugins of the build or install tree the library belongs to: a program embedding the
/// library from anywhere finds them with no settings), then <directory of the running
/// executable>/../<libdir>/lithe/plugins (for the `lithe` CLI the same folder), then each
/// entry of $LITHE_PLUGIN_PATH (':'-separated), then `cli_dirs` (--plugin-dir, folders given
/// in code). Lithe's own plugins therefore load first and own their names: a plugin found
/// later with the same plugin or algorithm name is refused unless allowed to override it
/// (PluginLoader::allow_override).
/// Directories that do not exist are kept (the loader reports nothing for them); relative
/// $LITHE_PLUGIN_PATH entries are kept too and refused by PluginLoader::load_search_path.
std::vector<std::filesystem::path> plugin_search_path(
    const std::vector<std::filesystem::path>& cli_dirs);

class PluginLoader {
 public:
  explicit PluginLoader(PluginRegistry& registry);
  ~PluginLoader();
  PluginLoader(const PluginLoader&) = delete;
  PluginLoader& operator=(const PluginLoader&) = delete;

  /// Loads every `lithe_plugin_*.so` in `dir` (sorted by file name; not recursive).
  void load_directory(const std::filesystem::path& dir);
  /// Loads one file; returns (a copy of) its report, also kept in reports().
  LoadReport load_file(const std::filesystem::path& file);
  /// Loads every directory of plugin_search_path(cli_dirs), then tells the registry what was
  /// searched (each folder and what it held), for its "unknown algorithm" messages.
  void load_search_path(const std::vector<std::filesystem::path>& cli_dirs);

  /// Names are owned by the plugin that registered them first: a plugin file whose plugin
  /// name, or one of whose algorithm names, is already taken is refused (its report says by
  /// whom and how to override). After allow_override("acme"), a plugin named "acme" loaded
  /// later replaces instead: an earlier plugin of the same name is withdrawn with all its
  /// algorithms, and algorithms of other plugins that it registers again are taken over (the
  /// report's `overrides` says which). Call before loading. The CLI's --override-plugin.
  void allow_override(const std::string& plugin_name);

  const std::vector<LoadReport>& reports() const { return reports_; }

 public:
  struct Library;  ///< implementation detail (a loaded shared library)

 private:
  PluginRegistry& registry_;
  std::vector<LoadReport> reports_;
  std::map<std::string, std::string> plugin_files_;  // plugin name -> file it came from
  std::set<std::string> overrides_;                   // plugin names allowed to replace
  std::vector<std::shared_ptr<Library>> libraries_;  // kept until process exit (never unloaded)
};

}  // namespace lithe::host
