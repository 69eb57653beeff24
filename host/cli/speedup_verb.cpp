// `lithe speedup`: a masked model made physically smaller, checked and measured.
#include <ATen/ATen.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "input_shape.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/model/model.h"
#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/host/speedup/speedup.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/io/threads.h"
#include "lithe/sdk/error.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string dims(const std::vector<int64_t>& shape) {
  std::string out;
  for (const int64_t d : shape) {
    out += (out.empty() ? "" : "x") + std::to_string(d);
  }
  return out.empty() ? "-" : out;
}

int64_t parameter_count(const torch::jit::Module& module) {
  int64_t n = 0;
  for (const at::Tensor& p : module.parameters()) {
    n += p.numel();
  }
  return n;
}

std::string serialized(const torch::jit::Module& module) {
  std::ostringstream out;
  module.save(out);
  return out.str();
}

double ratio(double after, double before) { return before > 0 ? after / before : 0; }

// FLOPs of the masked and the smaller model in one counting mode, or why they could not be
// counted (the first line of the error).
struct FlopsPair {
  int64_t before = -1;
  int64_t after = -1;
  std::string problem;
};

FlopsPair count_both(const torch::jit::Module& masked, const torch::jit::Module& small,
                     const std::vector<int64_t>& shape, host::FlopsMode mode) {
  FlopsPair pair;
  try {
    pair.before = host::count_flops(masked, shape, mode).total_flops;
    pair.after = host::count_flops(small, shape, mode).total_flops;
  } catch (const std::exception& e) {
    pair.problem = e.what();
    pair.problem = pair.problem.substr(0, pair.problem.find('\n'));
  }
  return pair;
}

void print_flops(const char* label, const FlopsPair& pair) {
  if (pair.problem.empty()) {
    std::printf("%-22s %14lld %14lld %8.3f\n", label, static_cast<long long>(pair.before),
                static_cast<long long>(pair.after), ratio(pair.after, pair.before));
  } else {
    std::printf("%-22s not counted: %s\n", label, pair.problem.c_str());
  }
}

// The dense model stands in for the masked one as the latency baseline only when it is the same
// architecture: every parameter of one is a parameter of the other, with the same shape.
void check_same_parameters(const torch::jit::Module& dense, const std::string& dense_path,
                           const torch::jit::Module& masked, const std::string& masked_path) {
  const auto shapes = [](const torch::jit::Module& m) {
    std::map<std::string, std::vector<int64_t>> out;
    for (const auto& p : m.named_parameters(/*recurse=*/true)) {
      out[p.name] = p.value.sizes().vec();
    }
    return out;
  };
  const auto dense_shapes = shapes(dense);
  const auto masked_shapes = shapes(masked);
  const std::string rule =
      " (the dense model must be the same architecture as --model, before masking)";
  for (const auto& [name, shape] : dense_shapes) {
    const auto it = masked_shapes.find(name);
    LITHE_CHECK(it != masked_shapes.end(), sdk::Errc::kInvalidConfig, "--dense-model ",
                dense_path, ": parameter '", name, "' is not in ", masked_path, rule);
    LITHE_CHECK(it->second == shape, sdk::Errc::kShapeMismatch, "--dense-model ", dense_path,
                ": parameter '", name, "' is ", dims(shape), " but ", dims(it->second), " in ",
                masked_path, rule);
  }
  for (const auto& [name, shape] : masked_shapes) {
    LITHE_CHECK(dense_shapes.count(name) != 0, sdk::Errc::kInvalidConfig, "--dense-model ",
                dense_path, ": has no parameter '", name, "' of ", masked_path, rule);
  }
}

json flops_json(const FlopsPair& pair) {
  if (!pair.problem.empty()) {
    return {{"error", pair.problem}};
  }
  return {{"before", pair.before}, {"after", pair.after}, {"ratio", ratio(pair.after, pair.before)}};
}

// Outputs within this of the reference count as equal (float summation order only).
constexpr double kTolerance = 1e-4;

}  // namespace

