// ADMM pruning (NNI v2.0 ADMMPruner, reference §2.11; Zhang et al., "A Systematic DNN Weight
// Pruning Framework using Alternating Direction Method of Multipliers", 2018). Pruning is posed
// as training under the constraint "W_i has the sparsity of its entry", split with an auxiliary
// Z_i (the projection of W_i onto that set) and a scaled dual U_i:
//
//   Z_i = W_i, U_i = 0
//   repeat num_iterations:
//     train training_epochs epochs; before every optimizer step W_i -= row · (W_i − Z_i + U_i)
//     Z_i = (W_i + U_i) · base_mask(W_i + U_i, sparsity_i)     (the projection)
//     U_i = U_i + W_i − Z_i
//   masks: the base masker on the final W_i (NNI: update_mask(), not Z)
//
// The training is the host's fine_tune (SDK 1.7) with the session's training options; the
// proximal step is a before-optimizer-step callback, as NNI's trainer `callback()`. As in NNI,
// Z_i starts as W_i itself (NNI's Z aliases W's storage), so the first iteration's proximal term
// is identically zero: the first iteration trains the model unconstrained.
//
// Departures: the training options are the session's (NNI hard-codes Adam, lr 1e-3, weight
// decay 5e-5 and cross-entropy; `lithe compress --optimizer adam --lr 0.001 --weight-decay 5e-5`
// is NNI's), and each iteration's fine-tune starts with a fresh optimizer state (NNI's one Adam
// keeps its moments across iterations).
#include "admm.h"

#include <lithe/sdk.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lithe::plugins::admm {
namespace {

constexpr const char* kAlgorithm = "admm";

const sdk::OptionSchema& admm_keys() {
  static const sdk::OptionSchema schema = [] {
    sdk::OptionSchema keys;
    keys.add(sdk::sparsity_keys());
    keys.add(sdk::option("num_iterations", sdk::OptionType::kInteger,
                         "ADMM iterations (train, then update Z and U)")
                 .defaults_to("30")
                 .above(0));
    keys.add(sdk::option("training_epochs", sdk::OptionType::kInteger,
                         "training epochs per iteration (the session's fine-tuner)")
                 .defaults_to("5")
                 .above(0));
    keys.add(sdk::option("row", sdk::OptionType::kNumber,
                         "rho, the penalty of the proximal step W -= row * (W - Z + U)")
                 .defaults_to("0.0001")
                 .above(0));
    keys.add(sdk::option("base_algo", sdk::OptionType::kString,
                         "the masker that projects Z and makes the final masks")
                 .defaults_to("\"l1\"")
                 .one_of({"level", "l1", "l2", "fpgm"}));
    return keys;
  }();
  return schema;
}

class AdmmPruner final : public sdk::Pruner {
 public:
  AdmmPruner(const sdk::Options& options, const sdk::Registry& registry)
      : num_iterations_(admm_keys().read<int64_t>(options, "num_iterations")),
        training_epochs_(admm_keys().read<int64_t>(options, "training_epochs")),
        row_(admm_keys().read<double>(options, "row")),
        base_algo_(admm_keys().read<std::string>(options, "base_algo")),
        masker_(registry.make_masker(sdk::base_algo_masker(base_algo_), sdk::Options())) {}

  void validate_config(const sdk::Options& entry) const override {
    (void)admm_keys().read<double>(entry, "sparsity");
  }

  void attach(sdk::CompressionContext& context) override {
    masker_->attach(context);
    const std::vector<sdk::LayerView*> layers = context.layers();
    const size_t n = layers.size();
    // Z is empty while it still aliases W (the first iteration); U starts at zero.
    std::vector<at::Tensor> z(n);
    std::vector<at::Tensor> u(n);
    for (size_t i = 0; i < n; ++i) {
      u[i] = at::zeros_like(layers[i]->weight().detach());
    }
    const double row = row_;
    bool aliased = true;
    const int64_t id = context.add_before_optimizer_step_callback([&] {
      if (aliased) {
        return;  // W − Z + U = W − W + 0: NNI's first iteration subtracts exactly zero
      }
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < n; ++i) {
        at::Tensor w = layers[i]->weight().detach();
        w.sub_((w - z[i] + u[i]) * row);
      }
    });
    try {
      for (int64_t k = 0; k < num_iterations_; ++k) {
        LITHE_LOG(kInfo, "admm: iteration ", k + 1, " of ", num_iterations_, ": training ",
                  training_epochs_, " epoch(s)");
        context.fine_tune(training_epochs_);
        at::NoGradGuard no_grad;
        for (size_t i = 0; i < n; ++i) {
          const at::Tensor w = layers[i]->weight().detach();
          const at::Tensor target = w + u[i];
          z[i] = target * project_mask(*layers[i], target);
          u[i] = u[i] + w - z[i];
        }
        aliased = false;
      }
    } catch (...) {
      context.remove_before_optimizer_step_callback(id);
      throw;
    }
    context.remove_before_optimizer_step_callback(id);
  }

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    if (done_.count(layer.index()) != 0) {
      return std::nullopt;  // one-shot (NNI's update_mask once, after the iterations)
    }
    std::optional<sdk::Masks> masks =
        masker_->calc_mask(layer, layer.config().require<double>("sparsity"));
    LITHE_CHECK(masks.has_value(), sdk::Errc::kInternal, "layer '", layer.name(),
                "': admm's base masker '", base_algo_, "' returned no masks");
    done_.insert(layer.index());
    return masks;
  }

 private:
  // The base masker's weight mask for `weight` in place of the layer's (NNI: a deep copy of
  // the wrapper whose weight is W + U, with all-ones masks).
  at::Tensor project_mask(const sdk::LayerView& layer, const at::Tensor& weight) const {
    sdk::LayerView probe(layer.index(), layer.name(), layer.op_type(), weight, layer.bias(),
                         layer.config());
    std::optional<sdk::Masks> masks =
        masker_->calc_mask(probe, layer.config().require<double>("sparsity"));
    LITHE_CHECK(masks.has_value(), sdk::Errc::kInternal, "layer '", layer.name(),
                "': admm's base masker '", base_algo_, "' returned no masks for the projection");
    return masks->weight.to(weight.device(), weight.scalar_type());
  }

  int64_t num_iterations_;
  int64_t training_epochs_;
  double row_;
  std::string base_algo_;
  std::unique_ptr<sdk::WeightMasker> masker_;
  std::set<int64_t> done_;  // layers whose masks are final
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_pruner({kAlgorithm, "ADMM: training under a sparsity constraint (proximal steps, "
                                   "projected Z, dual U), then one-shot masks of a base masker"},
                      [](const sdk::Options& options, const sdk::Registry& algorithms) {
                        return std::make_unique<AdmmPruner>(options, algorithms);
                      });
  // NNI golden cases of ADMMPruner replay by training over the case's recorded batches.
  registry.add_nni_counterpart({kAlgorithm, "ADMMPruner", "training_batches"});
  registry.describe_options(kAlgorithm, admm_keys());
}

}  // namespace lithe::plugins::admm

LITHE_PLUGIN("admm", "1.1.0", lithe::plugins::admm::register_algorithms)
