// Network slimming (NNI v2.0 SlimPruner, reference §2.5): channels of BatchNorm2d layers are
// ranked by |γ| (the BN weight) over ALL selected layers together, and one global cut is made
// with the sparsity of the first config entry (NNI: config_list[0]['sparsity']). A layer's own
// sparsity only gates whether the cut is applied to it: int(C * sparsity) >= 1 and C >= 2.
//
// Lithe departure 1: exactly k = int(total_channels * sparsity) channels are selected, ties
// broken by lower global index (layer order, then channel). NNI keeps |γ| > threshold, so every
// channel tied with the threshold is pruned (with default BN init, γ = 1 everywhere, NNI prunes
// all channels). Where no tie straddles the threshold the masks are identical to NNI's.
//
// The ranking is computed once, in attach() (NNI: at construction), from |γ × current mask|.
//
// Sparse training (NNI v2.2+ SlimPruner's `sparsity_training_epochs` and `scale`; slim 1.2.0):
// before ranking, the model trains for that many epochs with scale · Σ|γ| over the selected
// layers added to the loss (an SDK 1.7 loss term, through the host's fine_tune), which drives
// the γ of unimportant channels toward zero so that removing them costs less. NNI adds
// scale · sign(γ) to γ's gradient between backward and step: the same gradient, as autograd's
// derivative of |γ| is sign(γ) (0 at 0).
#include "slim.h"

#include <lithe/kernels/masking.h>
#include <lithe/sdk.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lithe::plugins::slim {
namespace {

constexpr const char* kBatchNorm2d = "BatchNorm2d";

// ["a", "b"] for messages.
std::string quoted_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i == 0 ? "\"" : ", \"") + items[i] + "\"";
  }
  return out + "]";
}

void check_batchnorm(const sdk::LayerView& layer) {
  LITHE_CHECK(layer.op_type() == kBatchNorm2d, sdk::Errc::kUnsupportedLayer, "layer '",
              layer.name(), "' has op type '", layer.op_type(),
              "'; slim prunes BatchNorm2d layers only (op_types must be [\"BatchNorm2d\"])");
  LITHE_CHECK(layer.weight().dim() == 1, sdk::Errc::kUnsupportedLayer, "layer '", layer.name(),
              "' (BatchNorm2d): slim needs a 1-D weight (one γ per channel), got shape ",
              layer.weight().sizes());
}

const sdk::OptionSchema& slim_keys() {
  static const sdk::OptionSchema schema = [] {
    sdk::OptionSchema keys;
    keys.add(sdk::sparsity_keys());
    keys.add(sdk::option("sparsity_training_epochs", sdk::OptionType::kInteger,
                         "epochs of sparse training (the L1 penalty on gamma) before ranking; "
                         "0 = one-shot, NNI v2.0")
                 .defaults_to("0")
                 .at_least(0));
    keys.add(sdk::option("max_sparsity_per_layer", sdk::OptionType::kNumber,
                         "the most of one layer's channels the global cut may take "
                         "(int(max * C)); 1 = no cap, NNI")
                 .defaults_to("1")
                 .above(0)
                 .at_most(1));
    keys.add(sdk::option("scale", sdk::OptionType::kNumber,
                         "weight of the L1 penalty scale * sum|gamma| during sparse training")
                 .defaults_to("0.0001")
                 .at_least(0));
    return keys;
  }();
  return schema;
}

class SlimPruner final : public sdk::Pruner {
 public:
  explicit SlimPruner(const sdk::Options& options)
      : training_epochs_(slim_keys().read<int64_t>(options, "sparsity_training_epochs")),
        scale_(slim_keys().read<double>(options, "scale")),
        max_per_layer_(slim_keys().read<double>(options, "max_sparsity_per_layer")) {}

  void validate_config(const sdk::Options& entry) const override {
    const double sparsity = sdk::sparsity_keys().read<double>(entry, "sparsity");
    // NNI's schema: 'op_types': ['BatchNorm2d'] is required, nothing else is accepted.
    LITHE_CHECK(entry.has("op_types"), sdk::Errc::kInvalidConfig, entry.path(),
                "/op_types must be exactly [\"BatchNorm2d\"] (slim prunes BatchNorm2d channels "
                "only), got none (the key is missing)");
    const auto op_types = entry.require<std::vector<std::string>>("op_types");
    LITHE_CHECK(op_types == std::vector<std::string>{kBatchNorm2d}, sdk::Errc::kInvalidConfig,
                entry.path(),
                "/op_types must be exactly [\"BatchNorm2d\"] (slim prunes BatchNorm2d channels "
                "only), got ",
                quoted_list(op_types));
    // The host validates entries in list order (exclude entries are skipped): the first call
    // carries config_list[0]'s sparsity, which sets the global threshold as in NNI.
    if (!first_sparsity_.has_value()) {
      first_sparsity_ = sparsity;
      first_path_ = entry.path();
    } else if (sparsity != *first_sparsity_) {
      LITHE_LOG(kWarn, entry.path(), "/sparsity ", sparsity,
                " only gates whether its layers are pruned; the global channel count uses ",
                first_path_, "/sparsity ", *first_sparsity_, " (NNI: config_list[0])");
    }
  }

