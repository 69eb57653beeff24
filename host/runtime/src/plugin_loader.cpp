#include "lithe/host/runtime/plugin_loader.h"

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <c10/util/Exception.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "lithe/host/io/shared_object_check.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/plugin.h"
#include "lithe/sdk/version.h"

namespace lithe::host {

namespace fs = std::filesystem;

struct PluginLoader::Library {
  boost::dll::shared_library library;
};

namespace {

// "lithe<major>[.<minor>]<toolchain>": the SDK version a plugin was built against (no minor:
// SDK <major>.0, written by plugins of SDK 1.0) and the toolchain part.
struct AbiTag {
  bool valid = false;
  long sdk_major = 0;
  long sdk_minor = 0;
  std::string toolchain;
};

AbiTag parse_abi_tag(const std::string& tag) {
  AbiTag out;
  const std::string prefix = "lithe";
  const size_t end = tag.find(';');
  if (tag.rfind(prefix, 0) != 0 || end == std::string::npos) {
    return out;
  }
  const std::string version = tag.substr(prefix.size(), end - prefix.size());
  const size_t dot = version.find('.');
  const std::string major = version.substr(0, dot);
  const std::string minor = dot == std::string::npos ? "0" : version.substr(dot + 1);
  auto digits = [](const std::string& text) {
    return !text.empty() && text.size() < 9 &&
           text.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!digits(major) || !digits(minor)) {
    return out;
  }
  out.valid = true;
  out.sdk_major = std::stol(major);
  out.sdk_minor = std::stol(minor);
  out.toolchain = tag.substr(end);
  return out;
}

// Libraries stay mapped until the process exits: objects, vtables and exception types created
// by plugin code may outlive any owner we could name (Boost.DLL's documented misuse), and
// libraries that registered torch ops crash libtorch at exit when unloaded. Deliberately
// leaked; reachable through this pointer, so leak checkers stay quiet.
void keep_loaded_forever(std::shared_ptr<PluginLoader::Library> library) {
  static std::mutex mutex;
  static auto* libraries = new std::vector<std::shared_ptr<PluginLoader::Library>>();
  std::lock_guard<std::mutex> lock(mutex);
  libraries->push_back(std::move(library));
}


bool looks_like_plugin_file(const fs::path& path) {
  const std::string name = path.filename().string();
  const std::string ext = path.extension().string();
  return name.rfind("lithe_plugin_", 0) == 0 && (ext == ".so" || ext == ".dylib" || ext == ".dll");
}

}  // namespace

std::vector<fs::path> plugin_search_path(const std::vector<fs::path>& cli_dirs) {
  std::vector<fs::path> dirs;
  auto add = [&dirs](const fs::path& dir) {
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) {
      dirs.push_back(dir);
    }
  };
  // Lithe's own plugins first, so that they own their names: found from where this library is
  // (<libdir>/lithe/plugins; a program that embeds liblithe_host from anywhere finds the
  // plugins of the tree the library belongs to, with no settings) and from where the running
  // program is (bin/ -> <libdir>/lithe/plugins). The build and install trees share both
  // layouts.
  std::error_code ec;
  const fs::path library = boost::dll::this_line_location(ec);
  if (!ec) {
    add((library.parent_path() / LITHE_PLUGIN_DIR_FROM_LIB).lexically_normal());
  }
  ec.clear();
  const fs::path program = boost::dll::program_location(ec);
  if (!ec) {
    add((program.parent_path() / LITHE_PLUGIN_DIR_FROM_BIN).lexically_normal());
  }
  if (const char* env = std::getenv("LITHE_PLUGIN_PATH"); env != nullptr) {
    std::stringstream entries(env);
    std::string entry;
    while (std::getline(entries, entry, ':')) {
      if (!entry.empty()) {
        add(entry);
      }
    }
  }
  for (const fs::path& dir : cli_dirs) {
    add(dir);
  }
  return dirs;
}

PluginLoader::PluginLoader(PluginRegistry& registry) : registry_(registry) {}

PluginLoader::~PluginLoader() {
  for (auto& library : libraries_) {
    keep_loaded_forever(std::move(library));
  }
}

void PluginLoader::allow_override(const std::string& plugin_name) {
  overrides_.insert(plugin_name);
}

