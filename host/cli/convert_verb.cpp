// `lithe convert`: a model quantized by Lithe as a native int8 TorchScript model, with its
// conversion certificate (agreement with the fake-quantized model, file size, latency).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "input_shape.h"
#include "lithe/host/export/int8_convert.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/io/threads.h"
#include "lithe/host/model/model.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/sdk/error.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

using json = nlohmann::ordered_json;

// The inputs of the certificate: seeded normal samples, reproducible in Python
// (torch.randn(shape, generator=torch.Generator().manual_seed(kCheckSeed + i))).
constexpr uint64_t kCheckSeed = 20261125;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (const int64_t d : shape) {
    text += (text.empty() ? "" : ",") + std::to_string(d);
  }
  return text;
}

at::Tensor output_tensor(torch::jit::Module& module, const at::Tensor& input, const char* which) {
  c10::IValue out;
  try {
    out = module.forward({input});
  } catch (const sdk::Error&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error, or the interpreter's JITException
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     "--input-shape " + shape_text(input.sizes().vec()) + ": the " + which +
                         " model does not run on it: " + host::graph_trace::interpreter_message(e) +
                         " (nothing was written)");
  }
  // A tuple's first item is the main output (GoogLeNet's logits before its auxiliary heads).
  if (out.isTuple() && !out.toTupleRef().elements().empty()) {
    out = out.toTupleRef().elements()[0];
  }
  LITHE_CHECK(out.isTensor(), sdk::Errc::kUnsupported, "the ", which,
              " model returns ", out.tagKind(),
              "; the conversion certificate compares models that return a tensor or a tuple "
              "starting with one");
  return out.toTensor().to(at::kFloat);
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

