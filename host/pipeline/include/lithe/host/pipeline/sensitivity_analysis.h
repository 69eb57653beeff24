#pragma once
/// \file
/// Sensitivity analysis (NNI v2.0's SensitivityAnalysis, reference §2.15): for each selected
/// layer alone, the metric of the model with that layer pruned to each sparsity of a list, the
/// other layers untouched. It tells which layers tolerate pruning (the input of a per-layer
/// sparsity choice: NNI's SensitivityPruner, Lithe's search). The model is left exactly as it
/// came (weights restored bit for bit after every trial).

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/io/field_error.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"

namespace lithe::host {

/// NNI's early_stop_mode: when a layer's sweep stops (the sparsity that triggered it is
/// recorded, the larger ones are not).
enum class SensitivityStop {
  kNone,
  kMinimize,  ///< metric < value
  kMaximize,  ///< metric > value
  kDropped,   ///< metric < original − value
  kRaised,    ///< metric > original + value
};

struct SensitivityOptions {
  /// A registered pruner, run on one layer at a time (config_list: that layer's name and the
  /// sparsity).
  std::string algorithm;
  /// Its "options" object, JSON text.
  std::string algorithm_options_json = "{}";
  /// In (0, 1); analyse_sensitivity sorts them and rounds each to 2 decimals, as NNI does.
  /// Empty: NNI's default 0.1, 0.2, …, 0.9.
  std::vector<double> sparsities;
  /// The module types analysed (NNI: Conv2d).
  std::vector<std::string> op_types = {"Conv2d"};
  /// Only these layers (each must be of op_types); empty: every module of op_types.
  std::vector<std::string> layers;
  SensitivityStop stop = SensitivityStop::kNone;
  double stop_value = 0.0;
};

/// One layer's sweep: (sparsity, metric) for the sparsities tried, ascending.
struct SensitivityRow {
  std::string layer;
  std::vector<std::pair<double, double>> metrics;
};

struct SensitivityResult {
  double original = 0.0;          ///< the metric of the model as it came
  std::vector<double> sparsities;  ///< the sorted, rounded list
  std::vector<SensitivityRow> rows;  ///< in the model's module order
  int64_t evaluations = 0;         ///< calls of the metric, the original one included
};

/// Measures the model as it is now (higher or lower is better, as the stop mode says). Called
/// with the layer analysed, whose weights alone differ from the model as it came (empty for the
/// original model), so that it may keep what the forward computes before that layer
/// (LayerCachedEvaluation does).
using SensitivityMetric = std::function<double(const std::string& layer)>;

/// Runs the analysis, layer after layer (all trials of one layer in a row). Throws
/// FieldError(kInvalidConfig) naming the field of `options` (`sparsities`, `layers`,
/// `op_types`) for a sparsity outside (0, 1), a layer that does not exist or is not of
/// op_types, or a selection without layers; the algorithm's own errors name the plugin and the
/// layer.
SensitivityResult analyse_sensitivity(Model& model, const PluginRegistry& registry,
                                      const SensitivityOptions& options,
                                      const SensitivityMetric& metric);

/// NNI's export layout: a header `layername,<sparsity>...` (sparsities as Python prints
/// them), then one row per layer with the metrics of the sparsities it reached (a row stops
/// where the early stop did). Numbers in the shortest form that reads back exactly.
std::string sensitivity_csv(const SensitivityResult& result);

/// Reads that layout back (from Lithe or NNI): the sparsities of the header and each row's
/// metrics; `original` is NaN (the layout does not hold it) and `evaluations` 0. sdk::Error
/// (kInvalidConfig) naming `source`, the line and the column for a header that is not
/// `layername,<sparsities>`, a sparsity outside (0, 1) or not ascending, a metric that is not a
/// finite number, a row with more metrics than sparsities, an empty or repeated layer name, or
/// no row.
SensitivityResult read_sensitivity_csv(const std::string& text, const std::string& source);

}  // namespace lithe::host
