#pragma once
// The `lithe` command-line verbs. Each parses its own arguments (Boost.Program_options), prints
// --help, and returns the process exit code; errors are thrown as sdk::Error and reported by
// main() in one line.

#include <filesystem>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "lithe/host/runtime/plugin_loader.h"
#include "lithe/host/runtime/plugin_registry.h"

namespace lithe::cli {

namespace po = boost::program_options;

/// Options every verb that loads plugins or runs models accepts.
struct CommonOptions {
  std::vector<std::string> plugin_dirs;
  std::vector<std::string> override_plugins;
  int threads = 0;
  std::string log_level = "info";
};

/// Adds --plugin-dir, --override-plugin, --threads and --log-level to `desc`, bound to
/// `common`.
void add_common_options(po::options_description& desc, CommonOptions& common);
/// Parses `args` against `desc`; returns false (after printing usage) when --help was given.
/// `given`, when not null, receives the parsed values (to tell given options from defaults).
bool parse_verb_args(const std::string& verb, const std::string& synopsis,
                     const std::vector<std::string>& args, po::options_description& desc,
                     const po::positional_options_description* positional = nullptr,
                     po::variables_map* given = nullptr);
/// Applies --log-level and --threads, and loads plugins from the search path into the loader's registry; failed
/// plugin files are reported as warnings on stderr.
void prepare(const CommonOptions& common, host::PluginLoader& loader,
             bool warn_failed_plugins = true);

int run_plugins(const std::vector<std::string>& args);
int run_inspect(const std::vector<std::string>& args);
int run_compress(const std::vector<std::string>& args);
int run_apply(const std::vector<std::string>& args);
int run_conformance(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);
int run_eval(const std::vector<std::string>& args);
int run_flops(const std::vector<std::string>& args);
int run_speedup(const std::vector<std::string>& args);
int run_export_onnx(const std::vector<std::string>& args);
int run_convert(const std::vector<std::string>& args);
int run_pipeline(const std::vector<std::string>& args);
int run_launch(const std::vector<std::string>& args);
int run_sensitivity(const std::vector<std::string>& args);
int run_search(const std::vector<std::string>& args);
int run_latency(const std::vector<std::string>& args);

}  // namespace lithe::cli
