#pragma once
/// \file
/// TrainingHooks: what the training engine drives while a model is compressed (a pruning or a
/// quantization session), in NNI's order: update_epoch at each epoch start; after each
/// backward, optimizer_step (which runs optimizer.step() itself, NNI's patched optimizer);
/// step after each batch.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace lithe::host {

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
};

}  // namespace lithe::host
