#pragma once
/// \file
/// TrainingHooks: what the training engine drives while a model is compressed (a pruning or a
/// quantization session), in NNI's order: update_epoch at each epoch start; after each
/// backward, optimizer_step (which runs optimizer.step() itself, NNI's patched optimizer);
/// step after each batch.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "lithe/sdk/context.h"

namespace torch::optim {
class Optimizer;
}

namespace lithe::host {

class ProcessGroup;

class TrainingHooks {
 public:
  virtual ~TrainingHooks();
  /// Start of epoch `epoch` (0-based).
  virtual void update_epoch(int64_t epoch) = 0;
  /// Runs optimizer.step() and whatever must follow it (mask updates, quantizer steps).
  virtual void optimizer_step(torch::optim::Optimizer& optimizer) = 0;
  /// End of a training batch.
  virtual void step() = 0;
  /// Tensors the optimizer must train besides the model's parameters (e.g. LSQ's step sizes).
  virtual std::vector<at::Tensor> extra_parameters();
  /// After the last batch of the last pass (calibration, training): lets the algorithm check
  /// it saw enough data. Defaults to nothing.
  virtual void end_of_data();
  /// What the algorithm adds to a training batch's loss (SDK 1.7 loss terms): a scalar tensor
  /// to add to the task loss before backward, or an undefined tensor when there is none (the
  /// default). Lithe's trainer adds it; an embedder's own loop does `loss = loss +
  /// session.loss_terms()` when it is defined.
  virtual at::Tensor loss_terms();

  /// Data-parallel runs: the group whose ranks run this session together (nullptr: a single
  /// process, the default). The algorithm's reduce_over_processes calls combine over it. The
  /// training engine sets it from TrainOptions::process_group; it must outlive its use.
  void set_process_group(ProcessGroup* group) { process_group_ = group; }
  ProcessGroup* process_group() const { return process_group_; }
  /// What must hold the same bytes on every rank after each epoch (masks, quantization state):
  /// the training engine compares a checksum across ranks. Defaults to none.
  virtual std::vector<at::Tensor> replicated_state() const;

 protected:
  /// sdk::CompressionContext::reduce_over_processes for the sessions: over the group, or
  /// nothing in a single process.
  void reduce_with_group(std::vector<at::Tensor>& tensors, sdk::Reduction op) const;

 private:
  ProcessGroup* process_group_ = nullptr;
};

}  // namespace lithe::host
