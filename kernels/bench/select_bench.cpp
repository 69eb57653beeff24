// Benchmark of exact-k selection on the 10 layer weights of recipe 1's "Big25M" model
// (shared/reference/recipes.md): Lithe's select_smallest_cpu against the ways NNI and plain C++
// find a pruning threshold (torch::topk as NNI's LevelPruner calls it, torch::kthvalue,
// torch::sort, std::nth_element). k = int(numel * 0.8) per layer.
//
//   lithe_bench_select [--model big25m.pt] [--repeats 3] [--threads 1]
//
// Lithe's time includes allocating and writing the full float32 keep mask; every baseline stops
// at the threshold (it would still need a pass to build a mask), so the ratios are conservative.

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "bench_support.h"
#include "lithe/kernels/selection.h"

namespace {

struct Layer {
  std::string name;
  std::string op_type;
  torch::Tensor weight;
};

struct Args {
  std::string model;
  int repeats = 3;
  int threads = 1;
};

Args parse_args(int argc, char** argv) {
  const lithe::bench::FlagParser flags("lithe_bench_select",
                                "[--model PATH] [--repeats N>=1] [--threads N>=1]");
  Args args;
  flags.parse(argc, argv, [&](const std::string& flag, const char* value) {
    if (flag == "--model") {
      args.model = value;
    } else if (flag == "--repeats" || flag == "--threads") {
      (flag == "--repeats" ? args.repeats : args.threads) =
          static_cast<int>(flags.positive(flag, value, 1024));
    } else {
      return false;
    }
    return true;
  });
  return args;
}

/// The Big25M layers with kaiming-uniform-like weights: U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
/// PyTorch's default bound for Conv2d/Linear.
std::vector<Layer> synthetic_layers() {
  struct Spec {
    const char* name;
    const char* op_type;
    std::vector<int64_t> shape;
  };
  const std::vector<Spec> specs = {
      {"conv1", "Conv2d", {64, 3, 3, 3}},
      {"conv2", "Conv2d", {128, 64, 3, 3}},
      {"conv3", "Conv2d", {256, 128, 3, 3}},
      {"conv4", "Conv2d", {512, 256, 3, 3}},
      {"block.conv1", "Conv2d", {512, 512, 3, 3}},
      {"block.conv2", "Conv2d", {512, 512, 3, 3}},
      {"conv5", "Conv2d", {1024, 512, 3, 3}},
      {"fc1", "Linear", {2048, 4096}},
      {"fc2", "Linear", {2048, 2048}},
      {"fc3", "Linear", {1000, 2048}},
  };
  torch::manual_seed(0);
  std::vector<Layer> layers;
  for (const Spec& s : specs) {
    int64_t fan_in = 1;
    for (std::size_t d = 1; d < s.shape.size(); ++d) {
      fan_in *= s.shape[d];
    }
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    layers.push_back({s.name, s.op_type, torch::rand(s.shape) * (2.0 * bound) - bound});
  }
  return layers;
}

/// Every Conv2d/Linear `weight` of a TorchScript model, in named_modules() order.
std::vector<Layer> model_layers(const std::string& path) {
  torch::jit::Module module = torch::jit::load(path);
  std::vector<Layer> layers;
  for (const auto& item : module.named_modules()) {
    const auto type_name = item.value.type()->name();
    if (!type_name) {
      continue;
    }
    const std::string op_type = type_name->name();
    if ((op_type == "Conv2d" || op_type == "Linear") && item.value.hasattr("weight")) {
      layers.push_back(
          {item.name, op_type,
           item.value.attr("weight").toTensor().detach().to(torch::kFloat).contiguous()});
    }
  }
  return layers;
}

using lithe::bench::median_seconds;

enum Method { kLithe, kTopk, kKthvalue, kSort, kNthElement, kNumMethods };
const char* const kMethodNames[kNumMethods] = {"lithe", "topk", "kthvalue", "sort", "nth_element"};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  torch::NoGradGuard no_grad;
  at::set_num_threads(args.threads);

  std::vector<Layer> layers;
  try {
    layers = args.model.empty() ? synthetic_layers() : model_layers(args.model);
  } catch (const std::exception& e) {
    std::cerr << "lithe_bench_select: cannot load model '" << args.model << "': " << e.what()
              << "\n";
    return 1;
  }
  if (layers.empty()) {
    std::cerr << "lithe_bench_select: no Conv2d/Linear weights found in '" << args.model << "'\n";
    return 1;
  }

