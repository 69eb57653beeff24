#pragma once
/// \file
/// The HTML report of a sensitivity analysis (`lithe sensitivity --report`): one curve per
/// layer (metric against sparsity) with the unpruned model's metric as a reference line, and
/// the table of every trial. Self-contained: inline SVG and CSS, no script, no network.

#include <cstdint>
#include <string>

#include "lithe/host/pipeline/sensitivity_analysis.h"

namespace lithe::host {

/// What the report says about the run besides the result.
struct SensitivityReportInfo {
  std::string model;      ///< the model file
  std::string algorithm;  ///< the pruner
  std::string metric = "top-1 accuracy";
  int64_t samples = 0;    ///< evaluated samples
  double seconds = 0;     ///< the analysis's time
};

/// The whole page. Every (layer, sparsity) trial is a point of the chart (`data-series` the
/// layer, `data-x` the sparsity, `data-y` the metric, exact) and a cell of the table.
std::string sensitivity_html(const SensitivityResult& result, const SensitivityReportInfo& info);

}  // namespace lithe::host
