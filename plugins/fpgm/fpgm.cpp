// FPGM filter pruning of Conv1d/2d/3d and Linear layers (NNI v2.0 FPGMPruner, reference §2.0,
// §2.4, §2.8; v2.0 takes Conv2d only, departure 6): the
// filters nearest the geometric median of the layer's filters are the most replaceable. This
// plugin is only the criterion: filter i is scored by d[i] = Σ_j ||W[i] − W[j]||₂ over the raw
// current weight (NNI ignores the current mask for the score). The SDK's filter framework
// (lithe/sdk/filter_pruning.h) turns the scores into masks: exactly num_prune = int(F * sparsity)
// filters with the smallest d, ties to the lower filter index (NNI's stable sorted(), N3), zeroed
// in a copy of the current masks, and with option dependency_aware the same channels in every
// layer whose outputs are added together (departure 5).
#include "fpgm.h"

#include <lithe/sdk.h>

#include <memory>
#include <optional>
#include <vector>

namespace lithe::plugins::fpgm {
namespace {

constexpr const char* kAlgorithm = "fpgm";

class FpgmScorer final : public sdk::FilterScorer {
 public:
  std::optional<at::Tensor> filter_scores(sdk::LayerView& layer) override {
    const at::Tensor& weight = layer.weight();
    LITHE_CHECK(weight.dim() >= 2 && weight.dim() <= 5, sdk::Errc::kUnsupportedLayer, "layer '",
                layer.name(), "': ", kAlgorithm,
                " needs a 2- to 5-dimensional weight [filters, ...], got shape ", weight.sizes());
    return distance_sums(weight);
  }
};

}  // namespace

at::Tensor distance_sums(const at::Tensor& weight) {
  const int64_t filters = weight.size(0);
  const at::Tensor w = weight.detach().to(at::kFloat).reshape({filters, -1});
  // One filter at a time with NNI's exact operations (FPGMPrunerMasker._get_distance_sum):
  // batched forms (cdist, a [F, F, N] difference) reduce in another order and can differ in the
  // last bit, which reorders near-equal distances.
  std::vector<at::Tensor> sums;
  sums.reserve(static_cast<size_t>(filters));
  for (int64_t i = 0; i < filters; ++i) {
    const at::Tensor x = w - w[i].unsqueeze(0).expand(w.sizes());
    sums.push_back((x * x).sum(-1).sqrt().sum());
  }
  return at::stack(sums);
}

void register_algorithms(sdk::Registry& registry) {
  registry.add_masker({kAlgorithm,
                       "the Conv/Linear filters nearest the geometric median of their layer"},
                      [](const sdk::Options&, const sdk::Registry&) {
                        return sdk::make_filter_masker_for(
                            sdk::filter_op_types(), std::make_shared<FpgmScorer>(), kAlgorithm);
                      });
  registry.add_pruner({kAlgorithm,
                       "one-shot pruning of the Conv1d/2d/3d and Linear filters nearest their "
                       "layer's geometric median (option dependency_aware)"},
                      [](const sdk::Options& options, const sdk::Registry&) {
                        return sdk::make_filter_pruner_for(
                            sdk::filter_op_types(), std::make_shared<FpgmScorer>(), kAlgorithm,
                            options);
                      });
  registry.add_nni_counterpart({kAlgorithm, "FPGMPruner", "one_shot"});
  registry.describe_options(
      kAlgorithm, sdk::OptionSchema().add(sdk::sparsity_or_total_keys()).add(sdk::filter_pruner_keys()));
}

}  // namespace lithe::plugins::fpgm

LITHE_PLUGIN("fpgm", "1.4.0", lithe::plugins::fpgm::register_algorithms)
