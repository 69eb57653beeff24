// The filter masker every filter criterion shares (NNI's StructuredWeightMasker._normal_calc_mask,
// reference §2.0): a criterion scores the filters, this file turns the scores into masks with
// Lithe's exact-k rule (departure 1) instead of NNI's "<= k-th smallest value" threshold, which
// over-prunes on ties. Also the FilterScorer's out-of-line members (they anchor its vtable in
// liblithe_sdk, like interfaces.cpp does for the other interfaces).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "filter_selection.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/filter_pruning.h"

namespace lithe::sdk {

FilterScorer::~FilterScorer() = default;
void FilterScorer::attach(CompressionContext&) {}
void FilterScorer::on_masks_computed(const LayerView&) {}

namespace detail {

std::vector<double> checked_scores(const at::Tensor& scores, const LayerView& layer,
                                   int64_t filters, const std::string& algorithm) {
  LITHE_CHECK(scores.defined() && scores.numel() == filters, Errc::kShapeMismatch, "layer '",
              layer.name(), "': ", algorithm, " must score each of the ", filters,
              " output filters once (a 1-D tensor of ", filters, " elements), got ",
              scores.defined() ? scores.sizes() : at::IntArrayRef{}, " (",
              scores.defined() ? scores.numel() : 0, " elements)");
  LITHE_CHECK(scores.is_floating_point(), Errc::kDeviceMismatch, "layer '", layer.name(), "': ",
              algorithm, " filter scores must be a floating tensor, got ", scores.scalar_type());
  // Every float dtype converts to float64 exactly, so nothing ties that did not tie before.
  const at::Tensor cpu = scores.detach().reshape({filters}).to(at::kCPU, at::kDouble).contiguous();
  const double* data = cpu.data_ptr<double>();
  return std::vector<double>(data, data + filters);
}

std::vector<bool> fully_pruned_filters(const LayerView& layer) {
  const at::Tensor& mask = layer.masks().weight;
  const at::Tensor pruned = mask.reshape({mask.size(0), -1}).eq(0).all(1).to(at::kCPU);
  std::vector<bool> out(static_cast<size_t>(pruned.size(0)));
  const auto acc = pruned.accessor<bool, 1>();
  for (int64_t i = 0; i < pruned.size(0); ++i) {
    out[static_cast<size_t>(i)] = acc[i];
  }
  return out;
}

std::vector<bool> select_filters(const std::vector<int>& priority,
                                 const std::vector<double>& scores, int64_t count) {
  LITHE_INTERNAL_ASSERT(priority.size() == scores.size());
  LITHE_INTERNAL_ASSERT(count >= 0 && static_cast<size_t>(count) <= scores.size());
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // A strict weak order even with NaN (a NaN score sorts after every number, as in torch.sort);
  // the index is the last key, so the result does not depend on the sort's stability.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (priority[a] != priority[b]) {
      return priority[a] < priority[b];
    }
    const bool nan_a = std::isnan(scores[a]);
    const bool nan_b = std::isnan(scores[b]);
    if (nan_a != nan_b) {
      return nan_b;
    }
    if (!nan_a && scores[a] != scores[b]) {
      return scores[a] < scores[b];
    }
    return a < b;
  });
  std::vector<bool> pruned(scores.size(), false);
  for (int64_t i = 0; i < count; ++i) {
    pruned[order[static_cast<size_t>(i)]] = true;
  }
  return pruned;
}

Masks zero_filters(const LayerView& layer, const std::vector<bool>& pruned) {
  Masks masks = layer.masks().clone();
  const int64_t filters = masks.weight.size(0);
  LITHE_INTERNAL_ASSERT(static_cast<size_t>(filters) == pruned.size());
  std::vector<float> keep_values(pruned.size());
  for (size_t i = 0; i < pruned.size(); ++i) {
    keep_values[i] = pruned[i] ? 0.f : 1.f;
  }
  const at::Tensor keep =
      at::tensor(keep_values).to(masks.weight.device(), masks.weight.scalar_type());
  std::vector<int64_t> shape(static_cast<size_t>(masks.weight.dim()), 1);
  shape[0] = filters;
  // Multiplying the copy keeps any finer-grained zeros an earlier algorithm left (NNI zeroes the
  // chosen filters in its base mask, which is a clone of the current masks).
  masks.weight.mul_(keep.reshape(shape));
  if (layer.bias().has_value()) {
    if (!masks.bias.has_value()) {
      masks.bias = at::ones({filters}, masks.weight.options());
    }
    masks.bias->mul_(keep.to(masks.bias->device(), masks.bias->scalar_type()));
  }
  return masks;
}

}  // namespace detail

