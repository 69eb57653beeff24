// `lithe`: model compression from the command line.
#include <csignal>
#include <iostream>
#include <map>

#include "lithe/host/io/allocator.h"
#include "lithe/host/io/threads.h"
#include "lithe/host/runtime/crash_report.h"
#include "lithe/host/runtime/torch_runtime.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/log.h"
#include "lithe/sdk/version.h"
#include "model_warnings.h"
#include "verbs.h"

namespace lithe::cli {

void add_common_options(po::options_description& desc, CommonOptions& common) {
  desc.add_options()
      ("plugin-dir", po::value(&common.plugin_dirs)->composing(),
       "directory to search for lithe_plugin_*.so (repeatable), after <prefix>/lib/lithe/plugins "
       "and $LITHE_PLUGIN_PATH; a plugin found later cannot take a name already loaded")
      ("override-plugin", po::value(&common.override_plugins)->composing(),
       "let the plugin of this name, found later in the search path, replace the one loaded "
       "first and take over its algorithm names (repeatable), e.g. a rebuilt built-in plugin")
      ("threads", po::value(&common.threads)->default_value(0),
       "intra-op threads for libtorch (0 = all cores)")
      ("log-level", po::value(&common.log_level)->default_value(common.log_level),
       "messages from algorithms to show: error, warn, info (e.g. which layers were coupled, "
       "rounds started) or debug");
}

bool parse_verb_args(const std::string& verb, const std::string& synopsis,
                     const std::vector<std::string>& args, po::options_description& desc,
                     const po::positional_options_description* positional,
                     po::variables_map* given) {
  desc.add_options()("help,h", "show this help");
  po::variables_map local;
  po::variables_map& vm = given != nullptr ? *given : local;
  auto parser = po::command_line_parser(args).options(desc);
  if (positional != nullptr) {
    parser.positional(*positional);
  }
  po::store(parser.run(), vm);
  if (vm.count("help") != 0) {
    std::cout << "usage: lithe " << verb << " " << synopsis << "\n\n" << desc << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

void prepare(const CommonOptions& common, host::PluginLoader& loader, bool warn_failed_plugins) {
  static const std::map<std::string, sdk::LogLevel> levels = {{"error", sdk::LogLevel::kError},
                                                              {"warn", sdk::LogLevel::kWarn},
                                                              {"info", sdk::LogLevel::kInfo},
                                                              {"debug", sdk::LogLevel::kDebug}};
  const auto level = levels.find(common.log_level);
  LITHE_CHECK(level != levels.end(), sdk::Errc::kInvalidConfig,
              "--log-level must be error, warn, info or debug, got '", common.log_level, "'");
  sdk::set_log_level(level->second);
  host::configure_threads(common.threads);
  std::vector<std::filesystem::path> dirs(common.plugin_dirs.begin(), common.plugin_dirs.end());
  for (const std::string& name : common.override_plugins) {
    loader.allow_override(name);
  }
  loader.load_search_path(dirs);
  for (const host::LoadReport& report : loader.reports()) {
    if (report.status == host::LoadReport::Status::kLoaded && !report.overrides.empty() &&
        report.overrides.rfind("overrides", 0) == 0) {
      std::cerr << "lithe: note: plugin '" << report.plugin << "' (" << report.path.string()
                << ") " << report.overrides << "\n";
    }
  }
  if (warn_failed_plugins) {
    for (const host::LoadReport& report : loader.reports()) {
      if (report.status == host::LoadReport::Status::kFailed) {
        std::cerr << "lithe: warning: skipped plugin: " << report.message << "\n";
      }
    }
  }
}

}  // namespace lithe::cli

namespace {

void print_usage() {
  std::cout << "lithe " LITHE_SDK_VERSION_STRING
               " - neural network compression with binary plugins\n\n"
               "usage: lithe <verb> [options]   (lithe <verb> --help for details)\n\n"
               "verbs:\n"
               "  plugins      list plugin files found, their status and algorithms\n"
               "  inspect      list a model's modules, op types and parameters\n"
               "  compress     compress a TorchScript model with a JSON config\n"
               "  apply        apply a mask file to a model (NNI apply_compression_results)\n"
               "  conformance  replay NNI golden cases from a directory\n"
               "  train        train a TorchScript model on Fashion-MNIST or a tensor file\n"
               "  eval         top-1 accuracy and loss of a model on a dataset\n"
               "  flops        FLOPs and parameters per layer (NNI count_flops_params)\n"
               "  sensitivity  accuracy per layer and sparsity, one layer pruned at a time (NNI "
               "SensitivityAnalysis)\n"
               "  search       per-layer sparsities that fit a FLOPs, parameter or measured "
               "latency budget\n"
               "  latency      time models alternately on this machine (medians, ratios to a "
               "baseline)\n"
               "  speedup      rebuild a masked model with fewer channels, checked and timed\n"
               "  export-onnx  write a TorchScript model as ONNX (checked by the ONNX checker)\n"
               "  convert      turn a quantized model into a native int8 model, with a certificate\n"
               "  pipeline     prune, speed up, quantize and convert from one config, stage by stage\n"
               "  launch       run train or compress data-parallel in N processes (torchrun "
               "for one machine)\n";
}

}  // namespace

int main(int argc, char** argv) {
  using lithe::cli::po::error;
  lithe::host::keep_freed_memory_for_reuse();
  const std::map<std::string, int (*)(const std::vector<std::string>&)> verbs = {
      {"plugins", &lithe::cli::run_plugins},         {"inspect", &lithe::cli::run_inspect},
      {"compress", &lithe::cli::run_compress},       {"apply", &lithe::cli::run_apply},
      {"conformance", &lithe::cli::run_conformance}, {"train", &lithe::cli::run_train},
      {"eval", &lithe::cli::run_eval},               {"flops", &lithe::cli::run_flops},
      {"speedup", &lithe::cli::run_speedup},
      {"export-onnx", &lithe::cli::run_export_onnx},
      {"convert", &lithe::cli::run_convert},
      {"pipeline", &lithe::cli::run_pipeline},
      {"launch", &lithe::cli::run_launch},
      {"sensitivity", &lithe::cli::run_sensitivity},
      {"search", &lithe::cli::run_search},
      {"latency", &lithe::cli::run_latency},
  };
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) == "--version") {
    std::cout << "lithe " LITHE_SDK_VERSION_STRING " (SDK API " << LITHE_SDK_API_VERSION
              << ", ABI " LITHE_SDK_ABI_TAG ") on " << lithe::host::torch_runtime_description()
              << "\n";
    return 0;
  }
  const auto verb = verbs.find(argv[1]);
  if (verb == verbs.end()) {
    std::cerr << "lithe: error: unknown verb '" << argv[1] << "' (see lithe --help)\n";
    return 2;
  }
  // Under a file-size limit (ulimit -f) a write fails with EFBIG, reported like any write
  // error, instead of the default SIGXFSZ killing the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  // A crash inside a plugin names the plugin call that was running (crash_report.h).
  lithe::host::install_crash_reporter();
  // A model's own warnings (scripted GoogLeNet warns on every forward) once each.
  lithe::cli::print_model_warnings_once();
  lithe::sdk::set_log_sink([](lithe::sdk::LogLevel level, const std::string& message) {
    static const char* const names[] = {"error", "warning", "info", "debug"};
    std::cerr << "lithe: " << names[static_cast<int>(level)] << ": " << message << "\n";
  });
  try {
    return verb->second(std::vector<std::string>(argv + 2, argv + argc));
  } catch (const error& e) {
    std::cerr << "lithe " << argv[1] << ": error: " << e.what() << " (see lithe " << argv[1]
              << " --help)\n";
    return 2;
  } catch (const lithe::sdk::Error& e) {
    std::cerr << "lithe " << argv[1] << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    // libtorch errors carry a backtrace after the first line; the first line is the message. The
    // TorchScript interpreter's are the other way round: a traceback, then the message last.
    std::string message = e.what();
    while (!message.empty() && message.back() == '\n') {
      message.pop_back();
    }
    const bool traceback = message.find("Traceback of TorchScript") != std::string::npos;
    const size_t cut = traceback ? message.rfind('\n') : message.find('\n');
    std::cerr << "lithe " << argv[1] << ": error: "
              << (cut == std::string::npos ? message
                  : traceback           ? message.substr(cut + 1)
                                        : message.substr(0, cut))
              << "\n";
    return 1;
  }
}
