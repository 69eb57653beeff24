#include "lithe/host/jobs/speedup_job.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <sstream>

#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/sdk/error.h"
#include "job_support.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;
using job_support::Clock;
using job_support::F;
using job_support::parameter_count;
using job_support::ratio;
using job_support::seconds_since;

std::string speedup_dims(const std::vector<int64_t>& shape) {
  std::string out;
  for (const int64_t d : shape) {
    out += (out.empty() ? "" : "x") + std::to_string(d);
  }
  return out.empty() ? "-" : out;
}


FlopsBeforeAfter count_both(const torch::jit::Module& masked, const torch::jit::Module& small,
                            const std::vector<int64_t>& shape, FlopsMode mode) {
  FlopsBeforeAfter pair;
  try {
    pair.before = count_flops(masked, shape, mode).total_flops;
    pair.after = count_flops(small, shape, mode).total_flops;
  } catch (const std::exception& e) {
    pair.problem = e.what();
    pair.problem = pair.problem.substr(0, pair.problem.find('\n'));
  }
  return pair;
}

json flops_json(const FlopsBeforeAfter& pair) {
  if (!pair.problem.empty()) {
    return {{"error", pair.problem}};
  }
  return {{"before", pair.before},
          {"after", pair.after},
          {"ratio", ratio(static_cast<double>(pair.after), static_cast<double>(pair.before))}};
}

// The dense model stands in for the masked one as the latency baseline only when it is the same
// architecture: every parameter of one is a parameter of the other, with the same shape.
void check_same_parameters(const torch::jit::Module& dense, const std::string& dense_label,
                           const torch::jit::Module& masked, const std::string& masked_label) {
  const auto shapes = [](const torch::jit::Module& m) {
    std::map<std::string, std::vector<int64_t>> out;
    for (const auto& p : m.named_parameters(/*recurse=*/true)) {
      out[p.name] = p.value.sizes().vec();
    }
    return out;
  };
  const auto dense_shapes = shapes(dense);
  const auto masked_shapes = shapes(masked);
  const std::string rule = " (the dense model must be the same architecture as " + F("model") +
                           ", before masking)";
  for (const auto& [name, shape] : dense_shapes) {
    const auto it = masked_shapes.find(name);
    LITHE_CHECK(it != masked_shapes.end(), sdk::Errc::kInvalidConfig, F("dense_model"), " ",
                dense_label, ": parameter '", name, "' is not in ", masked_label, rule);
    LITHE_CHECK(it->second == shape, sdk::Errc::kShapeMismatch, F("dense_model"), " ",
                dense_label, ": parameter '", name, "' is ", speedup_dims(shape), " but ",
                speedup_dims(it->second), " in ", masked_label, rule);
  }
  for (const auto& [name, shape] : masked_shapes) {
    LITHE_CHECK(dense_shapes.count(name) != 0, sdk::Errc::kInvalidConfig, F("dense_model"), " ",
                dense_label, ": has no parameter '", name, "' of ", masked_label, rule);
  }
}

std::string report_json(const SpeedupRequest& r, const std::string& masks_label,
                        const SpeedupCheck& c) {
  const SpeedupResult& result = c.speedup;
  json report;
  report["model"] = r.model.label();
  report["masks"] = masks_label;
  report["output"] = r.output.file.string();
  report["input_shape"] = r.input_shape;
  report["layers"] = json::array();
  for (const ShrunkLayer& layer : result.layers) {
    report["layers"].push_back({{"module", layer.module},
                                {"type", layer.op_type},
                                {"weight_shape_before", layer.weight_shape_before},
                                {"weight_shape_after", layer.weight_shape_after}});
  }
  report["blocked"] = json::array();
  for (const SpeedupBlock& b : result.blocked) {
    report["blocked"].push_back(
        {{"where", b.where}, {"reason", b.reason}, {"channels", b.channels}});
  }
  report["batchnorm_shifts"] = json::array();
  for (const BatchNormShift& s : result.batchnorm_shifts) {
    report["batchnorm_shifts"].push_back(
        {{"module", s.module}, {"channels", s.channels}, {"max_abs_shift", s.max_abs_shift}});
  }
  report["max_abs_diff"] = result.max_abs_diff;
  report["max_abs_diff_without_bn_shift"] = result.max_abs_diff_without_bn_shift;
  report["reference_max_abs"] = result.reference_max_abs;
  report["params"] = {{"before", c.params_before},
                      {"after", c.params_after},
                      {"ratio", ratio(static_cast<double>(c.params_after),
                                         static_cast<double>(c.params_before))}};
  report["flops"] = flops_json(c.flops);
  report["flops_every_op"] = flops_json(c.flops_every_op);
  report["file_bytes"] = {{"before", c.bytes_before},
                          {"after", c.bytes_after},
                          {"ratio", ratio(static_cast<double>(c.bytes_after),
                                             static_cast<double>(c.bytes_before))}};
  report["latency_ms"] = {{"before", c.latency_before_ms},
                          {"after", c.latency_after_ms},
                          {"ratio", ratio(c.latency_after_ms, c.latency_before_ms)},
                          {"runs", c.latency_runs},
                          {"threads", c.threads},
                          {"baseline", c.latency_baseline}};
  // load: model and masks read; speedup: masks applied, channels planned, the smaller model
  // built and checked against the masked one (speedup_model); report: serializing, FLOPs and
  // latency measured, up to here.
  report["seconds"] = {
      {"load", c.load_seconds}, {"speedup", c.speedup_seconds}, {"report", c.report_seconds}};
  return report.dump(1) + "\n";
}

