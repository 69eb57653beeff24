#pragma once
/// \file
/// The sensitivity analysis: what `lithe sensitivity` runs and what an embedder calls on a model
/// in memory. run_sensitivity() prunes each analysed layer alone to each sparsity of a list and
/// measures the model's top-1 accuracy on the test data (analyse_sensitivity, with each layer's
/// trials reusing what the forward computes before it), and can allocate per-layer sparsities
/// to an overall target (allocate_sparsities) and write them as a config `lithe compress` runs.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lithe/host/io/field_error.h"
#include "lithe/host/jobs/job_output.h"
#include "lithe/host/jobs/model_source.h"
#include "lithe/host/pipeline/sensitivity_allocation.h"
#include "lithe/host/pipeline/sensitivity_analysis.h"
#include "lithe/host/runtime/plugin_registry.h"

namespace lithe::host {

/// What to analyse and where the results go. Errors name the fields (FieldError): the
/// request's, and those of `analysis` and `allocation` by their own names (`sparsities`,
/// `target`, ...).
struct SensitivityRequest {
  ModelSource model;            ///< file or memory (never changed)
  SensitivityOptions analysis;  ///< the pruner, its options, sparsities, layers, early stop
  /// Evaluated on: the test split of a data_path directory, or test_data_path.
  std::filesystem::path data_path;
  std::filesystem::path test_data_path;
  int64_t eval_samples = 0;  ///< the first N test samples only (0: all)
  Output csv;                ///< NNI's CSV layout (layername,<sparsities>)
  Output report;             ///< the HTML report (a curve per layer, the table)
  /// Allocate per-layer sparsities reaching allocation->target of the analysed layers'
  /// weights (NNI's SensitivityPruner); none: no allocation.
  std::optional<AllocationOptions> allocation;
  /// With allocation: the allocation as a compression config (the analysed pruner, its
  /// options, one config_list entry per layer given a sparsity).
  Output allocation_config;
};

struct SensitivityReport {
  SensitivityResult analysis;  ///< the metric of every trial
  int64_t samples = 0;         ///< test samples evaluated
  double seconds = 0;          ///< the analysis alone (not reading the model and the data)
  std::vector<LayerAllocation> allocation;  ///< with an allocation
  std::string csv;                          ///< what `csv` holds
  std::string allocation_config_json;       ///< what `allocation_config` holds (with one)
};

/// Checks the request (paths, options, the pruner's options JSON) before reading the model or
/// the data, runs the analysis and the allocation, and writes every output or none.
SensitivityReport run_sensitivity(const SensitivityRequest& request,
                                  const PluginRegistry& registry);

}  // namespace lithe::host
