#include "lithe/host/pipeline/resource_budget.h"

#include <torch/script.h>

#include <cmath>
#include <string>
#include <tuple>

#include "lithe/host/io/number_text.h"
#include "lithe/host/pipeline/svg_chart.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

const char* resource_kind_name(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::kFlops: return "flops";
    case ResourceKind::kParams: return "params";
    case ResourceKind::kLatency: return "latency";
  }
  return "?";
}

std::string ResourceBudget::describe() const {
  std::string out = std::string(resource_kind_name(kind)) + " " + shortest_decimal(value);
  if (relative) {
    return out + "x";
  }
  return kind == ResourceKind::kLatency ? out + "ms" : out;
}

ResourceBudget parse_resource_budget(ResourceKind kind, const std::string& text,
                                     const std::string& option) {
  ResourceBudget budget;
  budget.kind = kind;
  const std::string example = kind == ResourceKind::kLatency ? "0.5x or 3.2ms" : "0.5x or 2.5e6";
  if (ends_with(text, "x")) {
    const std::optional<double> share = parse_finite_number(text.substr(0, text.size() - 1));
    LITHE_CHECK(share.has_value(), sdk::Errc::kInvalidConfig, option, ": '", text,
                "' is not a share of the dense model (a number followed by x, e.g. ", example,
                ")");
    LITHE_CHECK(*share > 0 && *share <= 1, sdk::Errc::kInvalidConfig, option,
                ": a share of the dense model must be in (0, 1], got '", text, "'");
    budget.value = *share;
    budget.relative = true;
    return budget;
  }
  std::string number = text;
  if (kind == ResourceKind::kLatency) {
    LITHE_CHECK(ends_with(text, "ms"), sdk::Errc::kInvalidConfig, option,
                ": a latency budget is a share of the dense model's or milliseconds (", example,
                "), got '", text, "'");
    number = text.substr(0, text.size() - 2);
  }
  const std::optional<double> value = parse_finite_number(number);
  LITHE_CHECK(value.has_value(), sdk::Errc::kInvalidConfig, option, ": '", text,
              "' is not a budget (", example, ")");
  LITHE_CHECK(*value > 0, sdk::Errc::kInvalidConfig, option, ": the budget must be > 0, got '",
              text, "'");
  budget.value = *value;
  budget.relative = false;
  return budget;
}

double ResourceUse::of(ResourceKind kind) const {
  switch (kind) {
    case ResourceKind::kFlops: return static_cast<double>(flops);
    case ResourceKind::kParams: return static_cast<double>(params);
    case ResourceKind::kLatency: return latency_ms;
  }
  return 0;
}

double ResourceUse::ratio(ResourceKind kind, const ResourceUse& dense) const {
  if (kind == ResourceKind::kLatency) {
    return dense_latency_ms > 0 ? latency_ms / dense_latency_ms : 0;
  }
  const double whole = dense.of(kind);
  return whole > 0 ? of(kind) / whole : 0;
}

bool within_budget(const ResourceBudget& budget, const ResourceUse& use,
                   const ResourceUse& dense) {
  return budget.relative ? use.ratio(budget.kind, dense) <= budget.value
                         : use.of(budget.kind) <= budget.value;
}

ResourceUse measure_resources(torch::jit::Module& model, torch::jit::Module& dense,
                              FlopsMode mode, const LatencySettings& latency, bool time_it) {
  ResourceUse use;
  const FlopsReport flops = count_flops(model, latency.input_shape, mode);
  use.flops = flops.total_flops;
  use.params = 0;  // every parameter, not only the counted modules' (NNI's total)
  for (const at::Tensor& p : model.parameters(/*recurse=*/true)) {
    use.params += p.numel();
  }
  if (time_it) {
    const at::Tensor input = at::zeros(latency.input_shape);
    const std::vector<double> medians =
        median_latencies({&dense, &model}, input, latency.warmup, latency.runs);
    use.dense_latency_ms = medians[0];
    use.latency_ms = medians[1];
  }
  model.eval();
  dense.eval();
  return use;
}

ResourceUse measure_resources(torch::jit::Module& model, torch::jit::Module& dense,
                              FlopsMode mode, const LatencySettings& latency, bool time_it,
                              const LatencyProbe& probe) {
  if (!time_it || !probe) {
    return measure_resources(model, dense, mode, latency, time_it);
  }
  ResourceUse use = measure_resources(model, dense, mode, latency, false);
  std::tie(use.dense_latency_ms, use.latency_ms) = probe(model);
  return use;
}

}  // namespace lithe::host