int run_speedup(const std::vector<std::string>& args) {
  std::string model_path;
  std::string masks_path;
  std::string input_shape_text;
  std::string output_path;
  std::string json_path;
  std::string dense_path;
  int runs = 50;
  int warmup = 10;
  int threads = 0;
  bool allow_mismatch = false;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "masked (or unmasked) TorchScript model")
      ("masks", po::value(&masks_path)->required(), "masks in NNI's mask.pth layout")
      ("input-shape", po::value(&input_shape_text)->required(),
       "example input shape, batch first, e.g. 1,3,32,32")
      ("output", po::value(&output_path)->required(), "where to write the smaller model")
      ("json", po::value(&json_path), "also write the report as JSON to this file")
      ("dense-model", po::value(&dense_path),
       "the model before masking (same parameters and shapes as --model), timed as the "
       "latency baseline instead of the masked model, whose zeroed channels can make "
       "data-dependent ops such as max pooling cheaper than in the dense model")
      ("latency-runs", po::value(&runs)->default_value(50), "timed forwards of each model")
      ("warmup", po::value(&warmup)->default_value(10), "untimed forwards before timing")
      ("threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)")
      ("allow-mismatch", po::bool_switch(&allow_mismatch),
       "write the smaller model even when it differs from the masked one by more than the "
       "BatchNorm shift explains (a bug: please report it)");
  if (!parse_verb_args("speedup",
                       "--model M.pt --masks MASKS.pth --input-shape 1,3,32,32 --output SMALL.pt",
                       args, desc)) {
    return 0;
  }
  // Empty paths (options not given) are skipped.
  host::check_output_paths(
      {{"--model", model_path}, {"--masks", masks_path}, {"--dense-model", dense_path}},
      {{"--output", output_path}, {"--json", json_path}});
  LITHE_CHECK(runs >= 1 && warmup >= 0, sdk::Errc::kInvalidConfig,
              "--latency-runs must be >= 1 and --warmup >= 0, got ", runs, " and ", warmup);
  const std::vector<int64_t> shape = parse_input_shape(input_shape_text);
  const int thread_count = host::configure_threads(threads);

  // Seconds per phase, in the JSON report (the tool's own speed is benchmarked against NNI's).
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  Clock::time_point phase = Clock::now();
  torch::jit::Module model = host::load_torchscript_module(model_path);
  model.eval();
  std::optional<torch::jit::Module> dense;
  if (!dense_path.empty()) {
    dense = host::load_torchscript_module(dense_path);
    dense->eval();
    check_same_parameters(*dense, dense_path, model, model_path);
  }
  const host::NamedMasks masks = host::load_masks(masks_path);
  // A fixed, non-trivial input: zeros would hide most differences.
  at::Tensor input = at::randn(shape, at::detail::createCPUGenerator(20261122));

  const double load_seconds = since(phase);
  phase = Clock::now();
  const host::SpeedupResult result = host::speedup_model(model, masks, input, masks_path);
  const double speedup_seconds = since(phase);
  torch::jit::Module& small = *result.module;

  // The report measures against the masked model the check used.
  torch::jit::Module& masked = *result.masked;

  const std::string small_bytes = serialized(small);
  // The model file as given: the masked model has the same tensors, and serializing a large
  // model only to measure it costs as much as writing it.
  const uintmax_t model_bytes = std::filesystem::file_size(model_path);
  // The counter measures each layer call; a model it cannot measure still gets its speedup.
  // NNI's count, and every op by the op table (attention products, gates, element-wise ops),
  // which NNI's count leaves out.
  const FlopsPair flops = count_both(masked, small, shape, host::FlopsMode::kDefault);
  const FlopsPair every_op = count_both(masked, small, shape, host::FlopsMode::kOps);
  const int64_t params_before = parameter_count(masked);
  const int64_t params_after = parameter_count(small);
  // The masked model has the dense model's ops and FLOPs, but not always its time: max pooling
  // over all-zero channels runs faster (GoogLeNet at 224x224: 52 ms masked, 65 ms dense).
  const host::LatencyComparison latency =
      host::compare_latency(dense ? *dense : masked, small, input, warmup, runs);
  const char* latency_baseline = dense ? "dense model" : "masked model";

  std::printf("speedup of %s with %s (input %s, %d threads)\n\n", model_path.c_str(),
              masks_path.c_str(), dims(shape).c_str(), thread_count);
  std::printf("%-28s %-12s %-16s %-16s\n", "layer", "type", "weight before", "weight after");
  for (const host::ShrunkLayer& layer : result.layers) {
    std::printf("%-28s %-12s %-16s %-16s\n", layer.module.c_str(), layer.op_type.c_str(),
                dims(layer.weight_shape_before).c_str(), dims(layer.weight_shape_after).c_str());
  }
  if (result.layers.empty()) {
    std::printf("(no layer could be shrunk: the masks remove no whole channel)\n");
  }
  for (const host::SpeedupBlock& b : result.blocked) {
    std::printf("kept: %lld zeroed channel(s) at %s: %s\n", static_cast<long long>(b.channels),
                b.where.c_str(), b.reason.c_str());
  }
  std::printf("\ncheck on a fixed random input: max |smaller - masked| = %.3g\n",
              result.max_abs_diff);
  if (!result.explained(kTolerance) || result.max_abs_diff > kTolerance) {
    for (const host::BatchNormShift& s : result.batchnorm_shifts) {
      std::printf("  %s: %lld removed channel(s) where the masked model adds "
                  "beta - mean*gamma/sqrt(var+eps) (up to %.3g)\n",
                  s.module.c_str(), static_cast<long long>(s.channels), s.max_abs_shift);
    }
    std::printf("  against the masked model with those BatchNorm channels zeroed too: %.3g (%s)\n",
                result.max_abs_diff_without_bn_shift,
                result.explained(kTolerance) ? "the BatchNorm shift is the whole difference"
                                             : "NOT explained by the BatchNorm shift");
  }
  std::printf("\n%-22s %14s %14s %8s\n", "", "masked", "smaller", "ratio");
  std::printf("%-22s %14lld %14lld %8.3f\n", "parameters", static_cast<long long>(params_before),
              static_cast<long long>(params_after), ratio(params_after, params_before));
  print_flops("FLOPs (NNI default)", flops);
  print_flops("FLOPs (every op)", every_op);
  std::printf("%-22s %14ju %14zu %8.3f\n", "file bytes", model_bytes, small_bytes.size(),
              ratio(static_cast<double>(small_bytes.size()), static_cast<double>(model_bytes)));
  std::printf("%-22s %14.4f %14.4f %8.3f   (median of %d, %d threads; before: the %s)\n",
              "latency ms", latency.baseline_ms, latency.candidate_ms,
              ratio(latency.candidate_ms, latency.baseline_ms), latency.runs, latency.threads,
              latency_baseline);

  json report;
  report["model"] = model_path;
  report["masks"] = masks_path;
  report["output"] = output_path;
  report["input_shape"] = shape;
  report["layers"] = json::array();
  for (const host::ShrunkLayer& layer : result.layers) {
    report["layers"].push_back({{"module", layer.module},
                                {"type", layer.op_type},
                                {"weight_shape_before", layer.weight_shape_before},
                                {"weight_shape_after", layer.weight_shape_after}});
  }
  report["blocked"] = json::array();
  for (const host::SpeedupBlock& b : result.blocked) {
    report["blocked"].push_back({{"where", b.where}, {"reason", b.reason}, {"channels", b.channels}});
  }
  report["batchnorm_shifts"] = json::array();
  for (const host::BatchNormShift& s : result.batchnorm_shifts) {
    report["batchnorm_shifts"].push_back(
        {{"module", s.module}, {"channels", s.channels}, {"max_abs_shift", s.max_abs_shift}});
  }
  report["max_abs_diff"] = result.max_abs_diff;
  report["max_abs_diff_without_bn_shift"] = result.max_abs_diff_without_bn_shift;
  report["reference_max_abs"] = result.reference_max_abs;
  report["params"] = {{"before", params_before}, {"after", params_after},
                      {"ratio", ratio(params_after, params_before)}};
  report["flops"] = flops_json(flops);
  report["flops_every_op"] = flops_json(every_op);
  report["file_bytes"] = {
      {"before", model_bytes},
      {"after", small_bytes.size()},
      {"ratio", ratio(static_cast<double>(small_bytes.size()), static_cast<double>(model_bytes))}};
  report["latency_ms"] = {{"before", latency.baseline_ms}, {"after", latency.candidate_ms},
                          {"ratio", ratio(latency.candidate_ms, latency.baseline_ms)},
                          {"runs", latency.runs}, {"threads", latency.threads},
                          {"baseline", latency_baseline}};
  // load: model and masks read; speedup: masks applied, channels planned, the smaller model
  // built and checked against the masked one (speedup_model); report: serializing, FLOPs and
  // latency measured, up to here.
  report["seconds"] = {{"load", load_seconds},
                       {"speedup", speedup_seconds},
                       {"report", since(phase)}};

  LITHE_CHECK(result.explained(kTolerance) || allow_mismatch, sdk::Errc::kInternal,
              "the smaller model differs from the masked model by ",
              result.max_abs_diff_without_bn_shift,
              " beyond the BatchNorm shift (tolerance ", kTolerance,
              " relative to the output's largest value ", result.reference_max_abs,
              "); nothing was written. This is a Lithe bug: please report it with the model "
              "(--allow-mismatch writes the model anyway)");
  // Both outputs or neither.
  host::StagedFile staged_model(output_path, "--output");
  std::optional<host::StagedFile> staged_report;
  staged_model.write(small_bytes);
  if (!json_path.empty()) {
    staged_report.emplace(json_path, "--json");
    staged_report->write(report.dump(1) + "\n");
  }
  staged_model.commit();
  if (staged_report) {
    staged_report->commit();
  }
  std::printf("\nwrote %s\n", output_path.c_str());
  return 0;
}

}  // namespace lithe::cli
