// NNI's one-shot filter pruner (_StructuredFilterPruner, reference §2.1, §2.8) over any
// FilterScorer. Normal mode is make_one_shot_pruner over make_filter_masker. Dependency-aware
// mode couples the layers whose outputs are added together: they must prune the same channels,
// or the add mixes a pruned channel of one layer with a live channel of another. NNI encodes the
// common channels by multiplying the importance by 0 and then thresholds, so a channel whose own
// statistic is 0 ties with them and coupled layers can prune different channels; Lithe prunes the
// common channels first by rank instead (departure 5) and every selection is exact-k with ties
// to the lower index (departure 1).
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "filter_selection.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/filter_pruning.h"
#include "lithe/sdk/global_sparsity.h"
#include "lithe/sdk/log.h"
#include "lithe/sdk/option_spec.h"

namespace lithe::sdk {
namespace {

std::string braced_list(const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : ", ") + names[i];
  }
  return out + "}";
}

std::string index_list(const std::vector<bool>& selected) {
  std::string out = "[";
  bool first = true;
  for (size_t i = 0; i < selected.size(); ++i) {
    if (selected[i]) {
      out += (first ? "" : ", ") + std::to_string(i);
      first = false;
    }
  }
  return out + "]";
}

// Global sparsity over filters: one unit per filter, scored by the criterion; filters pruned
// before rank first (as make_filter_masker's rule), and the chosen filters are zeroed in a copy
// of the current masks.
UnitRanking filter_ranking(std::shared_ptr<FilterScorer> scorer, std::string algorithm) {
  UnitRanking ranking;
  ranking.scores = [scorer, algorithm](LayerView& layer) -> std::optional<at::Tensor> {
    std::optional<at::Tensor> raw = scorer->filter_scores(layer);
    if (!raw.has_value()) {
      return std::nullopt;
    }
    const int64_t filters = layer.weight().size(0);
    std::vector<double> scores = detail::checked_scores(*raw, layer, filters, algorithm);
    const std::vector<bool> pruned_before = detail::fully_pruned_filters(layer);
    for (int64_t f = 0; f < filters; ++f) {
      if (pruned_before[static_cast<size_t>(f)]) {
        scores[static_cast<size_t>(f)] = -std::numeric_limits<double>::infinity();
      }
    }
    return at::tensor(scores, at::kDouble);
  };
  ranking.masks = [](LayerView& layer, const at::Tensor& pruned) {
    const at::Tensor flags = pruned.to(at::kCPU).contiguous();
    std::vector<bool> chosen(static_cast<size_t>(flags.numel()));
    for (int64_t f = 0; f < flags.numel(); ++f) {
      chosen[static_cast<size_t>(f)] = flags.data_ptr<bool>()[f];
    }
    return detail::zero_filters(layer, chosen);
  };
  return ranking;
}

class FilterPruner final : public Pruner {
 public:
  FilterPruner(std::vector<std::string> op_types, std::shared_ptr<FilterScorer> scorer,
               std::string algorithm, bool dependency_aware)
      : op_types_(std::move(op_types)),
        scorer_(std::move(scorer)),
        algorithm_(std::move(algorithm)),
        dependency_aware_(dependency_aware),
        one_shot_(make_one_shot_pruner_ranked(
            make_filter_masker_for(op_types_, scorer_, algorithm_),
            filter_ranking(scorer_, algorithm_), algorithm_, op_types_)) {}

  // "sparsity" in [0, 1) or "total_sparsity" (global_sparsity.h), and op_types only the
  // accepted types, with the one-shot pruner's messages.
  void validate_config(const Options& entry) const override {
    LITHE_CHECK(!dependency_aware_ || !entry.has("total_sparsity"), Errc::kInvalidConfig,
                entry.path(), "/total_sparsity: ", algorithm_,
                " with dependency_aware prunes the same channels in coupled layers, set by set, "
                "at each layer's own \"sparsity\"; global ranking needs dependency_aware off");
    one_shot_->validate_config(entry);
  }

