// NNI's OneshotPruner: each layer's masks are computed once by a masker at the layer's
// configured sparsity; a masker that cannot decide yet (returns nullopt) is asked again at the
// next mask update.
#include <cmath>
#include <set>

#include "lithe/sdk/error.h"
#include "lithe/sdk/pruner.h"

namespace lithe::sdk {
namespace {

class OneShotPruner final : public Pruner {
 public:
  explicit OneShotPruner(std::unique_ptr<WeightMasker> masker) : masker_(std::move(masker)) {
    LITHE_INTERNAL_ASSERT(masker_ != nullptr);
  }

  void validate_config(const Options& entry) const override {
    const double sparsity = entry.require<double>("sparsity");
    LITHE_CHECK(sparsity >= 0.0 && sparsity < 1.0, Errc::kInvalidConfig, entry.path(),
                "/sparsity must be a number in [0, 1), got ", sparsity);
  }

  void attach(CompressionContext& context) override { masker_->attach(context); }

  std::optional<Masks> calc_mask(LayerView& layer) override {
    if (done_.count(layer.index()) != 0) {
      return std::nullopt;
    }
    std::optional<Masks> masks =
        masker_->calc_mask(layer, layer.config().require<double>("sparsity"));
    if (masks.has_value()) {
      done_.insert(layer.index());
    }
    return masks;
  }

 private:
  std::unique_ptr<WeightMasker> masker_;
  std::set<int64_t> done_;  // layers whose masks are final (NNI's if_calculated)
};

}  // namespace

std::unique_ptr<Pruner> make_one_shot_pruner(std::unique_ptr<WeightMasker> masker) {
  return std::make_unique<OneShotPruner>(std::move(masker));
}

int64_t prune_count(int64_t count, double sparsity) {
  // Python's int(): truncation toward zero of the double product (0.82 * 150 -> 122).
  return static_cast<int64_t>(std::trunc(static_cast<double>(count) * sparsity));
}

}  // namespace lithe::sdk
