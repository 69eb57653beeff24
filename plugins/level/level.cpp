// Level pruning: zero the `sparsity` fraction of smallest-|w| entries of each layer's weight,
// layer by layer (NNI v2.0 LevelPruner, reference §2.2). Lithe departure 1: exactly
// k = int(numel * sparsity) entries are pruned, ties at the threshold broken by lower flat index
// (NNI prunes every entry tied with the threshold). Scores are |weight * current mask|, so
// entries already pruned count among the smallest, as in NNI.
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
    const at::Tensor scores = weight * layer.masks().weight.to(weight.dtype());
    masks.weight = kernels::exact_k_keep_mask(scores, k, /*by_magnitude=*/true);
    return masks;  // bias mask left as it is
  }
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_masker({"level", "the smallest-|w| entries of each weight tensor (unstructured)"},
                      [](const sdk::Options&, const sdk::Registry&) {
                        return std::make_unique<LevelMasker>();
                      });
  registry.add_pruner(
      {"level", "one-shot unstructured pruning of each layer to its configured sparsity"},
      [](const sdk::Options&, const sdk::Registry&) {
        return sdk::make_one_shot_pruner(std::make_unique<LevelMasker>());
      });
}

}  // namespace lithe::plugins::level

LITHE_PLUGIN("level", "1.0.0", lithe::plugins::level::register_algorithms)
