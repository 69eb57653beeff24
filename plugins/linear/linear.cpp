// NNI's LinearPruner (v2.6+, `LinearTaskGenerator`): prune in total_iteration rounds, the
// sparsity of round i being i / total_iteration of each layer's target, and fine-tune after
// every round, so the model adapts to a little sparsity before it loses more:
//
//   for i in 1..total_iteration:
//     masks = base masker at sparsity_i = sparsity · i / total_iteration, scoring the weights as
//             the previous rounds left them (pruned weights are zero, so they rank first and
//             stay pruned: masks only grow)
//     fine_tune(finetune_epochs)   (the host's trainer; the masks held fixed)
//     evaluate()                   (logged when the host has an evaluator)
//
// Everything happens while the session attaches (compress()), through SDK 1.1's
// update_masks_now and SDK 1.7's fine_tune/evaluate; afterwards the masks are final (later
// mask updates keep them), so `lithe compress --epochs N` fine-tunes the result further.
//
// Departures from NNI: NNI's scheduler returns the round its evaluator scored best, which can be
// a round short of the requested sparsity; Lithe always returns the last round (the sparsity
// asked for) and logs every round's metric. NNI's round 0 (sparsity 0, then a fine-tune of the
// dense model) is not run: it prunes nothing.
#include "linear.h"

#include <lithe/sdk.h>

#include <memory>
#include <set>
#include <string>

namespace lithe::plugins::linear {
namespace {

constexpr const char* kAlgorithm = "linear";

const sdk::OptionSchema& linear_keys() {
  static const sdk::OptionSchema schema = [] {
    sdk::OptionSchema keys;
    keys.add(sdk::sparsity_keys());
    keys.add(sdk::option("total_iteration", sdk::OptionType::kInteger,
                         "pruning rounds; round i prunes i / total_iteration of the target")
                 .mandatory()
                 .above(0));
    keys.add(sdk::option("pruning_algorithm", sdk::OptionType::kString,
                         "the masker that chooses which weights go in each round")
                 .defaults_to("\"level\"")
                 .one_of({"level", "l1", "l2", "fpgm"}));
    keys.add(sdk::option("masker_options", sdk::OptionType::kObject,
                         "options passed to the masker's factory")
                 .defaults_to("{}"));
    keys.add(sdk::option("finetune_epochs", sdk::OptionType::kInteger,
                         "epochs of the host's fine-tuning after each round (0: none)")
                 .defaults_to("1")
                 .at_least(0));
    return keys;
  }();
  return schema;
}

class LinearPruner final : public sdk::Pruner {
 public:
  LinearPruner(const sdk::Options& options, const sdk::Registry& registry)
      : total_iteration_(linear_keys().read<int64_t>(options, "total_iteration")),
        finetune_epochs_(linear_keys().read<int64_t>(options, "finetune_epochs")),
        finetune_epochs_given_(options.has("finetune_epochs")),
        pruning_algorithm_(linear_keys().read<std::string>(options, "pruning_algorithm")) {
    const sdk::Options masker_options =
        options.has("masker_options") ? options.child("masker_options") : sdk::Options();
    try {
      masker_ = registry.make_masker(sdk::base_algo_masker(pruning_algorithm_), masker_options);
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), options.path() + "/pruning_algorithm '" + pruning_algorithm_ +
                                     "': " + e.what());
    }
  }

  void validate_config(const sdk::Options& entry) const override {
    (void)linear_keys().read<double>(entry, "sparsity");
  }

  void attach(sdk::CompressionContext& context) override {
    masker_->attach(context);
    const bool fine_tune = finetune_epochs_ > 0 && context.can_fine_tune();
    if (finetune_epochs_ > 0 && !fine_tune) {
      // Asked for explicitly, the missing trainer is an error; by default, a warning: the
      // rounds then give exactly the one-shot masks (the scores never change between them).
      LITHE_CHECK(!finetune_epochs_given_, sdk::Errc::kInvalidConfig,
                  "options/finetune_epochs is ", finetune_epochs_,
                  " but the host cannot fine-tune (lithe compress: give --data; C++: "
                  "session.set_fine_tuner)");
      LITHE_LOG(kWarn, "linear: the host cannot fine-tune between rounds (no --data); the ",
                total_iteration_, " rounds give the one-shot masks");
    }
    for (round_ = 1; round_ <= total_iteration_; ++round_) {
      context.update_masks_now();
      if (fine_tune) {
        context.fine_tune(finetune_epochs_);
      }
      if (context.can_evaluate()) {
        // Outside the log statement: a log level that drops kInfo must not skip the call.
        const double metric = context.evaluate();
        LITHE_LOG(kInfo, "linear: round ", round_, " of ", total_iteration_, " (",
                  fraction() * 100.0, "% of the target sparsity): metric ", metric);
      } else {
        LITHE_LOG(kInfo, "linear: round ", round_, " of ", total_iteration_, " done (",
                  fraction() * 100.0, "% of the target sparsity)");
      }
    }
    finished_ = true;
  }

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    if (finished_) {
      return std::nullopt;  // the last round's masks are final
    }
    const double target = layer.config().require<double>("sparsity");
    std::optional<sdk::Masks> masks = masker_->calc_mask(layer, target * fraction());
    LITHE_CHECK(masks.has_value(), sdk::Errc::kInternal, "layer '", layer.name(),
                "': linear's masker '", pruning_algorithm_, "' returned no masks in round ",
                round_);
    return masks;
  }

 private:
  // Round i's share of each layer's target. The last round is exactly 1 (the target itself).
  double fraction() const {
    return round_ >= total_iteration_
               ? 1.0
               : static_cast<double>(round_) / static_cast<double>(total_iteration_);
  }

  int64_t total_iteration_;
  int64_t finetune_epochs_;
  bool finetune_epochs_given_;
  std::string pruning_algorithm_;
  std::unique_ptr<sdk::WeightMasker> masker_;
  int64_t round_ = 0;
  bool finished_ = false;
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_pruner({kAlgorithm, "NNI's LinearPruner: prune in rounds of linearly growing "
                                   "sparsity, fine-tuning after each (SDK 1.7 fine_tune)"},
                      [](const sdk::Options& options, const sdk::Registry& algorithms) {
                        return std::make_unique<LinearPruner>(options, algorithms);
                      });
  registry.describe_options(kAlgorithm, linear_keys());
}

}  // namespace lithe::plugins::linear

LITHE_PLUGIN("linear", "1.0.0", lithe::plugins::linear::register_algorithms)
