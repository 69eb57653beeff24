// NNI's OneshotPruner: each layer's masks are computed once by a masker at the layer's
// configured sparsity; a masker that cannot decide yet (returns nullopt) is asked again at the
// next mask update.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "lithe/sdk/error.h"
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
                std::vector<std::string> accepted)
      : masker_(std::move(masker)),
        algorithm_(std::move(algorithm)),
        accepted_(std::move(accepted)) {
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
    (void)sparsity_keys().read<double>(entry, "sparsity");
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
  std::string algorithm_;
  std::vector<std::string> accepted_;  // empty: any op type
  std::set<int64_t> done_;  // layers whose masks are final (NNI's if_calculated)
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
