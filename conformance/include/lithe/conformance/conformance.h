#pragma once
/// \file
/// Replays NNI golden cases (the format of tests/data/nni/README.md) against Lithe's
/// plugins: PASS when Lithe matches NNI, DEVIATION when NNI is wrong in one of Lithe's listed
/// departures and Lithe's own rule was checked instead, FAIL otherwise, UNSUPPORTED when no
/// plugin or replay procedure covers the case yet.

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"

namespace lithe::host {

struct CaseResult {
  enum class Outcome { kPass, kDeviation, kFail, kUnsupported };
  std::string name;
  Outcome outcome = Outcome::kFail;
  std::string reason;  ///< why it failed / deviated / is unsupported; detail for passes
};

/// "PASS", "DEVIATION", "FAIL" or "UNSUPPORTED".
const char* outcome_name(CaseResult::Outcome outcome);

struct ConformanceSummary {
  std::vector<CaseResult> cases;
  int passed = 0;     ///< PASS + DEVIATION
  int deviations = 0;
  int failed = 0;
  int skipped = 0;    ///< UNSUPPORTED
};

/// Runs every case folder under `golden_dir` (a folder with config.json, or a folder of them),
/// sorted by name, whose name contains `filter`. Model paths in config.json are resolved
/// against golden_dir's parent, golden_dir and the case folder. `on_case` sees each result as
/// soon as it is known. Throws sdk::Error(kIo) when golden_dir holds no case.
ConformanceSummary run_conformance(const std::filesystem::path& golden_dir,
                                   const PluginRegistry& registry, const std::string& filter,
                                   const std::function<void(const CaseResult&)>& on_case);

}  // namespace lithe::host