  void attach(CompressionContext& context) override {
    if (!dependency_aware_) {
      one_shot_->attach(context);  // attaches the scorer, once
      return;
    }
    context_ = &context;
    try {
      sets_ = context.channel_dependency_sets();
      groups_ = context.group_dependencies();
    } catch (const Error& e) {
      if (e.code() != Errc::kUnsupported) {
        throw;
      }
      throw Error(Errc::kUnsupported,
                  detail::concat(algorithm_,
                                 ": option dependency_aware needs a TorchScript model (the "
                                 "channel dependencies are read from its graph); ",
                                 e.what()));
    }
    // The scorer attaches (registers collectors or callbacks) only once the graph is known
    // to be usable, so a failed analysis leaves nothing registered.
    one_shot_->attach(context);
    for (size_t s = 0; s < sets_.size(); ++s) {
      for (const std::string& name : sets_[s]) {
        const bool inserted = set_of_.emplace(name, s).second;
        LITHE_CHECK(inserted, Errc::kInternal, "layer '", name,
                    "' appears in more than one channel dependency set; this is a bug in lithe, "
                    "please report it");
      }
    }
    for (LayerView* layer : context.layers()) {
      layers_by_name_[layer->name()] = layer;
    }
    log_coupled_sets();
  }

  std::optional<Masks> calc_mask(LayerView& layer) override {
    if (!dependency_aware_) {
      return one_shot_->calc_mask(layer);
    }
    if (done_.count(layer.index()) != 0) {
      return std::nullopt;
    }
    if (auto it = pending_.find(layer.index()); it != pending_.end()) {
      Masks masks = std::move(it->second);
      pending_.erase(it);
      done_.insert(layer.index());
      return masks;
    }
    require_layer_op_type_in(layer, op_types_, algorithm_);
    LITHE_CHECK(context_ != nullptr, Errc::kInternal, algorithm_,
                ": calc_mask before attach in dependency_aware mode; this is a bug in lithe, "
                "please report it");
    layers_by_name_.emplace(layer.name(), &layer);

    std::vector<std::string> members{layer.name()};
    if (auto it = set_of_.find(layer.name()); it != set_of_.end()) {
      members = sets_[it->second];
    } else {
      // The graph never reaches this conv (e.g. a module unused by forward): nothing is added to
      // its output, so it has no partner.
      LITHE_LOG(kWarn, algorithm_, ": layer '", layer.name(),
                "' is not in the model's channel dependency sets; it is pruned on its own");
    }
    std::vector<LayerView*> compressed;
    for (const std::string& name : members) {
      if (auto it = layers_by_name_.find(name); it != layers_by_name_.end()) {
        compressed.push_back(it->second);
      }
    }
    const bool whole_set = compressed.size() == members.size();

    std::optional<std::map<int64_t, Masks>> masks = set_masks(members, compressed, whole_set);
    if (!masks.has_value()) {
      return std::nullopt;  // a member's scorer is not ready: the whole set waits
    }
    std::optional<Masks> own;
    for (auto& [index, member_masks] : *masks) {
      if (index == layer.index()) {
        own = std::move(member_masks);
      } else {
        pending_[index] = std::move(member_masks);
      }
    }
    LITHE_INTERNAL_ASSERT(own.has_value());
    done_.insert(layer.index());
    return own;
  }

