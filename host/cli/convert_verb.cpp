// `lithe convert`: a model quantized by Lithe as a native int8 TorchScript model, with its
// conversion certificate (host::run_conversion, the job embedders call): agreement with the
// fake-quantized model and, given ONNX Runtime, with the QDQ ONNX file run there; accuracy on
// labelled data; file size, latency.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "field_flags.h"
#include "input_shape.h"
#include "onnx_output.h"
#include "lithe/host/io/threads.h"
#include "lithe/host/jobs/conversion_job.h"
#include "lithe/sdk/error.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

// The ONNX Runtime library and where it was named: --onnxruntime, else LITHE_ONNXRUNTIME when
// an ONNX file is written; {"", ""} for none.
std::pair<std::string, std::string> onnxruntime_library(const po::variables_map& given,
                                                        const std::string& option_value,
                                                        bool onnx_written) {
  if (given.count("onnxruntime") != 0) {
    LITHE_CHECK(!option_value.empty(), sdk::Errc::kInvalidConfig,
                "--onnxruntime must name ONNX Runtime's shared library, got an empty path");
    return {option_value, "--onnxruntime"};
  }
  const char* env = std::getenv("LITHE_ONNXRUNTIME");
  if (!onnx_written || env == nullptr || *env == '\0') {
    return {};
  }
  return {env, "LITHE_ONNXRUNTIME"};
}

// "max |int8 - <reference>| = ... (... output grid steps of ...)", then top-1 agreement.
void print_agreement(const host::OutputAgreement& a, const char* reference, double step) {
  if (step > 0) {
    std::printf("  max |int8 - %s| = %.4g (%.3g output grid steps of %.4g)\n", reference,
                a.max_abs, a.max_abs / step, step);
  } else {
    std::printf("  max |int8 - %s| = %.4g (largest |output| %.4g)\n", reference, a.max_abs,
                a.reference_max);
  }
  if (a.rows > 0) {
    std::printf("  top-1 agreement %lld of %lld (%.2f%%)\n", static_cast<long long>(a.agree),
                static_cast<long long>(a.rows), 100.0 * a.top1());
  }
}

void print_layers(const host::Int8ConvertReport& report) {
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
  if (report.asymmetric_weights && report.engine != host::QuantizedEngine::kQnnpack) {
    std::printf("note: weights with a zero point other than 0 take slower kernels on x86 "
                "(FBGEMM, about 1.5x oneDNN's); quantize weights per_channel_symmetric "
                "(config quant_scheme) for the fast ones\n");
  }
  for (const std::string& layer : report.inputs_from_ranges) {
    std::printf("input quantized on its observed range (calibration): %s\n", layer.c_str());
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
}

void print_certificate(const host::ConversionRequest& r, const host::ConversionResult& c,
                       const std::string& input_shape_text) {
  const std::string inputs_text =
      !c.data_source.empty()
          ? "the first " + std::to_string(c.samples * r.input_shape[0]) + " images of " +
                c.data_source + " in batches of " + std::to_string(r.input_shape[0])
          : std::to_string(c.samples) + " seeded inputs of shape " + input_shape_text;
  std::printf("\ncertificate on %s:\n", inputs_text.c_str());
  print_agreement(c.against_fake_quantized, "fake-quantized", c.output_step);
  if (c.against_ort) {
    std::printf("ONNX Runtime %s on the QDQ ONNX model (%s):\n", c.ort_version.c_str(),
                r.onnxruntime_library.c_str());
    print_agreement(*c.against_ort, "ORT", c.output_step);
    std::printf("  outputs that differ: %.2f%%\n", 100.0 * c.against_ort->differing_share());
  } else {
    std::printf("ONNX Runtime: not run (give --onnxruntime libonnxruntime.so)\n");
  }
  if (c.labelled > 0) {
    std::printf("accuracy on %lld labelled images:", static_cast<long long>(c.labelled));
    for (const auto& [name, value] : c.accuracy) {
      std::printf(" %s %.4f", name.c_str(), value);
    }
    std::printf("\n");
  } else if (!c.data_source.empty()) {
    std::printf("accuracy not reported: the output is not [batch, classes]\n");
  }
  std::printf("\n%-16s %14s %14s %14s\n", "", "float", "fake-quant", "int8");
  std::printf("%-16s %14ju %14s %14ju   (int8/float %.3f)\n", "file bytes", c.float_bytes, "-",
              c.int8_bytes,
              ratio(static_cast<double>(c.int8_bytes), static_cast<double>(c.float_bytes)));
  std::printf("%-16s %14.4f %14.4f %14.4f   (int8/float %.3f; median of %d, %d threads)\n",
              "latency ms", c.float_latency_ms, c.fake_quantized_latency_ms, c.int8_latency_ms,
              ratio(c.int8_latency_ms, c.float_latency_ms), r.latency_runs, c.threads);
}

}  // namespace

