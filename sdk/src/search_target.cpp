#include "lithe/sdk/search_target.h"

#include "lithe/sdk/error.h"

namespace lithe::sdk {

const char* CostBudget::key() const {
  return kind == Kind::kFlops ? "flops_budget" : "params_budget";
}

double CostBudget::ratio(const ModelCost& cost) const {
  const int64_t used = kind == Kind::kFlops ? cost.flops : cost.params;
  const int64_t dense = kind == Kind::kFlops ? cost.dense_flops : cost.dense_params;
  return dense > 0 ? static_cast<double>(used) / static_cast<double>(dense) : 1.0;
}

const OptionSchema& search_target_keys() {
  static const OptionSchema schema = [] {
    OptionSchema keys;
    keys.add(entry_key("sparsity", OptionType::kNumber,
                       "the overall sparsity (NNI's; every entry gives the same); not with a "
                       "budget")
                 .at_least(0)
                 .below(1));
    keys.add(option("flops_budget", OptionType::kNumber,
                    "instead of sparsity: the sped-up model's FLOPs at most this share of the "
                    "model's as it came")
                 .above(0)
                 .at_most(1));
    keys.add(option("params_budget", OptionType::kNumber,
                    "instead of sparsity: the sped-up model's parameters at most this share of "
                    "the model's as it came")
                 .above(0)
                 .at_most(1));
    return keys;
  }();
  return schema;
}

std::optional<CostBudget> read_cost_budget(const Options& options) {
  const bool flops = options.has("flops_budget");
  const bool params = options.has("params_budget");
  LITHE_CHECK(!(flops && params), Errc::kInvalidConfig, options.path(),
              ": give one of flops_budget and params_budget, got both");
  if (!flops && !params) {
    return std::nullopt;
  }
  CostBudget budget;
  budget.kind = flops ? CostBudget::Kind::kFlops : CostBudget::Kind::kParams;
  budget.share = search_target_keys().read<double>(options, budget.key());
  return budget;
}

void check_search_entry(const Options& entry, const std::optional<CostBudget>& budget,
                        const std::string& algorithm) {
  if (budget.has_value()) {
    LITHE_CHECK(!entry.has("sparsity"), Errc::kInvalidConfig, entry.path(),
                "/sparsity: ", algorithm, " searches every layer's sparsity for its ",
                budget->key(), " (", budget->share,
                "), so a config_list entry selects layers only; remove the sparsity or the "
                "budget");
    return;
  }
  LITHE_CHECK(entry.has("sparsity"), Errc::kInvalidConfig, entry.path(),
              ": ", algorithm, " needs an overall `sparsity` in every config_list entry, or "
              "a flops_budget / params_budget in its options");
  (void)search_target_keys().read<double>(entry, "sparsity");
}

void check_budget_reachable(const CostBudget& budget, const ModelCost& most,
                            double most_sparsity, const std::string& algorithm) {
  LITHE_CHECK(budget.fits(most), Errc::kInvalidConfig, algorithm, ": ", budget.key(), " ",
              budget.share, " cannot be reached: with every selected layer at sparsity ",
              most_sparsity, " the sped-up model keeps ", budget.ratio(most),
              " of it (only whole channels leave a sped-up model: level masks remove few, and "
              "a residual add keeps the channels of the layers it joins)");
}

double shared_sparsity(const std::vector<LayerView*>& layers, const std::string& algorithm) {
  LITHE_CHECK(!layers.empty(), Errc::kInvalidConfig, algorithm,
              ": the config_list selects no layer");
  const double target = layers.front()->config().require<double>("sparsity");
  for (const LayerView* layer : layers) {
    const double s = layer->config().require<double>("sparsity");
    LITHE_CHECK(s == target, Errc::kInvalidConfig, "layer '", layer->name(), "': ", algorithm,
                " searches per-layer sparsities for one overall sparsity, so every "
                "config_list entry must give the same `sparsity`; layer '",
                layers.front()->name(), "' has ", target, ", this one ", s);
  }
  return target;
}

std::string base_algo_masker(const std::string& base_algo) {
  if (base_algo == "l1") {
    return "l1_filter";
  }
  if (base_algo == "l2") {
    return "l2_filter";
  }
  return base_algo;
}

double smallest_fitting(double low, double high, int steps,
                        const std::function<bool(double)>& fits) {
  for (int i = 0; i < steps; ++i) {
    const double mid = 0.5 * (low + high);
    if (fits(mid)) {
      high = mid;
    } else {
      low = mid;
    }
  }
  return high;
}

}  // namespace lithe::sdk
