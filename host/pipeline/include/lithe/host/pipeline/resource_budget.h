#pragma once
/// \file
/// What a search may spend: a budget on FLOPs, parameters or measured latency, given relative to
/// the dense model ("0.5x") or absolute ("2.5e6" FLOPs or parameters, "3.2ms"), and the
/// resources one model uses, measured on the model as it will run (the sped-up model, not the
/// masked one: NNI's searches count masked models, which run no faster).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/graph/flops_counter.h"

namespace torch::jit {
struct Module;
}

namespace lithe::host {

enum class ResourceKind { kFlops, kParams, kLatency };

/// "flops", "params", "latency".
const char* resource_kind_name(ResourceKind kind);

struct ResourceBudget {
  ResourceKind kind = ResourceKind::kFlops;
  /// relative: a share of the dense model's use, in (0, 1]; otherwise FLOPs, parameters, or
  /// milliseconds.
  double value = 0.5;
  bool relative = true;

  std::string describe() const;
};

struct ResourceUse;

/// Whether `use` is within `budget`: relative budgets compare use.ratio() with the share,
/// absolute ones use.of() with the value.
bool within_budget(const ResourceBudget& budget, const ResourceUse& use, const ResourceUse& dense);

/// Parses `text` as the `option` budget of `kind`: "0.5x" (a share of the dense model, in
/// (0, 1]), or an absolute positive number ("2.5e6"; latency: "3.2ms"). sdk::Error
/// (kInvalidConfig) naming the option, the rule and the text otherwise.
ResourceBudget parse_resource_budget(ResourceKind kind, const std::string& text,
                                     const std::string& option);

/// How latency is measured: `runs` rounds of one forward each of the dense model and the
/// candidate, alternating (median_latencies), after `warmup` untimed forwards, on an input of
/// `input_shape` under the current thread settings.
struct LatencySettings {
  std::vector<int64_t> input_shape;  ///< batch first
  int warmup = 3;
  int runs = 30;
};

/// What one model uses.
struct ResourceUse {
  int64_t flops = 0;
  int64_t params = 0;           ///< every parameter of the model
  double latency_ms = 0;        ///< median of the timed forwards
  double dense_latency_ms = 0;  ///< the dense model's median in the same measurement

  /// The use of `kind`: FLOPs, parameters, or milliseconds.
  double of(ResourceKind kind) const;
  /// Relative to the dense model: latency against the dense median measured alongside, FLOPs
  /// and parameters against `dense` (this model's counts when dense is itself).
  double ratio(ResourceKind kind, const ResourceUse& dense) const;
};

/// FLOPs (counted with `mode`) and every parameter of `model` on `latency.input_shape`; with
/// `time_it`, also both medians of timing `model` against `dense` alternately. Both modules
/// are switched to eval mode; neither is otherwise changed.
ResourceUse measure_resources(torch::jit::Module& model, torch::jit::Module& dense,
                              FlopsMode mode, const LatencySettings& latency, bool time_it);

/// Times a candidate against the dense model elsewhere than in measure_resources' loop (e.g. in
/// a fresh process): (dense ms, candidate ms), medians.
using LatencyProbe = std::function<std::pair<double, double>(const torch::jit::Module& candidate)>;

/// measure_resources, with both latencies from `probe` when time_it and a probe is given.
ResourceUse measure_resources(torch::jit::Module& model, torch::jit::Module& dense,
                              FlopsMode mode, const LatencySettings& latency, bool time_it,
                              const LatencyProbe& probe);

}  // namespace lithe::host
