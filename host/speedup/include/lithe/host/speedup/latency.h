#pragma once
/// \file
/// Measured CPU latency of TorchScript forwards, for reports that put a latency ratio beside a
/// FLOPs ratio. Two models are timed alternately in one loop, so that a change in machine load
/// during the measurement hits both alike.

#include <ATen/core/Tensor.h>

#include <vector>

namespace torch::jit {
struct Module;
}

namespace lithe::host {

struct LatencyComparison {
  double baseline_ms = 0;   ///< median wall-clock time of one baseline forward
  double candidate_ms = 0;  ///< median wall-clock time of one candidate forward
  int runs = 0;             ///< timed forwards of each model
  int threads = 0;          ///< libtorch intra-op threads during the measurement
};

/// Runs `warmup` untimed forwards of each model, then `runs` timed rounds, each timing one
/// baseline forward and one candidate forward (in alternating order), under no_grad with the
/// current thread settings; returns the medians. Both modules are switched to eval mode.
/// Throws sdk::Error(kInvalidConfig) when runs < 1 or warmup < 0.
LatencyComparison compare_latency(torch::jit::Module& baseline, torch::jit::Module& candidate,
                                  const at::Tensor& input, int warmup, int runs);

/// The same for any number of models: `warmup` untimed forwards of each, then `runs` rounds
/// that time one forward of every model, in list order on even rounds and in reverse order on
/// odd ones; the median milliseconds of each model, in list order. Every model is switched to
/// eval mode.
std::vector<double> median_latencies(const std::vector<torch::jit::Module*>& models,
                                     const at::Tensor& input, int warmup, int runs);

}  // namespace lithe::host
