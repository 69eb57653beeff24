// NNI's OneshotPruner: each layer's masks are computed once by a masker at the layer's
// configured sparsity; a masker that cannot decide yet (returns nullopt) is asked again at the
// next mask update. With a UnitRanking, an entry with total_sparsity ranks the units of all its
// layers together instead (global_sparsity.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lithe/sdk/error.h"
#include "lithe/sdk/global_sparsity.h"
#include "lithe/sdk/option_spec.h"
#include "lithe/sdk/pruner.h"

namespace lithe::sdk {
namespace {

std::string quoted_list(const std::vector<std::string>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i == 0 ? "\"" : ", \"") + values[i] + "\"";
  }
  return out + "]";
}

class OneShotPruner final : public Pruner {
 public:
  // `accepted` empty: any op type.
  OneShotPruner(std::unique_ptr<WeightMasker> masker, std::string algorithm,
                std::vector<std::string> accepted, std::optional<UnitRanking> ranking = {})
      : masker_(std::move(masker)),
        algorithm_(std::move(algorithm)),
        accepted_(std::move(accepted)),
        ranking_(std::move(ranking)) {
    LITHE_INTERNAL_ASSERT(masker_ != nullptr);
  }

  void validate_config(const Options& entry) const override {
    if (!accepted_.empty() && entry.has("op_types")) {
      const auto op_types = entry.require<std::vector<std::string>>("op_types");
      for (const std::string& type : op_types) {
        if (std::find(accepted_.begin(), accepted_.end(), type) != accepted_.end()) {
          continue;
        }
        if (accepted_.size() == 1) {
          LITHE_CHECK(false, Errc::kInvalidConfig, entry.path(), "/op_types must contain only \"",
                      accepted_[0], "\" (", algorithm_, " prunes ", accepted_[0],
                      " layers only; \"default\" is not accepted), got ", quoted_list(op_types));
        }
        LITHE_CHECK(false, Errc::kInvalidConfig, entry.path(), "/op_types may contain only ",
                    quoted_list(accepted_), " (", algorithm_,
                    " prunes those layers only; \"default\" is not accepted), got \"", type,
                    "\" in ", quoted_list(op_types));
      }
    }
    if (ranking_) {
      (void)read_global_sparsity(entry);
    } else {
      (void)sparsity_keys().read<double>(entry, "sparsity");
    }
  }

  void attach(CompressionContext& context) override {
    context_ = &context;
    masker_->attach(context);
  }

  std::optional<Masks> calc_mask(LayerView& layer) override {
    if (done_.count(layer.index()) != 0) {
      return std::nullopt;
    }
    if (auto it = pending_.find(layer.index()); it != pending_.end()) {
      Masks masks = std::move(it->second);
      pending_.erase(it);
      done_.insert(layer.index());
      return masks;
    }
    if (ranking_ && layer.config().has("total_sparsity")) {
      return global_masks(layer);
    }
    std::optional<Masks> masks =
        masker_->calc_mask(layer, layer.config().require<double>("sparsity"));
    if (masks.has_value()) {
      done_.insert(layer.index());
    }
    return masks;
  }

 private:
  // The masks of every layer of `layer`'s entry at once, ranked together; `layer`'s returned,
  // the others' kept for their own calc_mask. nullopt while a member cannot be scored yet.
  std::optional<Masks> global_masks(LayerView& layer) {
    LITHE_CHECK(context_ != nullptr, Errc::kInternal, algorithm_,
                ": calc_mask before attach; this is a bug in lithe, please report it");
    const GlobalSparsity global = *read_global_sparsity(layer.config());
    const std::vector<LayerView*> members = layers_of_entry(*context_, layer);
    std::vector<at::Tensor> scores;
    std::vector<int64_t> caps;
    int64_t units = 0;
    for (LayerView* member : members) {
      if (!accepted_.empty()) {
        require_layer_op_type_in(*member, accepted_, algorithm_);
      }
      std::optional<at::Tensor> s = ranking_->scores(*member);
      if (!s.has_value()) {
        return std::nullopt;  // the criterion has not seen enough yet: the whole entry waits
      }
      caps.push_back(prune_count(s->numel(), global.max_per_layer));
      units += s->numel();
      scores.push_back(std::move(*s));
    }
    std::vector<at::Tensor> pruned;
    try {
      pruned = select_global(scores, caps, prune_count(units, global.total));
    } catch (const Error& e) {
      throw Error(e.code(), detail::concat(layer.config().path(), ": total_sparsity ",
                                           global.total, " of ", units, " units (", algorithm_,
                                           ", ", members.size(), " layers): ", e.what()));
    }
    std::optional<Masks> own;
    for (size_t i = 0; i < members.size(); ++i) {
      Masks masks = ranking_->masks(*members[i], pruned[i]);
      if (members[i] == &layer) {
        own = std::move(masks);
      } else if (done_.count(members[i]->index()) == 0) {
        pending_[members[i]->index()] = std::move(masks);
      }
    }
    done_.insert(layer.index());
    return own;
  }

