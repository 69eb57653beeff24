// FPGM filter pruning of Conv2d layers (NNI v2.0 FPGMPruner, normal mode, reference §2.0, §2.4):
// the filters nearest the geometric median of the layer's filters are the most replaceable.
// Filter i is scored by d[i] = Σ_j ||W[i] − W[j]||₂ over the raw current weight (NNI ignores the
// current mask for the score), and exactly num_prune = int(F * sparsity) filters with the
// smallest d are pruned, ties to the lower filter index (NNI's stable sorted(), N3). As in NNI,
// the pruned filters are zeroed in the layer's current masks (weight and bias). Layers with
// F < 2 or num_prune < 1 keep their masks.
#include "fpgm.h"

#include <lithe/kernels/masking.h>
#include <lithe/sdk.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace lithe::plugins::fpgm {
namespace {

constexpr const char* kAlgorithm = "fpgm";

std::string json_string_list(const std::vector<std::string>& values) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < values.size(); ++i) {
    out << (i == 0 ? "" : ", ") << '"' << values[i] << '"';
  }
  out << ']';
  return out.str();
}

// NNI's schema for filter pruners: every op_types element must equal 'Conv2d' ('default' too is
// rejected).
void check_conv2d_op_types(const sdk::Options& entry) {
  if (!entry.has("op_types")) {
    return;
  }
  const auto op_types = entry.require<std::vector<std::string>>("op_types");
  for (const std::string& type : op_types) {
    LITHE_CHECK(type == "Conv2d", sdk::Errc::kInvalidConfig, entry.path(),
                "/op_types must contain only \"Conv2d\" (", kAlgorithm,
                " prunes Conv2d filters only; \"default\" is not accepted), got ",
                json_string_list(op_types));
  }
}

sdk::Masks copy_of(const sdk::Masks& masks) {
  sdk::Masks out;
  out.weight = masks.weight.clone();
  if (masks.bias.has_value()) {
    out.bias = masks.bias->clone();
  }
  return out;
}

class FpgmMasker final : public sdk::WeightMasker {
 public:
  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer, double sparsity) override {
    LITHE_CHECK(layer.op_type() == "Conv2d", sdk::Errc::kUnsupportedLayer, "layer '", layer.name(),
                "' is a ", layer.op_type(), "; ", kAlgorithm,
                " prunes Conv2d filters only (restrict the config entry with op_types "
                "[\"Conv2d\"])");
    const at::Tensor& weight = layer.weight();
    const int64_t filters = weight.size(0);
    const int64_t num_prune = sdk::prune_count(filters, sparsity);
    sdk::Masks masks = copy_of(layer.masks());
    if (filters < 2 || num_prune < 1) {
      return masks;  // NNI: the layer's masks stay as they are
    }
    LITHE_CHECK(weight.dim() == 3 || weight.dim() == 4, sdk::Errc::kUnsupportedLayer, "layer '",
                layer.name(), "': ", kAlgorithm, " needs a 3- or 4-dimensional weight, got shape ",
                weight.sizes());
    const at::Tensor keep =
        kernels::exact_k_keep_mask(distance_sums(weight), num_prune, /*by_magnitude=*/false);
    std::vector<int64_t> shape(static_cast<size_t>(weight.dim()), 1);
    shape[0] = filters;
    // NNI zeroes the pruned filters in a copy of the current masks.
    masks.weight = masks.weight * keep.reshape(shape);
    if (masks.bias.has_value()) {
      masks.bias = *masks.bias * keep;
    }
    return masks;
  }
};

// One-shot pruning (NNI's OneshotPruner) plus the filter pruners' op_types rule.
class FpgmPruner final : public sdk::Pruner {
 public:
  FpgmPruner() : one_shot_(sdk::make_one_shot_pruner(std::make_unique<FpgmMasker>())) {}

  void validate_config(const sdk::Options& entry) const override {
    check_conv2d_op_types(entry);
    one_shot_->validate_config(entry);  // "sparsity" in [0, 1)
  }
  void attach(sdk::CompressionContext& context) override { one_shot_->attach(context); }
  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    return one_shot_->calc_mask(layer);
  }

 private:
  std::unique_ptr<sdk::Pruner> one_shot_;
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
  registry.add_masker(
      {"fpgm", "the Conv2d filters nearest the geometric median of their layer"},
      [](const sdk::Options&, const sdk::Registry&) { return std::make_unique<FpgmMasker>(); });
  registry.add_pruner(
      {"fpgm", "one-shot pruning of the Conv2d filters nearest their layer's geometric median"},
      [](const sdk::Options&, const sdk::Registry&) { return std::make_unique<FpgmPruner>(); });
}

}  // namespace lithe::plugins::fpgm

LITHE_PLUGIN("fpgm", "1.0.0", lithe::plugins::fpgm::register_algorithms)