int run_convert(const std::vector<std::string>& args) {
  std::string model_path;
  std::string input_shape_text;
  std::string output_path;
  std::string json_path;
  std::string engine_name = "auto";
  int samples = 64;
  int runs = 20;
  int warmup = 3;
  int threads = 0;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(),
       "TorchScript model quantized by Lithe (lithe compress with a quantizer)")
      ("input-shape", po::value(&input_shape_text)->required(),
       "input shape of the certificate's samples and timings, batch first, e.g. 1,3,224,224")
      ("output", po::value(&output_path)->required(), "int8 TorchScript model to write")
      ("engine", po::value(&engine_name)->default_value("auto"),
       "quantized engine: auto (onednn when every weight is symmetric, else qnnpack), onednn, "
       "qnnpack")
      ("json", po::value(&json_path), "also write the conversion certificate as JSON")
      ("samples", po::value(&samples)->default_value(64),
       "seeded random inputs on which the int8 and the fake-quantized model are compared")
      ("latency-runs", po::value(&runs)->default_value(20), "timed forwards of each model")
      ("warmup", po::value(&warmup)->default_value(3), "untimed forwards before timing")
      ("threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)");
  if (!parse_verb_args("convert",
                       "--model Q.pt --input-shape 1,3,224,224 --output INT8.pt [--engine E] "
                       "[--json CERTIFICATE.json]",
                       args, desc)) {
    return 0;
  }
  host::check_output_paths({{"--model", model_path}},
                           {{"--output", output_path}, {"--json", json_path}});
  LITHE_CHECK(samples >= 1 && runs >= 1 && warmup >= 0, sdk::Errc::kInvalidConfig,
              "--samples and --latency-runs must be >= 1 and --warmup >= 0, got ", samples, ", ",
              runs, " and ", warmup);
  host::Int8ConvertOptions options;
  options.engine = host::parse_quantized_engine(engine_name, "--engine");
  const std::vector<int64_t> shape = parse_input_shape(input_shape_text);
  const int thread_count = host::configure_threads(threads);

  torch::jit::Module model = host::load_torchscript_module(model_path);
  model.eval();
  host::Int8ConvertReport report;
  torch::jit::Module int8 = host::convert_to_int8(model, options, &report);
  host::Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  torch::jit::Module fake_quantized = host::convert_to_int8(model, reference_options);
  int8.eval();
  fake_quantized.eval();
  const std::string int8_bytes = host::serialize_int8_model(int8, report.engine);

  // The certificate: int8 against fake-quantized on the same samples.
  at::NoGradGuard no_grad;
  double max_abs = 0;
  double reference_max = 0;
  int64_t agree = 0;
  int64_t rows = 0;
  std::vector<float> first_output;
  for (int i = 0; i < samples; ++i) {
    const at::Tensor x = at::randn(shape, at::detail::createCPUGenerator(kCheckSeed + i));
    const at::Tensor want = output_tensor(fake_quantized, x, "fake-quantized");
    const at::Tensor got = output_tensor(int8, x, "int8");
    LITHE_CHECK(want.sizes() == got.sizes(), sdk::Errc::kInternal,
                "the int8 model's output has shape ", got.sizes(), ", the fake-quantized one's ",
                want.sizes());
    max_abs = std::max(max_abs, (got - want).abs().max().item<double>());
    reference_max = std::max(reference_max, want.abs().max().item<double>());
    if (want.dim() == 2) {
      agree += got.argmax(1).eq(want.argmax(1)).sum().item<int64_t>();
      rows += want.size(0);
    }
    if (i == 0) {
      const at::Tensor flat = got.reshape({-1}).slice(0, 0, 1000).contiguous();
      first_output.assign(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
    }
  }
  const double step = report.output_scales.size() == 1 ? report.output_scales[0] : 0;

  torch::jit::Module float_model = model;
  const at::Tensor timing_input = at::randn(shape, at::detail::createCPUGenerator(kCheckSeed));
  const std::vector<double> latency =
      host::median_latencies({&float_model, &fake_quantized, &int8}, timing_input, warmup, runs);
  const uintmax_t float_bytes = std::filesystem::file_size(model_path);

  std::printf("int8 conversion of %s (engine %s, input %s, %d threads)\n\n", model_path.c_str(),
              host::quantized_engine_name(report.engine), input_shape_text.c_str(), thread_count);
  std::printf("%-28s %-8s %s\n", "layer", "type", "runs as");
  for (const host::Int8Layer& layer : report.int8_layers) {
    std::printf("%-28s %-8s %s%s\n", layer.name.c_str(), layer.op_type.c_str(),
                layer.kernel.c_str(), layer.per_channel ? " (per-channel weights)" : "");
  }
  for (const host::FloatLayer& layer : report.float_layers) {
    std::printf("%-28s %-8s float fake quantization: %s\n", layer.name.c_str(), "",
                layer.reason.c_str());
  }
  for (const std::string& op : report.int8_ops) {
    std::printf("int8 op: %s\n", op.c_str());
  }
  for (const std::string& type : report.not_quantized_yet) {
    std::printf("not quantized yet (no range observed): %s\n", type.c_str());
  }
  std::printf("\nquantize ops %lld, dequantize ops %lld\n",
              static_cast<long long>(report.quantize_ops),
              static_cast<long long>(report.dequantize_ops));
  for (const std::string& op : report.dequantized_before) {
    std::printf("  float op reading int8: %s\n", op.c_str());
  }
  std::printf("\ncertificate on %d seeded inputs of shape %s:\n", samples, input_shape_text.c_str());
  if (step > 0) {
    std::printf("  max |int8 - fake-quantized| = %.4g (%.3g output grid steps of %.4g)\n", max_abs,
                max_abs / step, step);
  } else {
    std::printf("  max |int8 - fake-quantized| = %.4g (largest |output| %.4g)\n", max_abs,
                reference_max);
  }
  if (rows > 0) {
    std::printf("  top-1 agreement %lld of %lld (%.2f%%)\n", static_cast<long long>(agree),
                static_cast<long long>(rows), 100.0 * static_cast<double>(agree) / static_cast<double>(rows));
  }
  std::printf("\n%-16s %14s %14s %14s\n", "", "float", "fake-quant", "int8");
  std::printf("%-16s %14ju %14s %14zu   (int8/float %.3f)\n", "file bytes", float_bytes, "-",
              int8_bytes.size(), ratio(static_cast<double>(int8_bytes.size()), static_cast<double>(float_bytes)));
  std::printf("%-16s %14.4f %14.4f %14.4f   (int8/float %.3f; median of %d, %d threads)\n",
              "latency ms", latency[0], latency[1], latency[2], ratio(latency[2], latency[0]), runs,
              at::get_num_threads());

  json certificate;
  certificate["model"] = model_path;
  certificate["output"] = output_path;
  certificate["engine"] = host::quantized_engine_name(report.engine);
  certificate["input_shape"] = shape;
  certificate["threads"] = at::get_num_threads();
  certificate["int8_layers"] = json::array();
  for (const host::Int8Layer& layer : report.int8_layers) {
    certificate["int8_layers"].push_back({{"layer", layer.name}, {"type", layer.op_type},
                                          {"kernel", layer.kernel},
                                          {"per_channel", layer.per_channel}});
  }
  certificate["float_layers"] = json::array();
  for (const host::FloatLayer& layer : report.float_layers) {
    certificate["float_layers"].push_back({{"layer", layer.name}, {"reason", layer.reason}});
  }
  certificate["int8_ops"] = report.int8_ops;
  certificate["not_quantized_yet"] = report.not_quantized_yet;
  certificate["quantize_ops"] = report.quantize_ops;
  certificate["dequantize_ops"] = report.dequantize_ops;
  certificate["float_ops_reading_int8"] = report.dequantized_before;
  json check = {{"samples", samples},
                {"seed", kCheckSeed},
                {"max_abs_diff", max_abs},
                {"reference_max_abs", reference_max}};
  if (step > 0) {
    check["output_grid_step"] = step;
    check["max_diff_in_steps"] = max_abs / step;
  }
  if (rows > 0) {
    check["top1_agreement"] = static_cast<double>(agree) / static_cast<double>(rows);
    check["top1_rows"] = rows;
  }
  // The int8 model's output on the first sample (first 1,000 values), for a check elsewhere.
  check["first_output"] = first_output;
  certificate["check"] = check;
  certificate["file_bytes"] = {{"float", float_bytes}, {"int8", int8_bytes.size()},
                               {"ratio", ratio(static_cast<double>(int8_bytes.size()),
                                               static_cast<double>(float_bytes))}};
  certificate["latency_ms"] = {{"float", latency[0]}, {"fake_quantized", latency[1]},
                               {"int8", latency[2]}, {"int8_ratio", ratio(latency[2], latency[0])},
                               {"runs", runs}};

  // Both outputs or neither.
  host::StagedFile staged_model(output_path, "--output");
  std::optional<host::StagedFile> staged_json;
  staged_model.write(int8_bytes);
  if (!json_path.empty()) {
    staged_json.emplace(json_path, "--json");
    staged_json->write(certificate.dump(1) + "\n");
  }
  staged_model.commit();
  if (staged_json) {
    staged_json->commit();
  }
  std::printf("\nwrote %s\n", output_path.c_str());
  return 0;
}

}  // namespace lithe::cli
