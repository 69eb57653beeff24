#pragma once
// Internal to the train area: what an evaluation adds up batch by batch (evaluate() and
// LayerCachedEvaluation count the same way, so their results agree exactly).

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "lithe/host/train/trainer.h"

namespace lithe::host::detail {

struct EvalTally {
  double loss_sum = 0;
  int64_t correct = 0;

  /// One batch: summed cross-entropy and top-1 hits.
  void add(const at::Tensor& logits, const at::Tensor& labels);
  /// Means over `samples` (zero for none).
  EvalResult result(int64_t samples) const;
};

}  // namespace lithe::host::detail
