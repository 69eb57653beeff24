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

std::vector<double> median_latencies(const std::vector<torch::jit::Module*>& models,
                                     const at::Tensor& input, int warmup, int runs) {
  LITHE_CHECK(runs >= 1, sdk::Errc::kInvalidConfig, "latency runs must be >= 1, got ", runs);
  LITHE_CHECK(warmup >= 0, sdk::Errc::kInvalidConfig, "latency warm-up runs must be >= 0, got ",
              warmup);
  for (torch::jit::Module* model : models) {
    model->eval();
  }
  at::NoGradGuard no_grad;
  // The profiling executor specialises a graph over its first runs: warm-up covers that too.
  for (int i = 0; i < warmup; ++i) {
    for (torch::jit::Module* model : models) {
      model->forward({input});
    }
  }
  std::vector<std::vector<double>> samples(models.size());
  for (int i = 0; i < runs; ++i) {
    // Forwards, then backwards through the list: no model always runs first or last.
    for (size_t k = 0; k < models.size(); ++k) {
      const size_t m = i % 2 == 0 ? k : models.size() - 1 - k;
      samples[m].push_back(time_one(*models[m], input));
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& s : samples) {
    medians.push_back(median(std::move(s)));
  }
  return medians;
}

LatencyComparison compare_latency(torch::jit::Module& baseline, torch::jit::Module& candidate,
                                  const at::Tensor& input, int warmup, int runs) {
  const std::vector<double> medians = median_latencies({&baseline, &candidate}, input, warmup, runs);
  return {medians[0], medians[1], runs, at::get_num_threads()};
}

}  // namespace lithe::host