SpeedupCheck speed_up(const SpeedupRequest& r) {
  LITHE_CHECK(!r.model.empty(), sdk::Errc::kInvalidConfig, F("model"), ": no model given");
  LITHE_CHECK(r.output.wanted(), sdk::Errc::kInvalidConfig, F("output"),
              ": no output model path given");
  LITHE_CHECK(!r.masks.empty() || !r.masks_path.empty(), sdk::Errc::kInvalidConfig, F("masks"),
              ": no masks given (in memory or as ", F("masks_path"), ")");
  LITHE_CHECK(!r.input_shape.empty(), sdk::Errc::kInvalidConfig, F("input_shape"),
              ": no example input shape given");
  // Empty paths (not given) are skipped.
  check_output_paths({{F("model"), r.model.path()},
                      {F("masks_path"), r.masks.empty() ? r.masks_path : ""},
                      {F("dense_model"), r.dense_model.path()}},
                     {{F("output"), r.output.file}, {F("report"), r.report.file}});
  LITHE_CHECK(r.latency_runs >= 1 && r.warmup >= 0, sdk::Errc::kInvalidConfig,
              F("latency_runs"), " must be >= 1 and ", F("warmup"), " >= 0, got ",
              r.latency_runs, " and ", r.warmup);

  SpeedupCheck c;
  Clock::time_point phase = Clock::now();
  torch::jit::Module model = r.model.load(F("model"));
  model.eval();
  std::optional<torch::jit::Module> dense;
  if (!r.dense_model.empty()) {
    dense = r.dense_model.load(F("dense_model"));
    dense->eval();
    check_same_parameters(*dense, r.dense_model.label(), model, r.model.label());
  }
  const std::string masks_label = r.masks.empty() ? r.masks_path.string() : "the masks in memory";
  const NamedMasks masks = r.masks.empty() ? load_masks(r.masks_path) : r.masks;
  // A fixed, non-trivial input: zeros would hide most differences.
  const at::Tensor input = at::randn(r.input_shape, at::detail::createCPUGenerator(20261122));
  c.load_seconds = seconds_since(phase);

  phase = Clock::now();
  c.speedup = speedup_model(model, masks, input, masks_label);
  c.speedup_seconds = seconds_since(phase);
  phase = Clock::now();
  torch::jit::Module& small = *c.speedup.module;
  torch::jit::Module& masked = *c.speedup.masked;  // the baseline the check used
  const std::string small_bytes = job_support::module_bytes(small);
  c.bytes_before = r.model.size_bytes();
  c.bytes_after = small_bytes.size();
  // The counter measures each layer call; a model it cannot measure still gets its speedup.
  // NNI's count, and every op by the op table (attention products, gates, element-wise ops),
  // which NNI's count leaves out.
  c.flops = count_both(masked, small, r.input_shape, FlopsMode::kDefault);
  c.flops_every_op = count_both(masked, small, r.input_shape, FlopsMode::kOps);
  c.params_before = parameter_count(masked);
  c.params_after = parameter_count(small);
  // The masked model has the dense model's ops and FLOPs, but not always its time: max pooling
  // over all-zero channels runs faster (GoogLeNet at 224x224: 52 ms masked, 65 ms dense).
  const LatencyComparison latency =
      compare_latency(dense ? *dense : masked, small, input, r.warmup, r.latency_runs);
  c.latency_before_ms = latency.baseline_ms;
  c.latency_after_ms = latency.candidate_ms;
  c.latency_runs = latency.runs;
  c.threads = latency.threads;
  c.latency_baseline = dense ? "dense model" : "masked model";
  c.report_seconds = seconds_since(phase);
  c.report_json = report_json(r, masks_label, c);

  LITHE_CHECK(c.speedup.explained(kSpeedupTolerance) || r.allow_mismatch, sdk::Errc::kInternal,
              "the smaller model differs from the masked model by ",
              c.speedup.max_abs_diff_without_bn_shift, " beyond the BatchNorm shift (tolerance ",
              kSpeedupTolerance, " relative to the output's largest value ",
              c.speedup.reference_max_abs,
              "); nothing was written. This is a Lithe bug: please report it with the model (",
              F("allow_mismatch"), " writes the model anyway)");
  // Both outputs or neither.
  StagedOutput model_out(r.output, F("output"));
  StagedOutput report_out(r.report, F("report"));
  model_out.write(small_bytes);
  report_out.write(c.report_json);
  model_out.commit();
  report_out.commit();
  return c;
}

}  // namespace

SpeedupCheck run_speedup_check(const SpeedupRequest& request) {
  return rethrow_with_fields([&] { return speed_up(request); });
}

}  // namespace lithe::host