  std::unique_ptr<WeightMasker> masker_;
  std::string algorithm_;
  std::vector<std::string> accepted_;  // empty: any op type
  std::optional<UnitRanking> ranking_;  // set: total_sparsity entries are accepted
  CompressionContext* context_ = nullptr;
  std::set<int64_t> done_;  // layers whose masks are final (NNI's if_calculated)
  std::map<int64_t, Masks> pending_;  // computed with another member of a global entry
};

}  // namespace

std::unique_ptr<Pruner> make_one_shot_pruner(std::unique_ptr<WeightMasker> masker) {
  return std::make_unique<OneShotPruner>(std::move(masker), "", std::vector<std::string>{});
}

std::unique_ptr<Pruner> make_one_shot_pruner(std::unique_ptr<WeightMasker> masker,
                                             const std::string& algorithm,
                                             const std::string& only_op_type) {
  return std::make_unique<OneShotPruner>(
      std::move(masker), algorithm,
      only_op_type.empty() ? std::vector<std::string>{} : std::vector<std::string>{only_op_type});
}

std::unique_ptr<Pruner> make_one_shot_pruner_for(std::unique_ptr<WeightMasker> masker,
                                                 const std::string& algorithm,
                                                 const std::vector<std::string>& op_types) {
  LITHE_CHECK(!op_types.empty(), Errc::kUnsupported, algorithm,
              ": make_one_shot_pruner_for needs at least one op type (make_one_shot_pruner "
              "accepts any)");
  return std::make_unique<OneShotPruner>(std::move(masker), algorithm, op_types);
}

std::unique_ptr<Pruner> make_one_shot_pruner_ranked(std::unique_ptr<WeightMasker> masker,
                                                    UnitRanking ranking,
                                                    const std::string& algorithm,
                                                    const std::vector<std::string>& op_types) {
  LITHE_CHECK(ranking.scores && ranking.masks, Errc::kUnsupported, algorithm,
              ": make_one_shot_pruner_ranked needs both functions of its UnitRanking");
  return std::make_unique<OneShotPruner>(std::move(masker), algorithm, op_types,
                                         std::move(ranking));
}

void require_layer_op_type(const LayerView& layer, const std::string& op_type,
                           const std::string& algorithm) {
  LITHE_CHECK(layer.op_type() == op_type, Errc::kUnsupportedLayer, "layer '", layer.name(),
              "' is a ", layer.op_type(), "; ", algorithm, " prunes ", op_type,
              " layers only (restrict the config entry with op_types [\"", op_type, "\"])");
}

void require_layer_op_type_in(const LayerView& layer, const std::vector<std::string>& op_types,
                              const std::string& algorithm) {
  if (op_types.size() == 1) {
    require_layer_op_type(layer, op_types[0], algorithm);
    return;
  }
  LITHE_CHECK(std::find(op_types.begin(), op_types.end(), layer.op_type()) != op_types.end(),
              Errc::kUnsupportedLayer, "layer '", layer.name(), "' is a ", layer.op_type(), "; ",
              algorithm, " prunes ", quoted_list(op_types),
              " layers only (restrict the config entry with op_types)");
}

int64_t prune_count(int64_t count, double sparsity) {
  // Python's int(): truncation toward zero of the double product (0.82 * 150 -> 122).
  return static_cast<int64_t>(std::trunc(static_cast<double>(count) * sparsity));
}

}  // namespace lithe::sdk