void PluginLoader::load_search_path(const std::vector<fs::path>& cli_dirs) {
  std::string summary;
  for (const fs::path& dir : plugin_search_path(cli_dirs)) {
    summary += (summary.empty() ? "" : ", ") + dir.string();
    const bool from_environment =
        std::find(cli_dirs.begin(), cli_dirs.end(), dir) == cli_dirs.end();
    if (from_environment && dir.is_relative() && !insecure_libraries_allowed()) {
      // Relative to whatever directory lithe happens to be started in: refused.
      LoadReport report;
      report.path = dir;
      report.message = "LITHE_PLUGIN_PATH entry '" + dir.string() +
                       "' is relative (it would depend on the working directory); refused, "
                       "use an absolute path";
      reports_.push_back(report);
      summary += " (refused: relative)";
      continue;
    }
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      summary += " (missing)";
      continue;
    }
    const size_t before = reports_.size();
    load_directory(dir);
    size_t loaded = 0;
    for (size_t i = before; i < reports_.size(); ++i) {
      loaded += reports_[i].status == LoadReport::Status::kLoaded ? 1 : 0;
    }
    const size_t failed = reports_.size() - before - loaded;
    summary += reports_.size() == before
                   ? std::string(" (no lithe_plugin_* files)")
                   : " (" + std::to_string(loaded) + " loaded" +
                         (failed > 0 ? ", " + std::to_string(failed) + " failed" : "") + ")";
  }
  registry_.set_search_summary(summary);
}

void PluginLoader::load_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return;
  }
  if (!insecure_libraries_allowed()) {
    const fs::path real = fs::canonical(dir, ec);
    const std::string problem = ec ? "cannot resolve it: " + ec.message()
                                   : trust_problem(real, /*is_directory=*/true);
    if (!problem.empty()) {
      LoadReport report;
      report.path = ec ? dir : real;
      const std::string resolved =
          real != dir && !ec ? " (it resolves to '" + real.string() + "')" : "";
      report.message = untrusted_message(dir.string(), problem + resolved);
      reports_.push_back(report);
      return;
    }
  }
  std::vector<fs::path> files;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    if (looks_like_plugin_file(item.path())) {
      files.push_back(item.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    load_file(file);
  }
}

