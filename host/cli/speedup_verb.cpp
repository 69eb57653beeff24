// `lithe speedup`: a masked model made physically smaller, checked and measured
// (host::run_speedup_check, the job embedders call).
#include <cstdio>
#include <string>
#include <vector>

#include "field_flags.h"
#include "input_shape.h"
#include "lithe/host/io/threads.h"
#include "lithe/host/jobs/speedup_job.h"
#include "lithe/sdk/error.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

std::string dims(const std::vector<int64_t>& shape) {
  std::string out;
  for (const int64_t d : shape) {
    out += (out.empty() ? "" : "x") + std::to_string(d);
  }
  return out.empty() ? "-" : out;
}

double ratio(double after, double before) { return before > 0 ? after / before : 0; }

void print_flops(const char* label, const host::FlopsBeforeAfter& pair) {
  if (pair.problem.empty()) {
    std::printf("%-22s %14lld %14lld %8.3f\n", label, static_cast<long long>(pair.before),
                static_cast<long long>(pair.after),
                ratio(static_cast<double>(pair.after), static_cast<double>(pair.before)));
  } else {
    std::printf("%-22s not counted: %s\n", label, pair.problem.c_str());
  }
}

void print_speedup(const host::SpeedupCheck& c) {
  const host::SpeedupResult& result = c.speedup;
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
  if (!result.explained(host::kSpeedupTolerance) ||
      result.max_abs_diff > host::kSpeedupTolerance) {
    for (const host::BatchNormShift& s : result.batchnorm_shifts) {
      std::printf("  %s: %lld removed channel(s) where the masked model adds "
                  "beta - mean*gamma/sqrt(var+eps) (up to %.3g)\n",
                  s.module.c_str(), static_cast<long long>(s.channels), s.max_abs_shift);
    }
    std::printf("  against the masked model with those BatchNorm channels zeroed too: %.3g (%s)\n",
                result.max_abs_diff_without_bn_shift,
                result.explained(host::kSpeedupTolerance)
                    ? "the BatchNorm shift is the whole difference"
                    : "NOT explained by the BatchNorm shift");
  }
  std::printf("\n%-22s %14s %14s %8s\n", "", "masked", "smaller", "ratio");
  std::printf("%-22s %14lld %14lld %8.3f\n", "parameters", static_cast<long long>(c.params_before),
              static_cast<long long>(c.params_after),
              ratio(static_cast<double>(c.params_after), static_cast<double>(c.params_before)));
  print_flops("FLOPs (NNI default)", c.flops);
  print_flops("FLOPs (every op)", c.flops_every_op);
  std::printf("%-22s %14ju %14ju %8.3f\n", "file bytes", c.bytes_before, c.bytes_after,
              ratio(static_cast<double>(c.bytes_after), static_cast<double>(c.bytes_before)));
  std::printf("%-22s %14.4f %14.4f %8.3f   (median of %d, %d threads; before: the %s)\n",
              "latency ms", c.latency_before_ms, c.latency_after_ms,
              ratio(c.latency_after_ms, c.latency_before_ms), c.latency_runs, c.threads,
              c.latency_baseline.c_str());
}

}  // namespace

int run_speedup(const std::vector<std::string>& args) {
  std::string model_path;
  std::string input_shape_text;
  std::string output_path;
  std::string json_path;
  std::string dense_path;
  int threads = 0;
  host::SpeedupRequest r;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "masked (or unmasked) TorchScript model")
      ("masks", po::value(&r.masks_path)->required(), "masks in NNI's mask.pth layout")
      ("input-shape", po::value(&input_shape_text)->required(),
       "example input shape, batch first, e.g. 1,3,32,32")
      ("output", po::value(&output_path)->required(), "where to write the smaller model")
      ("json", po::value(&json_path), "also write the report as JSON to this file")
      ("dense-model", po::value(&dense_path),
       "the model before masking (same parameters and shapes as --model), timed as the "
       "latency baseline instead of the masked model, whose zeroed channels can make "
       "data-dependent ops such as max pooling cheaper than in the dense model")
      ("latency-runs", po::value(&r.latency_runs)->default_value(50),
       "timed forwards of each model")
      ("warmup", po::value(&r.warmup)->default_value(10), "untimed forwards before timing")
      ("threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)")
      ("allow-mismatch", po::bool_switch(&r.allow_mismatch),
       "write the smaller model even when it differs from the masked one by more than the "
       "BatchNorm shift explains (a bug: please report it)");
  if (!parse_verb_args("speedup",
                       "--model M.pt --masks MASKS.pth --input-shape 1,3,32,32 --output SMALL.pt",
                       args, desc)) {
    return 0;
  }
  r.model = host::ModelSource::file(model_path);
  r.output = host::Output::to_file(output_path);
  r.report = host::Output::to_file(json_path);
  if (!dense_path.empty()) {
    r.dense_model = host::ModelSource::file(dense_path);
  }
  const FlagWords flags = {{"model", "--model"},          {"masks_path", "--masks"},
                           {"masks", "--masks"},          {"output", "--output"},
                           {"report", "--json"},          {"dense_model", "--dense-model"},
                           {"latency_runs", "--latency-runs"}, {"warmup", "--warmup"},
                           {"input_shape", "--input-shape"},
                           {"allow_mismatch", "--allow-mismatch"}};
  r.input_shape = parse_input_shape(input_shape_text);
  const int thread_count = host::configure_threads(threads);
  const host::SpeedupCheck c = in_flags(flags, [&] { return host::run_speedup_check(r); });
  std::printf("speedup of %s with %s (input %s, %d threads)\n\n", model_path.c_str(),
              r.masks_path.c_str(), dims(r.input_shape).c_str(), thread_count);
  print_speedup(c);
  std::printf("\nwrote %s\n", output_path.c_str());
  return 0;
}

}  // namespace lithe::cli