int run_convert(const std::vector<std::string>& args) {
  std::string model_path;
  std::string input_shape_text;
  std::string output_path;
  std::string json_path;
  std::string engine_name = "auto";
  std::string onnxruntime;
  int threads = 0;
  host::ConversionRequest r;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(),
       "TorchScript model quantized by Lithe (lithe compress with a quantizer)")
      ("input-shape", po::value(&input_shape_text)->required(),
       "input shape of the certificate's samples and timings, batch first, e.g. 1,3,224,224")
      ("output", po::value(&output_path)->required(), "int8 TorchScript model to write")
      ("engine", po::value(&engine_name)->default_value("auto"),
       "quantized engine: auto (= x86, libtorch 2.x's default: fbgemm and oneDNN), x86, "
       "fbgemm, onednn or qnnpack")
      ("json", po::value(&json_path), "also write the conversion certificate as JSON")
      ("samples", po::value(&r.samples)->default_value(64),
       "batches on which the int8 and the fake-quantized model are compared")
      ("data", po::value(&r.data_path),
       "compare on these images instead of seeded random ones (a directory in MNIST layout: "
       "its test split; or a tensor file), --samples batches of the --input-shape batch size, "
       "and report each model's accuracy on their labels")
      ("onnx", po::value(&r.onnx.file),
       "also write the quantized model as a QDQ ONNX file (what lithe compress --onnx writes) "
       "at --input-shape")
      ("onnx-opset", po::value(&r.onnx_opset)->default_value(13),
       "with --onnx: ONNX opset, 13..17")
      ("onnxruntime", po::value(&onnxruntime),
       "ONNX Runtime's shared library (libonnxruntime.so): run the QDQ ONNX model on the same "
       "inputs and compare it with the int8 model (default with --onnx: $LITHE_ONNXRUNTIME)")
      ("latency-runs", po::value(&r.latency_runs)->default_value(20),
       "timed forwards of each model")
      ("warmup", po::value(&r.warmup)->default_value(3), "untimed forwards before timing")
      ("threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)")
      ("allow-float-layers", po::bool_switch(&r.options.allow_float_layers),
       "write the model even when quantized layers must run their fake quantization in float "
       "(default: refuse, naming them and the fix)");
  po::variables_map given;
  if (!parse_verb_args("convert",
                       "--model Q.pt --input-shape 1,3,224,224 --output INT8.pt [--engine E] "
                       "[--json CERTIFICATE.json] [--data DIR|FILE] [--onnx Q.onnx] "
                       "[--onnxruntime libonnxruntime.so] [--allow-float-layers]",
                       args, desc, nullptr, &given)) {
    return 0;
  }
  const auto [ort_library, ort_option] =
      onnxruntime_library(given, onnxruntime, r.onnx.wanted());
  LITHE_CHECK(r.onnx.wanted() || !ort_library.empty() || given["onnx-opset"].defaulted(),
              sdk::Errc::kInvalidConfig,
              "--onnx-opset has no effect without --onnx or --onnxruntime");
  r.model = host::ModelSource::file(model_path);
  r.int8 = host::Output::to_file(output_path);
  r.certificate = host::Output::to_file(json_path);
  r.onnxruntime_library = ort_library;
  r.options.engine = host::parse_quantized_engine(engine_name, "--engine");
  r.input_shape = parse_input_shape(input_shape_text);
  const int thread_count = host::configure_threads(threads);
  const FlagWords flags = {{"model", "--model"},         {"int8", "--output"},
                           {"certificate", "--json"},     {"onnx", "--onnx"},
                           {"onnx_opset", "--onnx-opset"}, {"data_path", "--data"},
                           {"input_shape", "--input-shape"}, {"samples", "--samples"},
                           {"latency_runs", "--latency-runs"}, {"warmup", "--warmup"},
                           {"onnxruntime_library", ort_option}};
  const host::ConversionResult c = in_flags(flags, [&] { return host::run_conversion(r); });
  std::printf("int8 conversion of %s (engine %s, input %s, %d threads)\n\n", model_path.c_str(),
              host::quantized_engine_name(c.report.engine), input_shape_text.c_str(),
              thread_count);
  print_layers(c.report);
  print_certificate(r, c, input_shape_text);
  std::printf("\nwrote %s\n", output_path.c_str());
  if (c.onnx) {
    print_onnx_summary(r.onnx.file.string(), r.onnx_opset, input_shape_text, *c.onnx);
  }
  return 0;
}

}  // namespace lithe::cli
