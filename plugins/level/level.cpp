// Level pruning: zero the `sparsity` fraction of smallest-|w| entries of each layer's weight,
// layer by layer (NNI v2.0 LevelPruner, reference §2.2). Lithe departure 1: exactly
// k = int(numel * sparsity) entries are pruned, ties at the threshold broken by lower flat index
// (NNI prunes every entry tied with the threshold). Entries already pruned by the current mask
// rank first (NNI scores them |w · mask| = 0, so they come first too, except against live
// weights that are exactly 0, which NNI may prefer by position and so revive a pruned one).
// An entry with total_sparsity ranks the weights of all its layers together (global_sparsity.h).
#include "level.h"

#include <lithe/kernels/masking.h>
#include <lithe/sdk.h>

namespace lithe::plugins::level {
namespace {

class LevelMasker final : public sdk::WeightMasker {
 public:
  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer, double sparsity) override {
    const at::Tensor weight = layer.weight().detach();
    const int64_t k = sdk::prune_count(weight.numel(), sparsity);
    sdk::Masks masks;
    if (k == 0) {
      masks.weight = at::ones(weight.sizes(), weight.options().dtype(at::kFloat));
      return masks;
    }
    const at::Tensor& current = layer.masks().weight;
    if (current.min().item<float>() > 0) {  // nothing pruned yet: rank |w| directly (fast path)
      masks.weight = kernels::exact_k_keep_mask(weight, k, /*by_magnitude=*/true);
      return masks;  // bias mask left as it is
    }
    // Already pruned weights rank before every live one (score −1 < |w|), so a schedule's
    // growing masks never revive a pruned weight, even when a live weight is exactly 0.
    const at::Tensor scores = at::where(current.eq(0), at::full({}, -1.0, weight.options()),
                                        weight.abs());
    masks.weight = kernels::exact_k_keep_mask(scores, k, /*by_magnitude=*/false);
    return masks;
  }
};

// Global sparsity (total_sparsity): every weight of the entry's layers ranked by |w| together,
// weights pruned before first, as the masker ranks them within a layer.
sdk::UnitRanking magnitude_ranking() {
  sdk::UnitRanking ranking;
  ranking.scores = [](sdk::LayerView& layer) -> std::optional<at::Tensor> {
    const at::Tensor weight = layer.weight().detach();
    return at::where(layer.masks().weight.eq(0), at::full({}, -1.0, weight.options()),
                     weight.abs());
  };
  ranking.masks = [](sdk::LayerView& layer, const at::Tensor& pruned) {
    sdk::Masks masks;
    masks.weight = pruned.logical_not().to(layer.weight().device(), at::kFloat);
    return masks;  // bias mask left as it is
  };
  return ranking;
}

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_masker({"level", "the smallest-|w| entries of each weight tensor (unstructured)"},
                      [](const sdk::Options&, const sdk::Registry&) {
                        return std::make_unique<LevelMasker>();
                      });
  registry.add_pruner(
      {"level", "one-shot unstructured pruning of each layer to its configured sparsity"},
      [](const sdk::Options&, const sdk::Registry&) {
        return sdk::make_one_shot_pruner_ranked(std::make_unique<LevelMasker>(),
                                                magnitude_ranking(), "level", {});
      });
  registry.add_nni_counterpart({"level", "LevelPruner", "one_shot"});
  registry.describe_options("level", sdk::sparsity_or_total_keys());
}

}  // namespace lithe::plugins::level

LITHE_PLUGIN("level", "1.2.0", lithe::plugins::level::register_algorithms)