 private:
  // The masks of every compressed member of one dependency set (keyed by layer index), or
  // nullopt when a member's scorer cannot decide yet.
  std::optional<std::map<int64_t, Masks>> set_masks(const std::vector<std::string>& members,
                                                    const std::vector<LayerView*>& compressed,
                                                    bool whole_set) {
    const int64_t channels = compressed.front()->weight().size(0);
    std::vector<double> sparsities;
    std::vector<int64_t> num_prune;
    for (LayerView* member : compressed) {
      require_layer_op_type_in(*member, op_types_, algorithm_);
      LITHE_CHECK(member->weight().size(0) == channels, Errc::kShapeMismatch, "layers '",
                  compressed.front()->name(), "' and '", member->name(),
                  "' are in one channel dependency set ", braced_list(members), " but have ",
                  channels, " and ", member->weight().size(0),
                  " output channels; dependency_aware needs equal channel counts");
      sparsities.push_back(member->config().require<double>("sparsity"));
      num_prune.push_back(channels < 2 ? 0 : prune_count(channels, sparsities.back()));
    }

    std::map<int64_t, Masks> out;
    if (*std::max_element(num_prune.begin(), num_prune.end()) < 1) {
      // Nothing to prune in any member (NNI's F < 2 / num_prune < 1 rule): keep the current
      // masks without waiting for a data-driven scorer.
      for (LayerView* member : compressed) {
        out.emplace(member->index(), member->masks().clone());
        scorer_->on_masks_computed(*member);
      }
      return out;
    }

    std::vector<std::vector<double>> scores;
    for (LayerView* member : compressed) {
      std::optional<at::Tensor> raw = scorer_->filter_scores(*member);
      if (!raw.has_value()) {
        return std::nullopt;
      }
      scores.push_back(detail::checked_scores(*raw, *member, channels, algorithm_));
    }

    const std::vector<bool> common = common_channels(members, compressed, whole_set, sparsities,
                                                     scores, channels);
    for (size_t m = 0; m < compressed.size(); ++m) {
      LayerView& member = *compressed[m];
      if (num_prune[m] < 1) {
        out.emplace(member.index(), member.masks().clone());
        continue;
      }
      // Common channels first (num_prune[m] >= their count, since the common target uses the
      // set's smallest sparsity), then channels pruned before (as make_filter_masker), then the
      // member's own scores.
      const std::vector<bool> already = detail::fully_pruned_filters(member);
      std::vector<int> priority(static_cast<size_t>(channels));
      for (size_t c = 0; c < priority.size(); ++c) {
        priority[c] = common[c] ? 0 : (already[c] ? 1 : 2);
      }
      out.emplace(member.index(),
                  detail::zero_filters(member,
                                       detail::select_filters(priority, scores[m], num_prune[m])));
    }
    for (LayerView* member : compressed) {
      scorer_->on_masks_computed(*member);
    }
    return out;
  }

  // NNI's _common_channel_to_prune with exact-k selection: int(C * min_s) channels of the
  // summed scores, split evenly over G = lcm(groups) channel groups (so that the grouped
  // convolutions fed by these layers keep equal group widths).
  std::vector<bool> common_channels(const std::vector<std::string>& members,
                                    const std::vector<LayerView*>& compressed, bool whole_set,
                                    const std::vector<double>& sparsities,
                                    const std::vector<std::vector<double>>& scores,
                                    int64_t channels) const {
    std::vector<bool> common(static_cast<size_t>(channels), false);
    // A member that is not compressed keeps every channel, so no channel is common (NNI).
    const double min_sparsity =
        whole_set ? *std::min_element(sparsities.begin(), sparsities.end()) : 0.0;
    int64_t group_count = 1;
    for (LayerView* member : compressed) {
      const auto it = groups_.find(member->name());
      const int64_t groups = it == groups_.end() ? 1 : it->second;
      LITHE_CHECK(groups >= 1, Errc::kInternal, "layer '", member->name(),
                  "' has group dependency ", groups, "; this is a bug in lithe, please report it");
      group_count = std::lcm(group_count, groups);
    }
    const int64_t target = prune_count(channels, min_sparsity);
    const int64_t per_group = target / group_count;  // NNI: int(target / G), both >= 0
    if (per_group < 1) {
      return common;
    }
    LITHE_CHECK(channels % group_count == 0, Errc::kUnsupportedLayer, "channel dependency set ",
                braced_list(members), ": ", channels,
                " output channels cannot be split into ", group_count,
                " equal groups (the lcm of the groups of the grouped convolutions they feed)");
    std::vector<double> summed(static_cast<size_t>(channels), 0.0);
    for (const std::vector<double>& member_scores : scores) {
      for (size_t c = 0; c < summed.size(); ++c) {
        summed[c] += member_scores[c];
      }
    }
    const int64_t width = channels / group_count;
    for (int64_t g = 0; g < group_count; ++g) {
      const auto begin = summed.begin() + g * width;
      const std::vector<double> segment(begin, begin + width);
      const std::vector<bool> chosen = detail::select_filters(
          std::vector<int>(static_cast<size_t>(width), 0), segment, per_group);
      for (int64_t c = 0; c < width; ++c) {
        common[static_cast<size_t>(g * width + c)] = chosen[static_cast<size_t>(c)];
      }
    }
    LITHE_LOG(kDebug, algorithm_, ": channel dependency set ", braced_list(members),
              " prunes common channels ", index_list(common));
    return common;
  }

