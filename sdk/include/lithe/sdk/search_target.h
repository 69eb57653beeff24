#pragma once
/// \file
/// SDK 1.10: what search pruners share (NNI's SimulatedAnnealingPruner and NetAdaptPruner, or
/// any algorithm that chooses per-layer sparsities for one overall target). The target is either
/// NNI's overall `sparsity` (every config_list entry gives the same one) or a budget on what the
/// sped-up model costs: `flops_budget` or `params_budget` in the "options" object, a share of the
/// model as the session found it, measured with CompressionContext::measure_cost.
///
///   "config_list": [{"op_types": ["Conv2d"]}],
///   "options": {"flops_budget": 0.5}       // the sped-up model keeps at most half the FLOPs

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lithe/sdk/context.h"
#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/option_spec.h"
#include "lithe/sdk/options.h"

namespace lithe::sdk {

/// A budget on the sped-up model's cost, relative to the model as the session found it.
struct CostBudget {
  enum class Kind { kFlops, kParams };
  Kind kind = Kind::kFlops;
  double share = 1;  ///< in (0, 1]

  /// "flops_budget" or "params_budget": the key it was read from, for messages.
  LITHE_SDK_API const char* key() const;
  /// cost.flops / cost.dense_flops, or the same of the parameters (1 for an empty model).
  LITHE_SDK_API double ratio(const ModelCost& cost) const;
  bool fits(const ModelCost& cost) const { return ratio(cost) <= share; }
};

/// The keys of a search pruner's target, for its schema (instead of sparsity_keys()): the
/// options "flops_budget" and "params_budget" (numbers in (0, 1], absent by default), and the
/// config_list entry key "sparsity" (a number in [0, 1), not required: a budget replaces it).
LITHE_SDK_API const OptionSchema& search_target_keys();

/// The budget the options give: none, or one of the keys. Throws sdk::Error(kInvalidConfig)
/// naming the options' path when both are given, or a value outside (0, 1].
LITHE_SDK_API std::optional<CostBudget> read_cost_budget(const Options& options);

/// Checks one config_list entry against the target: with a budget the entry must not give
/// "sparsity" (the search chooses every layer's); without one, "sparsity" in [0, 1) is
/// required. Throws sdk::Error(kInvalidConfig) naming the entry's path, `algorithm`, the rule
/// and the value.
LITHE_SDK_API void check_search_entry(const Options& entry,
                                      const std::optional<CostBudget>& budget,
                                      const std::string& algorithm);

/// Refuses a budget that pruning every searched layer to `most_sparsity` does not reach
/// (`most`: measure_cost() with those masks), before a search spends its evaluations. Throws
/// sdk::Error(kInvalidConfig) naming `algorithm`, the key, the budget and the share reached.
LITHE_SDK_API void check_budget_reachable(const CostBudget& budget, const ModelCost& most,
                                          double most_sparsity, const std::string& algorithm);

/// The overall sparsity of a sparsity-target search: NNI takes the first entry's, so every
/// layer's entry must give the same. Throws sdk::Error(kInvalidConfig) naming `algorithm`, two
/// layers that differ and their values, or an empty `layers`.
LITHE_SDK_API double shared_sparsity(const std::vector<LayerView*>& layers,
                                     const std::string& algorithm);

/// NNI's base_algo names ("level", "l1", "l2", "fpgm") as Lithe's masker names ("level",
/// "l1_filter", "l2_filter", "fpgm"); any other name is returned as it is.
LITHE_SDK_API std::string base_algo_masker(const std::string& base_algo);

/// Bisection for the least change that fits: given fits(high) and a `fits` that holds from
/// some point of [low, high] on, returns the smallest x found to fit after `steps` halvings
/// (x == high when nothing below fits). `fits(low)` is never asked.
LITHE_SDK_API double smallest_fitting(double low, double high, int steps,
                                      const std::function<bool(double)>& fits);

}  // namespace lithe::sdk
