// Balanced (row-wise) magnitude pruning: every output unit (row of the weight viewed as
// [size(0), numel / size(0)]) loses the same number of weights, its own k smallest |w|, with
// k = prune_count(row length, sparsity). Equal non-zeros per row is what load-balanced sparse
// kernels need (Yao et al., "Balanced Sparsity for Efficient DNN Inference", AAAI 2019).
// Scores are |w * current mask|, so weights pruned earlier count among the smallest; ties are
// broken by lower index within the row (lithe::kernels::exact_k_keep_mask).
//
// A third-party plugin: it includes only the installed SDK and kernel headers, and is built
// with find_package(Lithe 1) + lithe_add_plugin() (see CMakeLists.txt and README.md).
#include <lithe/kernels/masking.h>
#include <lithe/sdk.h>

namespace acme::magnitude {
namespace {

class RowMagnitudeMasker final : public lithe::sdk::WeightMasker {
 public:
  std::optional<lithe::sdk::Masks> calc_mask(lithe::sdk::LayerView& layer,
                                             double sparsity) override {
    const at::Tensor weight = layer.weight().detach();
    LITHE_CHECK(weight.numel() > 0, lithe::sdk::Errc::kUnsupportedLayer, "layer '", layer.name(),
                "': masker 'acme_magnitude' needs a non-empty weight, got shape ", weight.sizes());
    // A 0-d or 1-d weight (e.g. a norm layer's) is a single row.
    const int64_t rows = weight.dim() >= 2 ? weight.size(0) : 1;
    const int64_t row_length = weight.numel() / rows;
    const int64_t k = lithe::sdk::prune_count(row_length, sparsity);
    lithe::sdk::Masks masks;
    if (k == 0) {
      masks.weight = at::ones(weight.sizes(), weight.options().dtype(at::kFloat));
      return masks;
    }
    const at::Tensor scores =
        (weight * layer.masks().weight.to(weight.dtype())).reshape({rows, row_length});
    at::Tensor keep = at::empty({rows, row_length}, weight.options().dtype(at::kFloat));
    for (int64_t row = 0; row < rows; ++row) {
      keep[row].copy_(lithe::kernels::exact_k_keep_mask(scores[row], k, /*by_magnitude=*/true));
    }
    masks.weight = keep.reshape(weight.sizes());
    return masks;  // bias mask left as it is
  }
};

}  // namespace

/// Registers masker and pruner "acme_magnitude". External linkage so that the OBJECT library
/// lithe_add_plugin() also builds (for unit tests) can call it.
void register_algorithms(lithe::sdk::Registry& registry) {
  registry.add_masker(
      {"acme_magnitude", "the smallest-|w| entries of each output unit's row (balanced)"},
      [](const lithe::sdk::Options&, const lithe::sdk::Registry&) {
        return std::make_unique<RowMagnitudeMasker>();
      });
  registry.add_pruner(
      {"acme_magnitude", "one-shot balanced pruning: each row to the configured sparsity"},
      [](const lithe::sdk::Options&, const lithe::sdk::Registry&) {
        return lithe::sdk::make_one_shot_pruner(std::make_unique<RowMagnitudeMasker>());
      });
}

}  // namespace acme::magnitude

LITHE_PLUGIN("acme_magnitude", "0.3.0", acme::magnitude::register_algorithms)