  void log_coupled_sets() const {
    std::string coupled;
    std::string partial;
    int coupled_count = 0;
    int partial_count = 0;
    for (const std::vector<std::string>& set : sets_) {
      if (set.size() < 2) {
        continue;
      }
      const auto compressed = std::count_if(set.begin(), set.end(), [&](const std::string& name) {
        return layers_by_name_.count(name) != 0;
      });
      if (compressed == 0) {
        continue;
      }
      const bool whole_set = static_cast<size_t>(compressed) == set.size();
      std::string& list = whole_set ? coupled : partial;
      int& count = whole_set ? coupled_count : partial_count;
      list += (count == 0 ? "" : ", ") + braced_list(set);
      ++count;
    }
    if (coupled_count == 0 && partial_count == 0) {
      LITHE_LOG(kInfo, algorithm_,
                " dependency_aware: no compressed layers share channels; each is pruned on its "
                "own");
      return;
    }
    if (coupled_count > 0) {
      LITHE_LOG(kInfo, algorithm_, " dependency_aware: ", coupled_count,
                " set(s) of layers prune common channels: ", coupled);
    }
    if (partial_count > 0) {
      LITHE_LOG(kInfo, algorithm_, " dependency_aware: ", partial_count,
                " set(s) of added layers are only partly compressed, so they prune no common "
                "channels (compress every member to couple them): ",
                partial);
    }
  }

  std::vector<std::string> op_types_;
  std::shared_ptr<FilterScorer> scorer_;
  std::string algorithm_;
  bool dependency_aware_;
  std::unique_ptr<Pruner> one_shot_;  // normal mode, and config validation in both modes

  // Dependency-aware mode only.
  CompressionContext* context_ = nullptr;
  std::vector<std::vector<std::string>> sets_;
  std::map<std::string, size_t> set_of_;  // layer name -> index in sets_
  std::map<std::string, int64_t> groups_;
  std::map<std::string, LayerView*> layers_by_name_;  // the compressed layers
  std::map<int64_t, Masks> pending_;  // masks computed with a set partner, not yet returned
  std::set<int64_t> done_;            // layers whose masks are final (NNI's if_calculated)
};

}  // namespace

namespace {

std::unique_ptr<Pruner> filter_pruner(const std::vector<std::string>& op_types,
                                      std::shared_ptr<FilterScorer> scorer,
                                      const std::string& algorithm, const Options& options) {
  LITHE_INTERNAL_ASSERT(scorer != nullptr);
  const bool dependency_aware = filter_pruner_keys().read<bool>(options, "dependency_aware");
  if (options.has("dummy_input")) {
    try {
      (void)filter_pruner_keys().read<std::string>(options, "dummy_input");
    } catch (const Error& e) {
      throw Error(Errc::kInvalidConfig,
                  detail::concat(e.what(), " (", algorithm,
                                 " accepts dummy_input only as a string, for NNI compatibility, "
                                 "and ignores it: dependency_aware reads the channel "
                                 "dependencies from the model's TorchScript graph, no tracing "
                                 "input is needed)"));
    }
  }
  return std::make_unique<FilterPruner>(op_types, std::move(scorer), algorithm,
                                        dependency_aware);
}

}  // namespace

std::unique_ptr<Pruner> make_filter_pruner(std::shared_ptr<FilterScorer> scorer,
                                           const std::string& algorithm,
                                           const Options& options) {
  return filter_pruner({"Conv2d"}, std::move(scorer), algorithm, options);
}

std::unique_ptr<Pruner> make_filter_pruner_for(const std::vector<std::string>& op_types,
                                               std::shared_ptr<FilterScorer> scorer,
                                               const std::string& algorithm,
                                               const Options& options) {
  detail::check_filter_op_types(op_types, algorithm);
  return filter_pruner(op_types, std::move(scorer), algorithm, options);
}

}  // namespace lithe::sdk
