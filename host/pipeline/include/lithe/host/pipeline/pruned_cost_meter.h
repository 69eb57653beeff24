#pragma once
/// \file
/// SDK 1.10's CompressionContext::measure_cost for a pruning session on a TorchScript model:
/// what the session's current masks leave of the model once `lithe speedup` removed the
/// channels they zero, counted as `lithe flops` counts (NNI's default: convolutions and Linear
/// layers) and with every parameter. Install it with session.set_cost_meter(...); `lithe
/// compress` does for pruners when it has data.

#include <cstdint>
#include <functional>
#include <vector>

#include "lithe/host/session/pruning_session.h"
#include "lithe/sdk/context.h"

namespace torch::jit {
struct Module;
}

namespace lithe::host {

/// A meter for `session`, whose model has the structure of `dense` (the model as the session
/// found it; its weights do not matter, the masks decide what goes). Counts the dense model
/// once, here; each call speeds up a copy of `dense` under session.masks() on a zero input of
/// `input_shape` (batch first; FLOPs are per that input, so give batch 1 for NNI's figures).
/// `session` must outlive the meter. Throws speedup's sdk::Error (naming the layer) when the
/// masks do not fit the model, kUnsupported when its forward cannot be analysed.
std::function<sdk::ModelCost()> pruned_cost_meter(const torch::jit::Module& dense,
                                                  const PruningSession& session,
                                                  const std::vector<int64_t>& input_shape);

}  // namespace lithe::host
