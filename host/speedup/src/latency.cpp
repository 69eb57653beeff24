// Alternating median latency (see latency.h).
#include "lithe/host/speedup/latency.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

double time_one(torch::jit::Module& module, const at::Tensor& input) {
  const auto start = std::chrono::steady_clock::now();
  module.forward({input});
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

}  // namespace

LatencyComparison compare_latency(torch::jit::Module& baseline, torch::jit::Module& candidate,
                                  const at::Tensor& input, int warmup, int runs) {
  LITHE_CHECK(runs >= 1, sdk::Errc::kInvalidConfig, "latency runs must be >= 1, got ", runs);
  LITHE_CHECK(warmup >= 0, sdk::Errc::kInvalidConfig, "latency warm-up runs must be >= 0, got ",
              warmup);
  baseline.eval();
  candidate.eval();
  at::NoGradGuard no_grad;
  // The profiling executor specialises a graph over its first runs: warm-up covers that too.
  for (int i = 0; i < warmup; ++i) {
    baseline.forward({input});
    candidate.forward({input});
  }
  std::vector<double> base;
  std::vector<double> cand;
  for (int i = 0; i < runs; ++i) {
    if (i % 2 == 0) {
      base.push_back(time_one(baseline, input));
      cand.push_back(time_one(candidate, input));
    } else {
      cand.push_back(time_one(candidate, input));
      base.push_back(time_one(baseline, input));
    }
  }
  return {median(base), median(cand), runs, at::get_num_threads()};
}

}  // namespace lithe::host
