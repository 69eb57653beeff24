#pragma once
/// \file
/// BatchNorm re-estimation: new running statistics for every BatchNorm layer, measured on data
/// through the model as it is now. Pruning changes what a BatchNorm layer sees (masked filters
/// before it, fewer channels feeding it); its old running mean and variance then normalise the
/// wrong distribution, and a pruned model's accuracy before fine-tuning is mostly lost there.
/// Re-estimating them costs a few forward passes and no training.

#include <cstdint>
#include <string>
#include <vector>

#include "lithe/host/model/model.h"
#include "lithe/host/train/dataset.h"

namespace lithe::host {

struct BatchNormRecalibration {
  /// BatchNorm layers whose running statistics were re-estimated, in module order.
  std::vector<std::string> layers;
  /// BatchNorm layers that track running statistics but that no forward reached (a branch
  /// the data never takes): their statistics are left as they were.
  std::vector<std::string> not_reached;
  int64_t batches = 0;
  int64_t samples = 0;
};

/// Re-estimates the running mean and variance of every BatchNorm1d/2d/3d layer that tracks
/// them (track_running_stats) from the first `batches` batches of `data` (file order,
/// `batch_size` samples each; the last may be smaller). The model runs in evaluation mode
/// (dropout off, no gradients, weights and masks unchanged; forwards are not observed by
/// activation collectors) with its BatchNorm layers in training mode. Each layer's new
/// statistics are the plain average of the batches' means and unbiased variances (PyTorch's
/// cumulative average, momentum None), whatever momentum the layer has; num_batches_tracked
/// becomes the number of batches that reached the layer (`batches` unless a branch skips it). The same data gives byte-identical statistics at any thread count up to
/// the forward's own reductions.
///
/// Throws sdk::Error before any work: kInvalidConfig for batches <= 0, batch_size <= 0 or more
/// batches than `data` holds (naming the dataset); kInvalidModel when the model has no
/// BatchNorm layer that tracks running statistics; kShapeMismatch when the data does not fit
/// the model. kUnsupported naming the layer when a forward calls one BatchNorm layer more than
/// once (its per-batch statistics cannot be separated). On any error every layer keeps its old
/// statistics. The model's training mode is restored in every case.
BatchNormRecalibration recalibrate_batchnorm(Model& model, const Dataset& data, int64_t batches,
                                             int64_t batch_size = 64);

}  // namespace lithe::host
