// NNI's OneshotPruner: each layer's masks are computed once by a masker at the layer's
// configured sparsity; a masker that cannot decide yet (returns nullopt) is asked again at the
// next mask update.
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
  OneShotPruner(std::unique_ptr<WeightMasker> masker, std::string algorithm,
                std::string only_op_type)
      : masker_(std::move(masker)),
        algorithm_(std::move(algorithm)),
        only_op_type_(std::move(only_op_type)) {
    LITHE_INTERNAL_ASSERT(masker_ != nullptr);
  }

  void validate_config(const Options& entry) const override {
    if (!only_op_type_.empty() && entry.has("op_types")) {
      const auto op_types = entry.require<std::vector<std::string>>("op_types");
      for (const std::string& type : op_types) {
        LITHE_CHECK(type == only_op_type_, Errc::kInvalidConfig, entry.path(),
                    "/op_types must contain only \"", only_op_type_, "\" (", algorithm_,
                    " prunes ", only_op_type_, " layers only; \"default\" is not accepted), got ",
                    quoted_list(op_types));
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
  std::string only_op_type_;  // empty: any op type
  std::set<int64_t> done_;  // layers whose masks are final (NNI's if_calculated)
};

}  // namespace

std::unique_ptr<Pruner> make_one_shot_pruner(std::unique_ptr<WeightMasker> masker) {
  return std::make_unique<OneShotPruner>(std::move(masker), "", "");
}

std::unique_ptr<Pruner> make_one_shot_pruner(std::unique_ptr<WeightMasker> masker,
                                             const std::string& algorithm,
                                             const std::string& only_op_type) {
  return std::make_unique<OneShotPruner>(std::move(masker), algorithm, only_op_type);
}

void require_layer_op_type(const LayerView& layer, const std::string& op_type,
                           const std::string& algorithm) {
  LITHE_CHECK(layer.op_type() == op_type, Errc::kUnsupportedLayer, "layer '", layer.name(),
              "' is a ", layer.op_type(), "; ", algorithm, " prunes ", op_type,
              " layers only (restrict the config entry with op_types [\"", op_type, "\"])");
}

int64_t prune_count(int64_t count, double sparsity) {
  // Python's int(): truncation toward zero of the double product (0.82 * 150 -> 122).
  return static_cast<int64_t>(std::trunc(static_cast<double>(count) * sparsity));
}

}  // namespace lithe::sdk