LoadReport PluginLoader::load_file(const fs::path& file) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(file, ec);
  if (ec) {
    canonical = file;
  }
  // The same file reached twice (e.g. via --plugin-dir and LITHE_PLUGIN_PATH) is loaded once.
  for (const LoadReport& report : reports_) {
    if (report.path == canonical) {
      return report;
    }
  }
  LoadReport report;
  report.path = canonical;
  const std::string where = canonical.string();
  auto fail = [&](const std::string& message) -> LoadReport {
    report.status = LoadReport::Status::kFailed;
    report.message = message;
    reports_.push_back(report);
    return reports_.back();
  };

  if (!insecure_libraries_allowed()) {
    const fs::path real = fs::canonical(file, ec);
    const std::string problem = ec ? "cannot resolve it: " + ec.message()
                                   : trust_problem(real, /*is_directory=*/false);
    if (!problem.empty()) {
      return fail(untrusted_message(canonical.string(), problem));
    }
    struct stat st {};
    if (::stat(real.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return fail(where + ": refused: not a regular file");
    }
  }

  if (const std::string problem = shared_object_problem(canonical); !problem.empty()) {
    return fail(where + ": cannot load shared library: " + problem);
  }

  auto library = std::make_shared<Library>();
  try {
    // rtld_now: unresolved symbols fail here with the linker's message, not later mid-run.
    library->library.load(canonical, boost::dll::load_mode::rtld_now);
  } catch (const std::exception& e) {
    return fail(where + ": cannot load shared library: " + e.what());
  }
  libraries_.push_back(library);
  if (!library->library.has(LITHE_PLUGIN_ENTRY_SYMBOL)) {
    return fail(where + ": has no entry point " LITHE_PLUGIN_ENTRY_SYMBOL
                        "; is it a Lithe plugin?");
  }
  const lithe_plugin_info* info = nullptr;
  try {
    auto& entry = library->library.get<const lithe_plugin_info*()>(LITHE_PLUGIN_ENTRY_SYMBOL);
    info = entry();
  } catch (const std::exception& e) {
    return fail(where + ": calling " LITHE_PLUGIN_ENTRY_SYMBOL " failed: " + e.what());
  }
  if (info == nullptr) {
    return fail(where + ": " LITHE_PLUGIN_ENTRY_SYMBOL " returned no plugin information");
  }
  // api_version is the first field in every API version; read it before anything else.
  if (info->api_version != LITHE_SDK_API_VERSION) {
    std::ostringstream message;
    message << where << ": built against Lithe SDK API " << info->api_version
            << "; this host provides API " << LITHE_SDK_API_VERSION
            << ". Rebuild the plugin against lithe-sdk " << LITHE_SDK_API_VERSION << ".x";
    return fail(message.str());
  }
  const char* host_tag = LITHE_SDK_ABI_TAG;
  const std::string plugin_tag = info->abi_tag == nullptr ? "(null)" : info->abi_tag;
  const AbiTag plugin_abi = parse_abi_tag(plugin_tag);
  if (!plugin_abi.valid || plugin_abi.toolchain != LITHE_DETAIL_ABI_TOOLCHAIN ||
      plugin_abi.sdk_major != LITHE_SDK_API_VERSION) {
    return fail(where + ": ABI tag mismatch: plugin '" + plugin_tag + "', host '" + host_tag +
                "'. Rebuild the plugin with the same libtorch and compiler as the host");
  }
  if (plugin_abi.sdk_minor > LITHE_SDK_MINOR_VERSION) {
    std::ostringstream message;
    message << where << ": built against Lithe SDK " << plugin_abi.sdk_major << "."
            << plugin_abi.sdk_minor << "; this host provides SDK " << LITHE_SDK_API_VERSION << "."
            << LITHE_SDK_MINOR_VERSION
            << ", which lacks functions the plugin may call. Update the host, or rebuild the "
               "plugin against lithe-sdk "
            << LITHE_SDK_API_VERSION << "." << LITHE_SDK_MINOR_VERSION;
    return fail(message.str());
  }
  if (info->name == nullptr || info->name[0] == '\0' || info->register_algorithms == nullptr) {
    return fail(where + ": plugin information lacks a name or a registration function");
  }
  report.plugin = info->name;
  report.version = info->version == nullptr ? "" : info->version;
  auto& names = plugin_files_;
  const bool may_override = overrides_.count(report.plugin) != 0;
  if (const auto it = names.find(report.plugin); it != names.end()) {
    if (!may_override) {
      return fail("duplicate plugin '" + report.plugin + "': " + where +
                  " has the same name as the already loaded " + it->second +
                  "; a plugin cannot take over a loaded plugin's name unless allowed to "
                  "(--override-plugin " + report.plugin + ")");
    }
    // An allowed override: the earlier plugin of this name is withdrawn with its algorithms.
    report.overrides = "overrides plugin '" + report.plugin + "' of " + it->second;
    registry_.remove_plugin(report.plugin);
    for (LoadReport& earlier : reports_) {
      if (earlier.plugin == report.plugin && earlier.status == LoadReport::Status::kLoaded) {
        earlier.overrides = "overridden by " + where;
        earlier.algorithms.clear();
      }
    }
    names.erase(it);
  }

  registry_.set_current_plugin(report.plugin, where, static_cast<int>(plugin_abi.sdk_minor),
                               may_override);
  try {
    info->register_algorithms(registry_);
  } catch (const sdk::Error& e) {
    registry_.remove_plugin(report.plugin);
    registry_.set_current_plugin("", "");
    return fail(where + ": plugin '" + report.plugin + "' failed to register: " + e.what());
  } catch (const c10::Error& e) {
    registry_.remove_plugin(report.plugin);
    registry_.set_current_plugin("", "");
    return fail(where + ": plugin '" + report.plugin +
                "' failed to register: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    registry_.remove_plugin(report.plugin);
    registry_.set_current_plugin("", "");
    return fail(where + ": plugin '" + report.plugin + "' failed to register: " + e.what());
  } catch (...) {
    registry_.remove_plugin(report.plugin);
    registry_.set_current_plugin("", "");
    return fail(where + ": plugin '" + report.plugin +
                "' failed to register: unknown exception");
  }
  for (const std::string& taken : registry_.taken_over()) {
    report.overrides += (report.overrides.empty() ? "overrides " : "; overrides ") + taken;
  }
  // What every plugin owns now, "pruner level" per algorithm, in one pass over the registry.
  std::map<std::string, std::vector<std::string>> owned;
  for (const AlgorithmEntry& entry : registry_.algorithms()) {
    owned[entry.plugin].push_back(std::string(algorithm_kind_name(entry.kind)) + " " +
                                  entry.info.name);
  }
  if (!registry_.taken_over().empty()) {
    // Earlier reports list only what their plugin still owns.
    for (LoadReport& earlier : reports_) {
      if (earlier.status != LoadReport::Status::kLoaded || earlier.plugin == report.plugin) {
        continue;  // failed, or a same-named plugin this one replaced whole (reported above)
      }
      std::vector<std::string>& kept = owned[earlier.plugin];
      if (kept.size() != earlier.algorithms.size()) {
        earlier.algorithms = kept;
        earlier.overrides = "partly overridden by " + where;
      }
    }
  }
  registry_.set_current_plugin("", "");
  names.emplace(report.plugin, where);
  report.algorithms = owned[report.plugin];
  report.status = LoadReport::Status::kLoaded;
  reports_.push_back(report);
  return reports_.back();
}

}  // namespace lithe::host