namespace {

class FilterMasker final : public WeightMasker {
 public:
  FilterMasker(std::vector<std::string> op_types, std::shared_ptr<FilterScorer> scorer,
               std::string algorithm)
      : op_types_(std::move(op_types)),
        scorer_(std::move(scorer)),
        algorithm_(std::move(algorithm)) {
    LITHE_INTERNAL_ASSERT(scorer_ != nullptr);
  }

  void attach(CompressionContext& context) override { scorer_->attach(context); }

  std::optional<Masks> calc_mask(LayerView& layer, double sparsity) override {
    require_layer_op_type_in(layer, op_types_, algorithm_);
    const int64_t filters = layer.weight().size(0);
    const int64_t num_prune = prune_count(filters, sparsity);
    if (filters < 2 || num_prune < 1) {
      // NNI returns its base mask before asking the criterion, so a data-driven scorer that has
      // seen nothing yet does not delay this layer.
      Masks unchanged = layer.masks().clone();
      scorer_->on_masks_computed(layer);
      return unchanged;
    }
    std::optional<at::Tensor> raw = scorer_->filter_scores(layer);
    if (!raw.has_value()) {
      return std::nullopt;
    }
    const std::vector<double> scores = detail::checked_scores(*raw, layer, filters, algorithm_);
    // Filters pruned before go first, so a growing sparsity (AGP) only ever adds filters and
    // the layer ends with exactly num_prune pruned ones.
    const std::vector<bool> already = detail::fully_pruned_filters(layer);
    std::vector<int> priority(already.size());
    for (size_t i = 0; i < already.size(); ++i) {
      priority[i] = already[i] ? 0 : 1;
    }
    Masks masks =
        detail::zero_filters(layer, detail::select_filters(priority, scores, num_prune));
    scorer_->on_masks_computed(layer);
    return masks;
  }

 private:
  std::vector<std::string> op_types_;
  std::shared_ptr<FilterScorer> scorer_;
  std::string algorithm_;
};

}  // namespace

const std::vector<std::string>& filter_op_types() {
  static const std::vector<std::string> types{"Conv1d", "Conv2d", "Conv3d", "Linear"};
  return types;
}

namespace detail {

void check_filter_op_types(const std::vector<std::string>& op_types,
                           const std::string& algorithm) {
  LITHE_CHECK(!op_types.empty(), Errc::kUnsupported, algorithm,
              ": filter pruning needs at least one op type");
  for (const std::string& type : op_types) {
    const auto& known = filter_op_types();
    LITHE_CHECK(std::find(known.begin(), known.end(), type) != known.end(), Errc::kUnsupported,
                algorithm, ": filter pruning cannot prune ", type,
                " layers (it prunes Conv1d, Conv2d, Conv3d and Linear)");
  }
}

}  // namespace detail

std::unique_ptr<WeightMasker> make_filter_masker(std::shared_ptr<FilterScorer> scorer,
                                                 const std::string& algorithm) {
  return std::make_unique<FilterMasker>(std::vector<std::string>{"Conv2d"}, std::move(scorer),
                                        algorithm);
}

std::unique_ptr<WeightMasker> make_filter_masker_for(const std::vector<std::string>& op_types,
                                                     std::shared_ptr<FilterScorer> scorer,
                                                     const std::string& algorithm) {
  detail::check_filter_op_types(op_types, algorithm);
  return std::make_unique<FilterMasker>(op_types, std::move(scorer), algorithm);
}

}  // namespace lithe::sdk
