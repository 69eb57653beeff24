// L1/L2 filter pruning of Conv2d layers (NNI v2.0 L1FilterPruner / L2FilterPruner, normal mode,
// reference §2.0, §2.3). Each filter i is scored by the norm of its raw current weight W[i]
// (NNI ignores the current mask here), and exactly num_prune = int(F * sparsity) filters with
// the smallest score are pruned, ties broken by the lower filter index (Lithe departure 1; NNI
// prunes every filter tied with its threshold). Layers with F < 2 or num_prune < 1 keep their
// masks. Bias masks follow the filters.
#include "filter_norm.h"

#include <lithe/kernels/masking.h>
#include <lithe/sdk.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace lithe::plugins::filter_norm {
namespace {

const char* algorithm_name(Norm norm) { return norm == Norm::kL1 ? "l1_filter" : "l2_filter"; }

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
void check_conv2d_op_types(const sdk::Options& entry, const char* algorithm) {
  if (!entry.has("op_types")) {
    return;
  }
  const auto op_types = entry.require<std::vector<std::string>>("op_types");
  for (const std::string& type : op_types) {
    LITHE_CHECK(type == "Conv2d", sdk::Errc::kInvalidConfig, entry.path(),
                "/op_types must contain only \"Conv2d\" (", algorithm,
                " prunes Conv2d filters only; \"default\" is not accepted), got ",
                json_string_list(op_types));
  }
}

void check_conv2d_layer(const sdk::LayerView& layer, const char* algorithm) {
  LITHE_CHECK(layer.op_type() == "Conv2d", sdk::Errc::kUnsupportedLayer, "layer '", layer.name(),
              "' is a ", layer.op_type(), "; ", algorithm,
              " prunes Conv2d filters only (restrict the config entry with op_types [\"Conv2d\"])");
  LITHE_CHECK(layer.weight().dim() >= 2, sdk::Errc::kUnsupportedLayer, "layer '", layer.name(),
              "': ", algorithm, " needs a weight of at least 2 dimensions [filters, ...], got ",
              layer.weight().sizes());
}

sdk::Masks copy_of(const sdk::Masks& masks) {
  sdk::Masks out;
  out.weight = masks.weight.clone();
  if (masks.bias.has_value()) {
    out.bias = masks.bias->clone();
  }
  return out;
}

class FilterNormMasker final : public sdk::WeightMasker {
 public:
  explicit FilterNormMasker(Norm norm) : norm_(norm) {}

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer, double sparsity) override {
    check_conv2d_layer(layer, algorithm_name(norm_));
    const at::Tensor& weight = layer.weight();
    const int64_t filters = weight.size(0);
    const int64_t num_prune = sdk::prune_count(filters, sparsity);
    if (filters < 2 || num_prune < 1) {
      return copy_of(layer.masks());  // NNI: the layer's masks stay as they are
    }
    const at::Tensor keep = kernels::exact_k_keep_mask(filter_importance(weight, norm_), num_prune,
                                                       /*by_magnitude=*/false);
    std::vector<int64_t> shape(static_cast<size_t>(weight.dim()), 1);
    shape[0] = filters;
    sdk::Masks masks;
    masks.weight = keep.reshape(shape).expand(weight.sizes()).contiguous();
    if (layer.bias().has_value()) {
      masks.bias = keep;
    }
    return masks;
  }

 private:
  Norm norm_;
};

// One-shot pruning (NNI's OneshotPruner) plus the filter pruners' op_types rule.
class FilterNormPruner final : public sdk::Pruner {
 public:
  explicit FilterNormPruner(Norm norm)
      : norm_(norm),
        one_shot_(sdk::make_one_shot_pruner(std::make_unique<FilterNormMasker>(norm))) {}

  void validate_config(const sdk::Options& entry) const override {
    check_conv2d_op_types(entry, algorithm_name(norm_));
    one_shot_->validate_config(entry);  // "sparsity" in [0, 1)
  }
  void attach(sdk::CompressionContext& context) override { one_shot_->attach(context); }
  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    return one_shot_->calc_mask(layer);
  }

 private:
  Norm norm_;
  std::unique_ptr<sdk::Pruner> one_shot_;
};

void register_norm(sdk::Registry& registry, Norm norm, const char* masker_description,
                   const char* pruner_description) {
  registry.add_masker({algorithm_name(norm), masker_description},
                      [norm](const sdk::Options&, const sdk::Registry&) {
                        return std::make_unique<FilterNormMasker>(norm);
                      });
  registry.add_pruner({algorithm_name(norm), pruner_description},
                      [norm](const sdk::Options&, const sdk::Registry&) {
                        return std::make_unique<FilterNormPruner>(norm);
                      });
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
  register_norm(registry, Norm::kL1, "the Conv2d filters with the smallest L1 norm",
                "one-shot pruning of the Conv2d filters with the smallest L1 norm");
  register_norm(registry, Norm::kL2, "the Conv2d filters with the smallest L2 norm",
                "one-shot pruning of the Conv2d filters with the smallest L2 norm");
}

}  // namespace lithe::plugins::filter_norm

LITHE_PLUGIN("filter_norm", "1.0.0", lithe::plugins::filter_norm::register_algorithms)
