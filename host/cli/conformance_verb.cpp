// `lithe conformance DIR`: replay NNI golden cases.
#include <iostream>

#include "lithe/conformance/conformance.h"
#include "verbs.h"

namespace lithe::cli {

int run_conformance(const std::vector<std::string>& args) {
  CommonOptions common;
  common.log_level = "warn";  // one line per case; algorithms' info messages would drown them
  std::string dir;
  std::string filter;
  bool verbose = false;
  po::options_description desc("options");
  desc.add_options()
      ("dir", po::value(&dir)->required(), "golden folder (a case folder or a folder of them)")
      ("case", po::value(&filter)->default_value(""), "only cases whose name contains this")
      ("verbose,v", po::bool_switch(&verbose), "also print details of passing cases");
  add_common_options(desc, common);
  po::positional_options_description positional;
  positional.add("dir", 1);
  if (!parse_verb_args("conformance", "DIR [--case SUBSTRING]", args, desc, &positional)) {
    return 0;
  }
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader);
  const host::ConformanceSummary summary =
      host::run_conformance(dir, registry, filter, [&](const host::CaseResult& result) {
        std::cout << host::outcome_name(result.outcome) << " " << result.name;
        if (result.outcome != host::CaseResult::Outcome::kPass || verbose) {
          if (!result.reason.empty()) {
            std::cout << ": " << result.reason;
          }
        }
        std::cout << std::endl;
      });
  std::cout << summary.deviations << " of the passed cases are documented deviations from NNI\n";
  std::cout << summary.passed << " passed, " << summary.failed << " failed, " << summary.skipped
            << " skipped\n";
  return summary.failed == 0 ? 0 : 1;
}

}  // namespace lithe::cli
