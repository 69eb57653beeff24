#pragma once
/// \file
/// Per-layer sparsities from a sensitivity table (the allocation step of NNI's
/// SensitivityPruner): each layer's pruning in proportion to what it tolerates, scaled to an
/// overall target. `lithe sensitivity --target-sparsity S --write-config FILE` writes the
/// result as a config `lithe compress` runs.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lithe/host/io/field_error.h"
#include "lithe/host/pipeline/sensitivity_analysis.h"

namespace lithe::host {

struct AllocationOptions {
  double target = 0.5;        ///< of the analysed layers' weights, in (0, 1)
  double threshold = 0.05;    ///< the metric drop a layer may cost (higher is better assumed)
  double max_sparsity = 0.95;  ///< no layer beyond it (NNI's MAX_PRUNE_RATIO_PER_ITER)
};

struct LayerAllocation {
  std::string layer;
  int64_t weights = 0;   ///< its weight count
  double tolerated = 0;  ///< the largest sparsity of the table within the threshold (0: none)
  double sparsity = 0;   ///< what it gets
};

/// The largest sparsity of `row` whose metric is at least `original` − `threshold` (higher is
/// better assumed); 0 when none is.
double tolerated_sparsity(const SensitivityRow& row, double original, double threshold);

/// Throws FieldError(kInvalidConfig) naming the field (`target`, `threshold`, `max_sparsity`)
/// for a target, threshold or cap out of range.
void check_allocation_options(const AllocationOptions& options);

/// For each row of `result`, the tolerated sparsity: the largest sparsity tried whose metric is
/// at least the original minus `threshold` (0 when none is). Then sparsities proportional to
/// the tolerated ones, scaled so that Σ sparsity · weights = target · Σ weights, none above
/// `max_sparsity` (a capped layer's share goes to the others). `weights` gives each row's
/// weight count. Departure from NNI: NNI takes the first sparsity that fails the threshold as
/// tolerated (its loop records the ratio before testing it), and scales every layer down when
/// one passes the cap, missing the target in that iteration. Throws what
/// check_allocation_options throws, and sdk::Error(kInvalidConfig) for a row without a weight
/// count, no layer within the threshold, or a target the cap cannot reach (naming the largest
/// one).
std::vector<LayerAllocation> allocate_sparsities(const SensitivityResult& result,
                                                 const std::map<std::string, int64_t>& weights,
                                                 const AllocationOptions& options);

}  // namespace lithe::host
