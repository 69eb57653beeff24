#include "lithe/host/pipeline/pruned_cost_meter.h"

#include <torch/script.h>

#include <utility>

#include "lithe/host/pipeline/resource_budget.h"
#include "lithe/host/speedup/speedup.h"

namespace lithe::host {

std::function<sdk::ModelCost()> pruned_cost_meter(const torch::jit::Module& dense,
                                                  const PruningSession& session,
                                                  const std::vector<int64_t>& input_shape) {
  torch::jit::Module reference = dense.clone();
  const LatencySettings shape{input_shape};
  const ResourceUse whole =
      measure_resources(reference, reference, FlopsMode::kDefault, shape, false);
  return [reference, &session, shape, whole]() mutable {
    // Counted on the CPU copy of the model, whatever device the session's masks live on.
    std::vector<std::pair<std::string, sdk::Masks>> masks = session.masks();
    for (auto& [name, m] : masks) {
      m.weight = m.weight.cpu();
      if (m.bias.has_value()) {
        m.bias = m.bias->cpu();
      }
    }
    SpeedupResult sped = speedup_model(reference, masks, at::zeros(shape.input_shape),
                                       session.algorithm() + "'s masks");
    torch::jit::Module smaller = *sped.module;
    const ResourceUse use =
        measure_resources(smaller, reference, FlopsMode::kDefault, shape, false);
    return sdk::ModelCost{use.flops, use.params, whole.flops, whole.params};
  };
}

}  // namespace lithe::host
