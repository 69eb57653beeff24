#pragma once
/// \file
/// The HTML report of `lithe search --report`: accuracy against the FLOPs ratio and against the
/// measured latency ratio (every trial a point, the Pareto front a line, the chosen model
/// marked), how far FLOPs and latency disagree, and the table of trials. Self-contained: inline
/// SVG and CSS, no script, no network.

#include <string>

#include "lithe/host/pipeline/auto_compress.h"
#include "lithe/host/pipeline/budget_search.h"

namespace lithe::host {

/// What the report says about the run besides the result.
struct SearchReportInfo {
  std::string model;      ///< the model file
  std::string algorithm;  ///< the pruner
  ResourceBudget budget;
  std::string strategy;
  double seconds = 0;     ///< the search's time (this run's, when resumed)
};

/// The whole page. Each chart has the series "trials" (every evaluated trial: `data-x` the
/// resource ratio, `data-y` the accuracy, exact; the tooltip names the trial), "Pareto front"
/// and "dense" (1, the dense accuracy); the chosen trial is highlighted in "trials".
std::string search_html(const SearchResult& result, const SearchReportInfo& info);

/// AutoCompress's page: the rounds (budget, use against the dense model, accuracy), then each
/// round's search as search_html shows it (`info.seconds`: the whole run's).
std::string auto_compress_html(const AutoCompressResult& result, const SearchReportInfo& info);

}  // namespace lithe::host
