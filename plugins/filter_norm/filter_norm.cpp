// L1/L2 filter pruning of Conv1d/2d/3d and Linear layers (NNI v2.0 L1FilterPruner /
// L2FilterPruner, reference §2.0, §2.3, §2.8; v2.0 takes Conv2d only, NNI 2.5's L1NormPruner
// also Linear, whose filters are its weight rows: departure 6). This plugin is only the
// criterion: filter i is scored by the norm of its raw current weight W[i] (NNI ignores the current mask here). The SDK's filter framework
// (lithe/sdk/filter_pruning.h) turns the scores into masks: exactly num_prune = int(F * sparsity)
// filters, ties to the lower filter index (Lithe departure 1; NNI prunes every filter tied with
// its threshold), and with option dependency_aware the same channels in every layer whose
// outputs are added together (departure 5).
#include "filter_norm.h"

#include <lithe/sdk.h>

#include <memory>
#include <optional>
#include <string>

namespace lithe::plugins::filter_norm {
namespace {

const char* algorithm_name(Norm norm) { return norm == Norm::kL1 ? "l1_filter" : "l2_filter"; }

class FilterNormScorer final : public sdk::FilterScorer {
 public:
  explicit FilterNormScorer(Norm norm) : norm_(norm) {}

  std::optional<at::Tensor> filter_scores(sdk::LayerView& layer) override {
    LITHE_CHECK(layer.weight().dim() >= 2, sdk::Errc::kUnsupportedLayer, "layer '", layer.name(),
                "': ", algorithm_name(norm_),
                " needs a weight of at least 2 dimensions [filters, ...], got ",
                layer.weight().sizes());
    return filter_importance(layer.weight(), norm_);
  }

 private:
  Norm norm_;
};

void register_norm(sdk::Registry& registry, Norm norm, const char* nni_class,
                   const char* masker_description, const char* pruner_description) {
  registry.add_masker({algorithm_name(norm), masker_description},
                      [norm](const sdk::Options&, const sdk::Registry&) {
                        return sdk::make_filter_masker_for(
                            sdk::filter_op_types(), std::make_shared<FilterNormScorer>(norm),
                            algorithm_name(norm));
                      });
  registry.add_pruner({algorithm_name(norm), pruner_description},
                      [norm](const sdk::Options& options, const sdk::Registry&) {
                        return sdk::make_filter_pruner_for(
                            sdk::filter_op_types(), std::make_shared<FilterNormScorer>(norm),
                            algorithm_name(norm), options);
                      });
  registry.add_nni_counterpart({algorithm_name(norm), nni_class, "one_shot"});
  registry.describe_options(algorithm_name(norm), sdk::OptionSchema()
                                                      .add(sdk::sparsity_or_total_keys())
                                                      .add(sdk::filter_pruner_keys()));
}

}  // namespace

at::Tensor filter_importance(const at::Tensor& weight, Norm norm) {
  const at::Tensor w = weight.detach().to(at::kFloat).reshape({weight.size(0), -1});
  if (norm == Norm::kL1) {
    return w.abs().sum(1);  // NNI: weight.abs().view(F, -1).sum(dim=1)
  }
  return w.pow(2).sum(1).sqrt();  // NNI: torch.sqrt((w ** 2).sum(dim=1))
}

void register_algorithms(sdk::Registry& registry) {
  register_norm(registry, Norm::kL1, "L1FilterPruner",
                "the Conv/Linear filters (output channels) with the smallest L1 norm",
                "one-shot pruning of the Conv1d/2d/3d and Linear filters (output channels) with "
                "the smallest L1 norm (option dependency_aware)");
  register_norm(registry, Norm::kL2, "L2FilterPruner",
                "the Conv/Linear filters (output channels) with the smallest L2 norm",
                "one-shot pruning of the Conv1d/2d/3d and Linear filters (output channels) with "
                "the smallest L2 norm (option dependency_aware)");
}

}  // namespace lithe::plugins::filter_norm

LITHE_PLUGIN("filter_norm", "1.4.0", lithe::plugins::filter_norm::register_algorithms)
