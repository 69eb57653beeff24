// Lottery Ticket (Frankle & Carbin 2019; NNI v2.0 LotteryTicketPruner, reference §2.10):
// prune_iterations + 1 rounds of training. Round 0 trains the dense model; each later round
// r first prunes every layer to round_sparsity(r) with the Level masker on the trained weights
// (already pruned weights count as zeros), then — with reset_weights — rewinds every parameter
// and buffer of the model to its state before training and restarts the optimizer, keeping
// the masks: the surviving "winning ticket" is retrained from its original initialisation.
//
// Rounds map onto epochs: round r starts at epoch r·epochs_per_iteration (NNI leaves the loop
// to the user, who calls prune_iteration_start() before each round's epochs).
#include "lottery_ticket.h"

#include <lithe/sdk.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace lithe::plugins::lottery_ticket {
namespace {

constexpr const char* kMasker = "level";

// Every key lottery_ticket reads. Unlike the one-shot pruners, sparsity 0 is refused: the
// rounds would prune nothing.
const sdk::OptionSchema& option_keys() {
  using sdk::OptionType;
  static const sdk::OptionSchema schema{
      sdk::option("reset_weights", OptionType::kBool,
                  "rewind every parameter and buffer to its state before training at each round")
          .defaults_to("true"),
      sdk::option("epochs_per_iteration", OptionType::kInteger, "training epochs of each round")
          .defaults_to("1")
          .above(0),
      sdk::entry_key("sparsity", OptionType::kNumber, "sparsity after the last round")
          .mandatory()
          .above(0)
          .below(1),
      sdk::entry_key("prune_iterations", OptionType::kInteger,
                     "pruning rounds after the dense one; every entry must give the same")
          .mandatory()
          .above(0)};
  return schema;
}

class LotteryTicketPruner final : public sdk::Pruner {
 public:
  LotteryTicketPruner(std::unique_ptr<sdk::WeightMasker> level, bool reset_weights,
                      int64_t epochs_per_iteration)
      : level_(std::move(level)),
        reset_weights_(reset_weights),
        epochs_per_iteration_(epochs_per_iteration) {}

  void validate_config(const sdk::Options& entry) const override {
    (void)option_keys().read<double>(entry, "sparsity");
    const auto iterations = option_keys().read<int64_t>(entry, "prune_iterations");
    // One schedule of rounds for the whole model: every entry must agree (NNI asserts).
    if (prune_iterations_ == 0) {
      prune_iterations_ = iterations;
      first_entry_ = entry.path();
    }
    LITHE_CHECK(iterations == prune_iterations_, sdk::Errc::kInvalidConfig, entry.path(),
                "/prune_iterations must equal every other entry's (", first_entry_,
                "/prune_iterations is ", prune_iterations_, "), got ", iterations);
  }

  void attach(sdk::CompressionContext& context) override {
    context_ = &context;
    context.require_epoch_updates();  // rounds start only in update_epoch
    level_->attach(context);
    if (reset_weights_) {
      initial_state_ = context.save_model_state();  // before any training, as NNI's deepcopy
    }
  }

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    // Masks change only when a round starts (NNI's calc_mask always returns None).
    const auto it = pending_.find(layer.index());
    if (it == pending_.end()) {
      return std::nullopt;
    }
    sdk::Masks masks = std::move(it->second);
    pending_.erase(it);
    return masks;
  }

  void update_epoch(int64_t epoch) override {
    LITHE_CHECK(context_ != nullptr, sdk::Errc::kInternal,
                "lottery_ticket: update_epoch before attach (call compress() first)");
    if (epoch % epochs_per_iteration_ != 0) {
      return;
    }
    const int64_t round = epoch / epochs_per_iteration_;
    if (round > prune_iterations_) {
      return;  // every round done: later epochs fine-tune the final ticket
    }
    start_round(round);
  }

 private:
  void start_round(int64_t round) {
    for (sdk::LayerView* layer : context_->layers()) {
      if (round == 0) {
        sdk::Masks dense;  // all-ones weight mask; the bias mask is never touched
        dense.weight = sdk::Masks::keep_all(*layer).weight;
        pending_[layer->index()] = std::move(dense);
        continue;
      }
      const double target = round_sparsity(layer->config().require<double>("sparsity"),
                                           prune_iterations_, round);
      std::optional<sdk::Masks> masks = level_->calc_mask(*layer, target);
      LITHE_CHECK(masks.has_value(), sdk::Errc::kInternal, "lottery_ticket: masker '", kMasker,
                  "' returned no masks for layer '", layer->name(), "'");
      pending_[layer->index()] = std::move(*masks);
    }
    context_->update_masks_now();
    if (reset_weights_) {
      context_->restore_model_state(initial_state_);
    }
    LITHE_LOG(kInfo, "lottery_ticket: round ", round, " of ", prune_iterations_, " started",
              reset_weights_ ? " (weights rewound)" : "");
  }

  std::unique_ptr<sdk::WeightMasker> level_;
  bool reset_weights_;
  int64_t epochs_per_iteration_;
  mutable int64_t prune_iterations_ = 0;  // agreed by every config entry (validate_config)
  mutable std::string first_entry_;
  sdk::CompressionContext* context_ = nullptr;
  int64_t initial_state_ = 0;
  std::map<int64_t, sdk::Masks> pending_;  // masks of the round just started, by layer index
};

}  // namespace

double round_sparsity(double sparsity, int64_t prune_iterations, int64_t round) {
  // NNI: max(1 - (1 - sparsity) ** (1 / prune_iterations) ** round, 0) evaluated as
  // keep_once = (1 - s) ** (1 / n); 1 - keep_once ** r.
  const double keep_once = std::pow(1.0 - sparsity, 1.0 / static_cast<double>(prune_iterations));
  return std::max(1.0 - std::pow(keep_once, static_cast<double>(round)), 0.0);
}

void register_algorithms(sdk::Registry& registry) {
  registry.add_pruner(
      {"lottery_ticket",
       "iterative magnitude pruning with weight rewinding (rounds of epochs_per_iteration)"},
      [](const sdk::Options& options, const sdk::Registry& algorithms) {
        const bool reset_weights = option_keys().read<bool>(options, "reset_weights");
        const auto epochs = option_keys().read<int64_t>(options, "epochs_per_iteration");
        return std::make_unique<LotteryTicketPruner>(algorithms.make_masker(kMasker, sdk::Options()),
                                                     reset_weights, epochs);
      });
  registry.add_nni_counterpart({"lottery_ticket", "LotteryTicketPruner", "rewind_rounds"});
  registry.describe_options("lottery_ticket", option_keys());
}

}  // namespace lithe::plugins::lottery_ticket

LITHE_PLUGIN("lottery_ticket", "1.1.0", lithe::plugins::lottery_ticket::register_algorithms)
