// AGP: gradual pruning over training epochs (NNI v2.0 AGPPruner, reference §2.9). Any registered
// masker decides *which* weights go (level by default, or a filter criterion); AGP decides *how
// many*: each config entry's sparsity follows a cubic schedule from initial_sparsity to
// final_sparsity. As in NNI, update_epoch(e) (e > 0) arms one mask update per layer, which
// happens at the first optimizer step of epoch e; update_epoch(0) changes nothing, and the
// epoch-0 masks come from compress(). Masks only grow: maskers rank weights already pruned
// (zero in place) first, so each update prunes exactly the epoch's target.
#include "agp.h"

#include <lithe/sdk.h>

#include <map>
#include <memory>
#include <set>
#include <utility>

#include "schedule.h"

namespace lithe::plugins::agp {
namespace {

class AgpPruner final : public sdk::Pruner {
 public:
  explicit AgpPruner(std::unique_ptr<sdk::WeightMasker> masker) : masker_(std::move(masker)) {}

  void validate_config(const sdk::Options& entry) const override { read_schedule(entry); }

  void attach(sdk::CompressionContext& context) override {
    // The schedule moves only with update_epoch: a loop that never calls it would end at the
    // first epoch's sparsity without a word, so the host is told to refuse such a loop.
    context.require_epoch_updates();
    masker_->attach(context);
  }

  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer) override {
    if (done_.count(layer.index()) != 0) {
      return std::nullopt;  // this epoch's masks exist (NNI's if_calculated)
    }
    const Schedule& schedule = schedule_of(layer);
    if (!is_pruning_epoch(schedule, epoch_)) {
      return std::nullopt;
    }
    std::optional<sdk::Masks> masks =
        masker_->calc_mask(layer, target_sparsity(schedule, epoch_));
    if (masks.has_value()) {
      done_.insert(layer.index());
    }
    return masks;
  }

  void update_epoch(int64_t epoch) override {
    if (epoch > 0) {  // NNI: update_epoch(0) is a no-op, compress() made the epoch-0 masks
      epoch_ = epoch;
      done_.clear();
    }
  }

 private:
  const Schedule& schedule_of(const sdk::LayerView& layer) {
    auto it = schedules_.find(layer.index());
    if (it == schedules_.end()) {
      it = schedules_.emplace(layer.index(), read_schedule(layer.config())).first;
    }
    return it->second;
  }

  std::unique_ptr<sdk::WeightMasker> masker_;
  int64_t epoch_ = 0;
  std::set<int64_t> done_;                  // layers whose masks are current for epoch_
  std::map<int64_t, Schedule> schedules_;   // by layer index, parsed once
};

}  // namespace

std::string masker_name_for(const std::string& pruning_algorithm) {
  static const std::map<std::string, std::string> nni_names = {
      {"l1", "l1_filter"}, {"l2", "l2_filter"}, {"taylorfo", "taylor_fo"}};
  const auto it = nni_names.find(pruning_algorithm);
  return it == nni_names.end() ? pruning_algorithm : it->second;
}

void register_algorithms(sdk::Registry& registry) {
  registry.add_pruner(
      {"agp", "automated gradual pruning: a cubic sparsity schedule over epochs, with any masker"},
      [](const sdk::Options& options, const sdk::Registry& algorithms) {
        const std::string requested = option_keys().read<std::string>(options, "pruning_algorithm");
        const sdk::Options masker_options =
            options.has("masker_options") ? options.child("masker_options") : sdk::Options();
        try {
          return std::make_unique<AgpPruner>(
              algorithms.make_masker(masker_name_for(requested), masker_options));
        } catch (const sdk::Error& e) {
          throw sdk::Error(e.code(), options.path() + "/pruning_algorithm '" + requested +
                                         "': " + e.what());
        }
      });
  registry.add_nni_counterpart({"agp", "AGPPruner", "epoch_schedule"});
  registry.describe_options("agp", option_keys());
}

}  // namespace lithe::plugins::agp

LITHE_PLUGIN("agp", "1.1.0", lithe::plugins::agp::register_algorithms)
