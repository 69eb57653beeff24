// `lithe convert`: a model quantized by Lithe as a native int8 TorchScript model, with its
// conversion certificate (agreement with the fake-quantized model and, given ONNX Runtime, with
// the QDQ ONNX file run there; accuracy on labelled data; file size, latency).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <sstream>
#include <string>
#include <vector>

#include "input_shape.h"
#include "onnx_output.h"
#include "output_agreement.h"
#include "lithe/host/export/int8_convert.h"
#include "lithe/host/export/onnx_export.h"
#include "lithe/host/export/onnx_runtime.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/io/threads.h"
#include "lithe/host/model/model.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
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

}  // namespace

int run_convert(const std::vector<std::string>& args) {
  std::string model_path;
  std::string input_shape_text;
  std::string output_path;
  std::string json_path;
  std::string engine_name = "auto";
  std::string data_path;
  std::string onnx_path;
  std::string onnxruntime;
  int64_t onnx_opset = 13;
  int samples = 64;
  int runs = 20;
  int warmup = 3;
  int threads = 0;
  bool allow_float_layers = false;
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
      ("samples", po::value(&samples)->default_value(64),
       "batches on which the int8 and the fake-quantized model are compared")
      ("data", po::value(&data_path),
       "compare on these images instead of seeded random ones (a directory in MNIST layout: "
       "its test split; or a tensor file), --samples batches of the --input-shape batch size, "
       "and report each model's accuracy on their labels")
      ("onnx", po::value(&onnx_path),
       "also write the quantized model as a QDQ ONNX file (what lithe compress --onnx writes) "
       "at --input-shape")
      ("onnx-opset", po::value(&onnx_opset)->default_value(13), "with --onnx: ONNX opset, 13..17")
      ("onnxruntime", po::value(&onnxruntime),
       "ONNX Runtime's shared library (libonnxruntime.so): run the QDQ ONNX model on the same "
       "inputs and compare it with the int8 model (default with --onnx: $LITHE_ONNXRUNTIME)")
      ("latency-runs", po::value(&runs)->default_value(20), "timed forwards of each model")
      ("warmup", po::value(&warmup)->default_value(3), "untimed forwards before timing")
      ("threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)")
      ("allow-float-layers", po::bool_switch(&allow_float_layers),
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
      onnxruntime_library(given, onnxruntime, !onnx_path.empty());
  host::check_output_paths({{"--model", model_path}, {"--data", data_path},
                            {ort_option, ort_library}},
                           {{"--output", output_path}, {"--json", json_path},
                            {"--onnx", onnx_path}});
  LITHE_CHECK(samples >= 1 && runs >= 1 && warmup >= 0, sdk::Errc::kInvalidConfig,
              "--samples and --latency-runs must be >= 1 and --warmup >= 0, got ", samples, ", ",
              runs, " and ", warmup);
  LITHE_CHECK(!onnx_path.empty() || !ort_library.empty() || given["onnx-opset"].defaulted(),
              sdk::Errc::kInvalidConfig,
              "--onnx-opset has no effect without --onnx or --onnxruntime");
  host::Int8ConvertOptions options;
  options.engine = host::parse_quantized_engine(engine_name, "--engine");
  options.allow_float_layers = allow_float_layers;
  const std::vector<int64_t> shape = parse_input_shape(input_shape_text);
  host::OnnxExportOptions onnx_options;
  onnx_options.input_shape = shape;
  onnx_options.opset = onnx_opset;
  host::check_onnx_export_options(onnx_options, "--onnx-opset");
  const int thread_count = host::configure_threads(threads);
  if (!ort_library.empty()) {
    host::OnnxRuntimeSession::load_library(ort_library, ort_option);  // a bad one before any work
  }
  // Every output staged before any work (an unwritable directory fails here); committed
  // together at the end: every output or none.
  host::StagedFile staged_model(output_path, "--output");
  std::optional<host::StagedFile> staged_json;
  std::optional<host::StagedFile> staged_onnx;
  if (!json_path.empty()) {
    staged_json.emplace(json_path, "--json");
  }
  if (!onnx_path.empty()) {
    staged_onnx.emplace(onnx_path, "--onnx");
  }

  // The certificate's inputs: batches of the data, or seeded normal samples, reproducible in
  // Python (torch.randn(shape, generator=torch.Generator().manual_seed(kCheckSeed + i))).
  host::Dataset data;
  if (!data_path.empty()) {
    try {
      data = host::load_dataset(data_path, "test");
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), "--data " + data_path + ": " + e.what());
    }
    const std::vector<int64_t> sample_shape(shape.begin() + 1, shape.end());
    LITHE_CHECK(data.images.sizes().slice(1).vec() == sample_shape, sdk::Errc::kInvalidConfig,
                "--data ", data.source, ": its images have shape ", data.images.sizes().slice(1),
                ", --input-shape asks for ", at::IntArrayRef(sample_shape));
    LITHE_CHECK(data.size() >= shape[0], sdk::Errc::kInvalidConfig, "--data ", data.source,
                ": ", data.size(), " images, fewer than one batch of ", shape[0]);
    samples = static_cast<int>(std::min<int64_t>(samples, data.size() / shape[0]));
  }
  const auto batch_of = [&](const at::Tensor& t, int i) {
    return t.slice(0, i * shape[0], (i + 1) * shape[0]);
  };
  const auto sample = [&](int i) {
    if (data.size() > 0) {
      return batch_of(data.images, i).contiguous();
    }
    return at::randn(shape, at::detail::createCPUGenerator(kCheckSeed + i));
  };

  torch::jit::Module model = host::load_torchscript_module(model_path);
  model.eval();
  if (data.size() > 0) {
    // The model takes the images and its outputs have room for every label (as lithe eval).
    host::check_dataset_fits_model(*host::make_torchscript_model(model), data);
    model.eval();
  }
  host::Int8ConvertReport report;
  torch::jit::Module int8 = host::convert_to_int8(model, options, &report);
  host::Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  reference_options.inputs_from_ranges = report.inputs_from_ranges;
  torch::jit::Module fake_quantized = host::convert_to_int8(model, reference_options);
  int8.eval();
  fake_quantized.eval();
  const std::string int8_bytes = host::serialize_int8_model(int8, report.engine);
  host::OnnxExportSummary onnx_summary;
  std::string onnx_bytes;
  if (!onnx_path.empty() || !ort_library.empty()) {
    try {
      onnx_bytes = host::export_onnx(model, onnx_options, &onnx_summary);
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), std::string(onnx_path.empty() ? ort_option : "--onnx") +
                                     ": the ONNX model cannot be written: " + e.what());
    }
  }
  std::unique_ptr<host::OnnxRuntimeSession> ort;
  if (!ort_library.empty()) {
    ort = std::make_unique<host::OnnxRuntimeSession>(ort_library, ort_option, onnx_bytes,
                                                     thread_count);
  }

  // The certificate: int8 against fake-quantized (and ONNX Runtime) on the same inputs.
  at::NoGradGuard no_grad;
  OutputAgreement against_fake_quantized;
  OutputAgreement against_ort;
  std::vector<float> first_output;
  // Correct top-1 predictions of the float, fake-quantized, int8 and ORT models (with --data).
  std::vector<int64_t> correct(4, 0);
  int64_t labelled = 0;
  for (int i = 0; i < samples; ++i) {
    const at::Tensor x = sample(i);
    const at::Tensor want = output_tensor(fake_quantized, x, "fake-quantized");
    const at::Tensor got = output_tensor(int8, x, "int8");
    against_fake_quantized.add(got, want, "int8 model's", "fake-quantized model");
    at::Tensor from_ort;
    if (ort) {
      from_ort = ort->run(x);
      against_ort.add(got, from_ort, "int8 model's", "ONNX Runtime model");
    }
    if (data.size() > 0 && got.dim() == 2) {
      const at::Tensor labels = batch_of(data.labels, i);
      LITHE_CHECK(got.size(0) == labels.size(0), sdk::Errc::kUnsupported,
                  "--data: the model returns ", got.size(0), " rows for a batch of ",
                  labels.size(0), " images; accuracy needs one row per image");
      const at::Tensor float_out = output_tensor(model, x, "float");
      const std::vector<at::Tensor> outputs = {float_out, want, got, from_ort};
      for (size_t m = 0; m < outputs.size(); ++m) {
        if (outputs[m].defined()) {
          correct[m] += outputs[m].argmax(1).eq(labels).sum().item<int64_t>();
        }
      }
      labelled += labels.size(0);
    }
    if (i == 0) {
      const at::Tensor flat = got.reshape({-1}).slice(0, 0, 1000).contiguous();
      first_output.assign(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
    }
  }
  const double step = report.output_scales.size() == 1 ? report.output_scales[0] : 0;
  const std::string ort_version = ort ? ort->version() : "";
  // Each model's accuracy on the labelled images: printed and written alike.
  json accuracy;
  if (labelled > 0) {
    static const char* const kModels[] = {"float", "fake_quantized", "int8", "onnxruntime"};
    accuracy["images"] = labelled;
    for (size_t m = 0; m < (ort ? 4u : 3u); ++m) {
      accuracy[kModels[m]] = ratio(static_cast<double>(correct[m]), static_cast<double>(labelled));
    }
  }
  ort.reset();  // its threads must not compete with the timings below

  torch::jit::Module float_model = model;
  const at::Tensor timing_input = sample(0);
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
  const std::string inputs_text =
      data.size() > 0 ? "the first " + std::to_string(samples * shape[0]) + " images of " +
                            data.source + " in batches of " + std::to_string(shape[0])
                      : std::to_string(samples) + " seeded inputs of shape " + input_shape_text;
  std::printf("\ncertificate on %s:\n", inputs_text.c_str());
  against_fake_quantized.print("fake-quantized", step);
  if (!ort_version.empty()) {
    std::printf("ONNX Runtime %s on the QDQ ONNX model (%s):\n", ort_version.c_str(),
                ort_library.c_str());
    against_ort.print("ORT", step);
    std::printf("  outputs that differ: %.2f%%\n", 100.0 * against_ort.differing_share());
  } else {
    std::printf("ONNX Runtime: not run (give --onnxruntime libonnxruntime.so)\n");
  }
  if (labelled > 0) {
    std::printf("accuracy on %lld labelled images:", static_cast<long long>(labelled));
    for (const auto& [name, value] : accuracy.items()) {
      if (name != "images") {
        std::printf(" %s %.4f", name.c_str(), value.get<double>());
      }
    }
    std::printf("\n");
  } else if (data.size() > 0) {
    std::printf("accuracy not reported: the output is not [batch, classes]\n");
  }
  std::printf("\n%-16s %14s %14s %14s\n", "", "float", "fake-quant", "int8");
  const double size_ratio =
      ratio(static_cast<double>(int8_bytes.size()), static_cast<double>(float_bytes));
  std::printf("%-16s %14ju %14s %14zu   (int8/float %.3f)\n", "file bytes", float_bytes, "-",
              int8_bytes.size(), size_ratio);
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
  certificate["inputs_from_ranges"] = report.inputs_from_ranges;
  certificate["asymmetric_weights"] = report.asymmetric_weights;
  certificate["quantize_ops"] = report.quantize_ops;
  certificate["dequantize_ops"] = report.dequantize_ops;
  certificate["float_ops_reading_int8"] = report.dequantized_before;
  json check = against_fake_quantized.to_json(step);
  check["samples"] = samples;  // batches
  check["batch"] = shape[0];
  if (data.size() > 0) {
    check["data"] = data.source;
  } else {
    check["seed"] = kCheckSeed;
  }
  // The int8 model's output on the first sample (first 1,000 values), for a check elsewhere.
  check["first_output"] = first_output;
  certificate["check"] = check;
  if (!ort_version.empty()) {
    json ort_check = against_ort.to_json(step);
    ort_check["run"] = true;
    ort_check["library"] = ort_library;
    ort_check["version"] = ort_version;
    certificate["onnxruntime"] = ort_check;
  } else {
    certificate["onnxruntime"] = {{"run", false}};
  }
  if (labelled > 0) {
    certificate["accuracy"] = accuracy;
  }
  if (!onnx_path.empty()) {
    certificate["onnx"] = onnx_summary_json(onnx_path, onnx_opset, onnx_summary);
  }
  certificate["file_bytes"] = {
      {"float", float_bytes}, {"int8", int8_bytes.size()}, {"ratio", size_ratio}};
  certificate["latency_ms"] = {{"float", latency[0]}, {"fake_quantized", latency[1]},
                               {"int8", latency[2]}, {"int8_ratio", ratio(latency[2], latency[0])},
                               {"runs", runs}};

  staged_model.write(int8_bytes);
  if (staged_json) {
    staged_json->write(certificate.dump(1) + "\n");
  }
  if (staged_onnx) {
    staged_onnx->write(onnx_bytes);
  }
  staged_model.commit();
  for (std::optional<host::StagedFile>* staged : {&staged_json, &staged_onnx}) {
    if (*staged) {
      (*staged)->commit();
    }
  }
  std::printf("\nwrote %s\n", output_path.c_str());
  if (!onnx_path.empty()) {
    print_onnx_summary(onnx_path, onnx_opset, input_shape_text, onnx_summary);
  }
  return 0;
}

}  // namespace lithe::cli