  std::printf("weights: %s; threads: %d (at::get_num_threads() = %d); repeats: %d (median)\n",
              args.model.empty() ? "synthetic Big25M, manual_seed(0), U(+-1/sqrt(fan_in))"
                                 : args.model.c_str(),
              args.threads, at::get_num_threads(), args.repeats);
  std::printf("k = int(numel * 0.8); lithe = full exact-k mask; baselines = threshold only\n\n");
  std::printf("%-14s %-7s %10s %10s %9s %9s %9s %9s %11s %9s\n", "layer", "op", "numel", "k",
              "lithe_ms", "topk_ms", "kthv_ms", "sort_ms", "nth_el_ms", "nni_over");

  double total[kNumMethods] = {};
  int64_t total_numel = 0;
  bool all_exact = true;
  for (const Layer& layer : layers) {
    const torch::Tensor w = layer.weight.contiguous();
    const int64_t n = w.numel();
    const auto k = static_cast<int64_t>(static_cast<double>(n) * 0.8);
    total_numel += n;
    if (k == 0) {
      std::printf("%-14s %-7s %10lld %10lld  (skipped: k == 0)\n", layer.name.c_str(),
                  layer.op_type.c_str(), static_cast<long long>(n), static_cast<long long>(k));
      continue;
    }
    const float* wp = w.data_ptr<float>();
    double t[kNumMethods] = {};
    torch::Tensor keep;
    torch::Tensor nni_threshold;

    t[kLithe] = median_seconds(args.repeats, [&] {
      keep = torch::empty_like(w);
      lithe::kernels::select_smallest_cpu(wp, n, k, true, keep.data_ptr<float>(), args.threads);
    });
    t[kTopk] = median_seconds(args.repeats, [&] {
      // NNI v2.0 LevelPrunerMasker: topk(w_abs.view(-1), k, largest=False)[0].max()
      const torch::Tensor w_abs = w.abs();
      nni_threshold = std::get<0>(torch::topk(w_abs.view(-1), k, -1, false)).max();
    });
    t[kKthvalue] = median_seconds(args.repeats,
                                  [&] { (void)std::get<0>(torch::kthvalue(w.abs().view(-1), k)); });
    t[kSort] = median_seconds(
        args.repeats, [&] { (void)std::get<0>(torch::sort(w.abs().view(-1))).index({k - 1}); });
    t[kNthElement] = median_seconds(args.repeats, [&] {
      std::vector<float> a(static_cast<std::size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        a[static_cast<std::size_t>(i)] = std::fabs(wp[i]);
      }
      std::nth_element(a.begin(), a.begin() + (k - 1), a.end());
      volatile float threshold = a[static_cast<std::size_t>(k - 1)];
      (void)threshold;
    });

    const int64_t zeros = (keep == 0).sum().item<int64_t>();
    all_exact = all_exact && zeros == k;
    // NNI prunes every |w| <= threshold: ties at the threshold over-prune.
    const int64_t nni_pruned = (w.abs() <= nni_threshold).sum().item<int64_t>();
    std::printf("%-14s %-7s %10lld %10lld %9.2f %9.2f %9.2f %9.2f %11.2f %9lld%s\n",
                layer.name.c_str(), layer.op_type.c_str(), static_cast<long long>(n),
                static_cast<long long>(k), t[kLithe] * 1e3, t[kTopk] * 1e3, t[kKthvalue] * 1e3,
                t[kSort] * 1e3, t[kNthElement] * 1e3, static_cast<long long>(nni_pruned - k),
                zeros == k ? "" : "  LITHE NOT EXACT");
    for (int m = 0; m < kNumMethods; ++m) {
      total[m] += t[m];
    }
  }

  std::printf("%-14s %-7s %10lld %10s %9.2f %9.2f %9.2f %9.2f %11.2f\n\n", "total", "",
              static_cast<long long>(total_numel), "", total[kLithe] * 1e3, total[kTopk] * 1e3,
              total[kKthvalue] * 1e3, total[kSort] * 1e3, total[kNthElement] * 1e3);
  for (int m = kTopk; m < kNumMethods; ++m) {
    std::printf("%s/lithe = %.2fx\n", kMethodNames[m], total[m] / total[kLithe]);
  }
  const double topk_ratio = total[kTopk] / total[kLithe];
  const double nth_ratio = total[kNthElement] / total[kLithe];
  const bool met = topk_ratio >= 5.0 && nth_ratio > 1.0 && all_exact;
  std::printf(
      "targets (>= 5x topk, > 1x nth_element, exactly k zeros per layer): %s "
      "(topk %.2fx, nth_element %.2fx, exact k: %s)\n",
      met ? "MET" : "NOT MET", topk_ratio, nth_ratio, all_exact ? "yes" : "no");
  return all_exact ? 0 : 3;
}
