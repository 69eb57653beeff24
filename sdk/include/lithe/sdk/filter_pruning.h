#pragma once
/// \file
/// Structured (filter) pruning of Conv2d layers (and, since SDK 1.5, of Conv1d, Conv3d and
/// Linear layers for criteria that opt in), shared by every filter criterion (L1, L2, FPGM,
/// TaylorFO, APoZ, mean activation): a criterion only scores filters; the SDK turns the
/// scores into masks, one-shot or dependency-aware, with Lithe's exact-k rule. This is NNI's
/// StructuredWeightMasker + _StructuredFilterPruner (reference §2.0, §2.8) minus its tie bugs.

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lithe/sdk/context.h"
#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/masker.h"
#include "lithe/sdk/options.h"
#include "lithe/sdk/pruner.h"

namespace lithe::sdk {

/// The criterion of a filter pruner (NNI's get_channel_sum): one importance score per output
/// filter of a Conv2d layer. Implemented by plugins.
class LITHE_SDK_API FilterScorer {
 public:
  virtual ~FilterScorer();

  /// (optional) Called once before the first score, e.g. to register activation collectors
  /// or optimizer-step callbacks. Defaults to doing nothing.
  virtual void attach(CompressionContext& context);

  /// Scores of `layer`'s filters: a 1-D floating tensor with weight().size(0) elements;
  /// smaller means less important (pruned first). nullopt when the scorer cannot decide yet
  /// (e.g. not enough batches observed); the host retries at the next mask update.
  /// Must be deterministic for identical inputs.
  virtual std::optional<at::Tensor> filter_scores(LayerView& layer) = 0;

  /// (optional) Called whenever the SDK computed masks for `layer` (e.g. activation pruners
  /// stop collecting once every layer is done), including masks left unchanged because
  /// F < 2 or num_prune < 1 (then filter_scores was not asked). In dependency-aware mode
  /// every member of a set is reported when the set is computed. Schedules such as AGP
  /// recompute masks, so it can be called more than once per layer. Defaults to nothing.
  virtual void on_masks_computed(const LayerView& layer);
};

/// A WeightMasker over `scorer` (also usable by schedules such as AGP). For a Conv2d layer
/// with F filters at `sparsity`: num_prune = prune_count(F, sparsity); when F < 2 or
/// num_prune < 1 the current masks are returned unchanged (NNI) without asking the scorer.
/// Otherwise exactly num_prune filters are pruned: filters whose weight mask is already all
/// zero go first (so repeated calls with growing sparsity are monotone and exact), then the
/// smallest scores (NaN after every number), ties to the lower filter index (Lithe departure
/// 1). Pruned filters are zeroed in a copy of the current masks, weight [F, ...] and bias [F]
/// alike, so nothing is revived: with more than num_prune filters already pruned, all stay
/// pruned. Throws sdk::Error(kUnsupportedLayer) naming the layer for anything but Conv2d
/// (`algorithm` names the criterion in messages), kShapeMismatch when the scores do not have
/// F elements, kDeviceMismatch when they are not floating.
LITHE_SDK_API std::unique_ptr<WeightMasker> make_filter_masker(
    std::shared_ptr<FilterScorer> scorer, const std::string& algorithm);

/// NNI's one-shot filter pruner over `scorer`. validate_config: "sparsity" in [0, 1) and
/// op_types containing only "Conv2d". Reads pruner option "dependency_aware" (bool, default
/// false) from `options`, and accepts "dummy_input" for NNI compatibility only when it is a
/// string (ignored: Lithe analyses the model's TorchScript graph, no tracing input needed).
///
/// Normal mode: each layer's masks computed once with make_filter_masker's rule; a layer
/// whose scorer is not ready (nullopt) is retried at the next mask update.
///
/// Dependency-aware mode (Lithe departure 5): layers whose outputs are added together
/// (CompressionContext::channel_dependency_sets, read at attach; a kUnsupported error from
/// the context is rethrown naming `algorithm` and saying a TorchScript model is needed) prune
/// the same channels. The masks of every compressed member of a set are computed together,
/// when the first of them is asked, and each member receives its own at its calc_mask; a
/// singleton set goes through the same rule (its groups still apply). For a set whose members
/// are all compressed, the common sparsity is the members' minimum (0 when a member is not
/// compressed, as NNI); the summed scores of the compressed members, split into G =
/// lcm(group_dependencies of the compressed members) equal groups, choose
/// int(int(C * min_s) / G) channels per group (exact k, ties by index). Every member then
/// prunes those common channels first, then its already fully pruned channels, then further
/// channels by its own scores, up to its own num_prune (F < 2 or num_prune < 1: current masks
/// unchanged). Since min_s is the smallest sparsity, every member prunes every common channel.
/// A member whose scorer is not ready delays the whole set (nullopt); when no member has
/// anything to prune, no scorer is asked. Members must have equal filter counts
/// (kShapeMismatch) and C must split into G groups (kUnsupportedLayer). Reports the coupled
/// sets at kInfo log level once, at attach.
LITHE_SDK_API std::unique_ptr<Pruner> make_filter_pruner(std::shared_ptr<FilterScorer> scorer,
                                                         const std::string& algorithm,
                                                         const Options& options);

/// SDK 1.5: every op type the filter framework can prune: "Conv1d", "Conv2d", "Conv3d" and
/// "Linear" — layers whose weight is [F, ...] with one filter per output channel (for Linear a
/// filter is a row: one output feature) and whose bias, if any, is [F].
LITHE_SDK_API const std::vector<std::string>& filter_op_types();

/// SDK 1.5: make_filter_masker for layers of any type in `op_types` (a non-empty subset of
/// filter_op_types(); kUnsupported otherwise). The scorer then sees those layers too, so a
/// criterion opts in only for the types it can score. Same rule otherwise.
LITHE_SDK_API std::unique_ptr<WeightMasker> make_filter_masker_for(
    const std::vector<std::string>& op_types, std::shared_ptr<FilterScorer> scorer,
    const std::string& algorithm);

/// SDK 1.5: make_filter_pruner for layers of any type in `op_types` (a non-empty subset of
/// filter_op_types(); kUnsupported otherwise): validate_config accepts op_types naming only
/// those types. In dependency-aware mode the sets come from the same
/// CompressionContext::channel_dependency_sets, which lists every Conv1d/2d/3d and Linear
/// module (SDK 1.5 hosts); a set may then mix types (a Linear whose output is added to a
/// convolution's), and its members still need equal output counts.
LITHE_SDK_API std::unique_ptr<Pruner> make_filter_pruner_for(
    const std::vector<std::string>& op_types, std::shared_ptr<FilterScorer> scorer,
    const std::string& algorithm, const Options& options);

}  // namespace lithe::sdk