  void attach(sdk::CompressionContext& context) override {
    keep_.clear();
    done_.clear();
    const std::vector<sdk::LayerView*> layers = context.layers();
    if (layers.empty()) {
      return;
    }
    for (const sdk::LayerView* layer : layers) {
      check_batchnorm(*layer);
    }
    if (training_epochs_ > 0) {
      sparse_training(context, layers);
    }
    // validate_config always runs first in a session; the fallback serves direct use only.
    const double sparsity = first_sparsity_.has_value()
                                ? *first_sparsity_
                                : layers.front()->config().require<double>("sparsity");
    const at::Device device = layers.front()->weight().device();
    std::vector<at::Tensor> scores;
    scores.reserve(layers.size());
    for (const sdk::LayerView* layer : layers) {
      const at::Tensor gamma = layer->weight().detach().to(at::kFloat);
      scores.push_back((gamma.abs() * layer->masks().weight.to(gamma.device(), at::kFloat))
                           .to(device)
                           .reshape({-1}));
    }
    const at::Tensor all = at::cat(scores);
    const int64_t k = sdk::prune_count(all.numel(), sparsity);
    // Exactly k channels, smallest |γ| first, ties by lower global index (departure 1); with
    // max_sparsity_per_layer < 1, no layer loses more than int(max · C) of its channels.
    at::Tensor keep;
    if (max_per_layer_ < 1.0) {
      std::vector<int64_t> caps;
      for (const at::Tensor& layer_scores : scores) {
        caps.push_back(sdk::prune_count(layer_scores.numel(), max_per_layer_));
      }
      std::vector<at::Tensor> pruned = sdk::select_global(scores, caps, k);
      for (at::Tensor& p : pruned) {
        p = p.logical_not().to(at::kFloat).reshape({-1});
      }
      keep = at::cat(pruned);
    } else {
      keep = kernels::exact_k_keep_mask(all, k, /*by_magnitude=*/true);
    }
    int64_t offset = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      const int64_t channels = scores[i].numel();
      keep_[layers[i]->index()] =
          keep.narrow(0, offset, channels).to(layers[i]->weight().device()).clone();
      offset += channels;
    }
    LITHE_LOG(kInfo, "slim: ", k, " of ", all.numel(), " BatchNorm2d channels selected over ",
              layers.size(), " layers (sparsity ", sparsity, ")");
  }

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    check_batchnorm(layer);
    if (done_.count(layer.index()) != 0) {
      return std::nullopt;  // one-shot (NNI's if_calculated)
    }
    const auto it = keep_.find(layer.index());
    LITHE_CHECK(it != keep_.end(), sdk::Errc::kInternal, "layer '", layer.name(),
                "': slim's calc_mask was called before attach (the global ranking is computed "
                "in attach)");
    const int64_t channels = layer.weight().size(0);
    LITHE_CHECK(it->second.numel() == channels, sdk::Errc::kShapeMismatch, "layer '",
                layer.name(), "': ", channels, " channels now, ", it->second.numel(),
                " when slim ranked them in attach");
    // NNI's per-layer gate: the global cut applies only if this layer's own sparsity would
    // prune at least one channel.
    const int64_t num_prune =
        sdk::prune_count(channels, layer.config().require<double>("sparsity"));
    sdk::Masks masks;
    if (channels >= 2 && num_prune >= 1) {
      masks.weight = it->second.clone();
      if (layer.bias().has_value()) {
        masks.bias = it->second.clone();
      }
    } else {
      masks = sdk::Masks::keep_all(layer);
    }
    done_.insert(layer.index());
    return masks;
  }

 private:
  // Trains with scale · Σ|γ| added to the loss; the term is removed whatever happens.
  void sparse_training(sdk::CompressionContext& context,
                       const std::vector<sdk::LayerView*>& layers) const {
    const double scale = scale_;
    const int64_t id = context.add_loss_term([layers, scale] {
      at::Tensor penalty;
      for (const sdk::LayerView* layer : layers) {
        const at::Tensor l1 = layer->weight().abs().sum();
        penalty = penalty.defined() ? penalty + l1 : l1;
      }
      return penalty * scale;
    });
    try {
      LITHE_LOG(kInfo, "slim: sparse training for ", training_epochs_, " epoch(s), scale ",
                scale);
      context.fine_tune(training_epochs_);
    } catch (...) {
      context.remove_loss_term(id);
      throw;
    }
    context.remove_loss_term(id);
  }

  int64_t training_epochs_;
  double scale_;
  double max_per_layer_;
  mutable std::optional<double> first_sparsity_;  // set by the first validate_config call
  mutable std::string first_path_;
  std::map<int64_t, at::Tensor> keep_;  // layer index -> its slice of the global keep vector
  std::set<int64_t> done_;              // layers whose masks are final
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_pruner(
      {"slim", "one-shot BatchNorm2d channel pruning by a global |gamma| ranking (network slimming)"},
      [](const sdk::Options& options, const sdk::Registry&) {
        return std::make_unique<SlimPruner>(options);
      });
  registry.add_nni_counterpart({"slim", "SlimPruner", "one_shot_global"});
  registry.describe_options("slim", slim_keys());
}

}  // namespace lithe::plugins::slim

LITHE_PLUGIN("slim", "1.2.0", lithe::plugins::slim::register_algorithms)
