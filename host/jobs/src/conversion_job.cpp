#include "lithe/host/jobs/conversion_job.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <string_view>

#include "lithe/host/export/onnx_runtime.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/model/model.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "job_support.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;

using job_support::F;
using job_support::ratio;
using job_support::shape_text;

at::Tensor output_tensor(torch::jit::Module& module, const at::Tensor& input, const char* which) {
  c10::IValue out;
  try {
    out = module.forward({input});
  } catch (const sdk::Error&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error, or the interpreter's JITException
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     F("input_shape") + " " + shape_text(input.sizes().vec()) + ": the " + which +
                         " model does not run on it: " + graph_trace::interpreter_message(e) +
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

json agreement_json(const OutputAgreement& a, double step) {
  json out = {{"max_abs_diff", a.max_abs},
              {"reference_max_abs", a.reference_max},
              {"differing_outputs", a.differing_share()}};
  if (step > 0) {
    out["output_grid_step"] = step;
    out["max_diff_in_steps"] = a.max_abs / step;
  }
  if (a.rows > 0) {
    out["top1_agreement"] = a.top1();
    out["top1_rows"] = a.rows;
  }
  return out;
}

void check_request(const ConversionRequest& r) {
  LITHE_CHECK(!r.model.empty(), sdk::Errc::kInvalidConfig, F("model"), ": no model given");
  LITHE_CHECK(r.int8.wanted(), sdk::Errc::kInvalidConfig, F("int8"),
              ": no int8 model path given");
  LITHE_CHECK(!r.input_shape.empty() &&
                  std::all_of(r.input_shape.begin(), r.input_shape.end(),
                              [](int64_t d) { return d > 0; }),
              sdk::Errc::kInvalidConfig, F("input_shape"),
              " must hold the batch size and the sample's dimensions, each > 0, got [",
              shape_text(r.input_shape), "]");
  LITHE_CHECK(r.samples >= 1 && r.latency_runs >= 1 && r.warmup >= 0, sdk::Errc::kInvalidConfig,
              F("samples"), " and ", F("latency_runs"), " must be >= 1 and ", F("warmup"),
              " >= 0, got ", r.samples, ", ", r.latency_runs, " and ", r.warmup);
  LITHE_CHECK(!r.options.fake_quantized, sdk::Errc::kInvalidConfig, F("options.fake_quantized"),
              ": the conversion writes the int8 model; the fake-quantized one is its reference");
  check_output_paths({{F("model"), r.model.path()},
                      {F("data_path"), r.data_path},
                      {F("onnxruntime_library"), r.onnxruntime_library}},
                     {{F("int8"), r.int8.file},
                      {F("certificate"), r.certificate.file},
                      {F("onnx"), r.onnx.file}});
  OnnxExportOptions onnx;
  onnx.input_shape = r.input_shape;
  onnx.opset = r.onnx_opset;
  check_onnx_export_options(onnx, F("onnx_opset"));
}

// The certificate's labelled inputs, checked against the shape asked for.
Dataset load_certificate_data(const ConversionRequest& r) {
  Dataset data;
  try {
    data = load_dataset(r.data_path, "test");
  } catch (const sdk::Error& e) {
    throw sdk::Error(e.code(), F("data_path") + " " + r.data_path.string() + ": " + e.what());
  }
  const std::vector<int64_t> sample_shape(r.input_shape.begin() + 1, r.input_shape.end());
  LITHE_CHECK(data.images.sizes().slice(1).vec() == sample_shape, sdk::Errc::kInvalidConfig,
              F("data_path"), " ", data.source, ": its images have shape ",
              data.images.sizes().slice(1), ", ", F("input_shape"), " asks for ",
              at::IntArrayRef(sample_shape));
  LITHE_CHECK(data.size() >= r.input_shape[0], sdk::Errc::kInvalidConfig, F("data_path"), " ",
              data.source, ": ", data.size(), " images, fewer than one batch of ",
              r.input_shape[0]);
  return data;
}

std::string certificate_json(const ConversionRequest& r, const ConversionResult& c) {
  const Int8ConvertReport& report = c.report;
  json certificate;
  certificate["model"] = r.model.label();
  certificate["output"] = r.int8.file.string();
  certificate["engine"] = quantized_engine_name(report.engine);
  certificate["input_shape"] = r.input_shape;
  certificate["threads"] = c.threads;
  certificate["int8_layers"] = json::array();
  for (const Int8Layer& layer : report.int8_layers) {
    certificate["int8_layers"].push_back({{"layer", layer.name}, {"type", layer.op_type},
                                          {"kernel", layer.kernel},
                                          {"per_channel", layer.per_channel}});
  }
  certificate["float_layers"] = json::array();
  for (const FloatLayer& layer : report.float_layers) {
    certificate["float_layers"].push_back({{"layer", layer.name}, {"reason", layer.reason}});
  }
  certificate["int8_ops"] = report.int8_ops;
  certificate["not_quantized_yet"] = report.not_quantized_yet;
  certificate["inputs_from_ranges"] = report.inputs_from_ranges;
  certificate["asymmetric_weights"] = report.asymmetric_weights;
  certificate["quantize_ops"] = report.quantize_ops;
  certificate["dequantize_ops"] = report.dequantize_ops;
  certificate["float_ops_reading_int8"] = report.dequantized_before;
  json check = agreement_json(c.against_fake_quantized, c.output_step);
  check["samples"] = c.samples;  // batches
  check["batch"] = r.input_shape[0];
  if (!c.data_source.empty()) {
    check["data"] = c.data_source;
  } else {
    check["seed"] = kConversionCheckSeed;
  }
  // The int8 model's output on the first sample (first 1,000 values), for a check elsewhere.
  check["first_output"] = c.first_output;
  certificate["check"] = check;
  if (c.against_ort) {
    json ort = agreement_json(*c.against_ort, c.output_step);
    ort["run"] = true;
    ort["library"] = r.onnxruntime_library.string();
    ort["version"] = c.ort_version;
    certificate["onnxruntime"] = ort;
  } else {
    certificate["onnxruntime"] = {{"run", false}};
  }
  if (c.labelled > 0) {
    json accuracy;
    accuracy["images"] = c.labelled;
    for (const auto& [model, value] : c.accuracy) {
      accuracy[model] = value;
    }
    certificate["accuracy"] = accuracy;
  }
  if (c.onnx) {
    certificate["onnx"] = {{"path", r.onnx.file.string()},
                           {"opset", r.onnx_opset},
                           {"nodes", c.onnx->nodes},
                           {"quantized_weights", c.onnx->quantized_weights},
                           {"quantized_activations", c.onnx->quantized_activations},
                           {"not_quantized_yet", c.onnx->not_quantized_yet}};
  }
  const double size_ratio =
      ratio(static_cast<double>(c.int8_bytes), static_cast<double>(c.float_bytes));
  certificate["file_bytes"] = {
      {"float", c.float_bytes}, {"int8", c.int8_bytes}, {"ratio", size_ratio}};
  certificate["latency_ms"] = {{"float", c.float_latency_ms},
                               {"fake_quantized", c.fake_quantized_latency_ms},
                               {"int8", c.int8_latency_ms},
                               {"int8_ratio", ratio(c.int8_latency_ms, c.float_latency_ms)},
                               {"runs", r.latency_runs}};
  return certificate.dump(1) + "\n";
}

ConversionResult convert(const ConversionRequest& r) {
  check_request(r);
  if (!r.onnxruntime_library.empty()) {  // a bad library before any work
    OnnxRuntimeSession::load_library(r.onnxruntime_library, F("onnxruntime_library"));
  }
  // Every output staged before any work (an unwritable directory fails here); committed
  // together at the end: every output or none.
  StagedOutput int8_out(r.int8, F("int8"));
  StagedOutput certificate_out(r.certificate, F("certificate"));
  StagedOutput onnx_out(r.onnx, F("onnx"));
  const std::vector<int64_t>& shape = r.input_shape;

  ConversionResult c;
  c.samples = r.samples;
  Dataset data;
  if (!r.data_path.empty()) {
    data = load_certificate_data(r);
    c.data_source = data.source;
    c.samples = static_cast<int>(std::min<int64_t>(r.samples, data.size() / shape[0]));
  }
  const auto batch_of = [&](const at::Tensor& t, int i) {
    return t.slice(0, i * shape[0], (i + 1) * shape[0]);
  };
  const auto sample = [&](int i) {
    if (data.size() > 0) {
      return batch_of(data.images, i).contiguous();
    }
    return at::randn(shape, at::detail::createCPUGenerator(kConversionCheckSeed + i));
  };

  torch::jit::Module model = r.model.load(F("model"));
  model.eval();
  if (data.size() > 0) {
    // The model takes the images and its outputs have room for every label (as lithe eval).
    check_dataset_fits_model(*make_torchscript_model(model), data);
    model.eval();
  }
  torch::jit::Module int8 = convert_to_int8(model, r.options, &c.report);
  Int8ConvertOptions reference_options;
  reference_options.fake_quantized = true;
  reference_options.inputs_from_ranges = c.report.inputs_from_ranges;
  torch::jit::Module fake_quantized = convert_to_int8(model, reference_options);
  int8.eval();
  fake_quantized.eval();
  const std::string int8_bytes = serialize_int8_model(int8, c.report.engine);
  std::string onnx_bytes;
  if (r.onnx.wanted() || !r.onnxruntime_library.empty()) {
    OnnxExportOptions onnx_options;
    onnx_options.input_shape = shape;
    onnx_options.opset = r.onnx_opset;
    OnnxExportSummary summary;
    try {
      onnx_bytes = export_onnx(model, onnx_options, &summary);
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), (r.onnx.wanted() ? F("onnx") : F("onnxruntime_library")) +
                                     ": the ONNX model cannot be written: " + e.what());
    }
    if (r.onnx.wanted()) {
      c.onnx = summary;
    }
  }
  std::unique_ptr<OnnxRuntimeSession> ort;
  if (!r.onnxruntime_library.empty()) {
    ort = std::make_unique<OnnxRuntimeSession>(r.onnxruntime_library, F("onnxruntime_library"),
                                               onnx_bytes, at::get_num_threads());
    c.against_ort.emplace();
    c.ort_version = ort->version();
  }

  // The certificate: int8 against fake-quantized (and ONNX Runtime) on the same inputs.
  at::NoGradGuard no_grad;
  // Correct top-1 predictions of the float, fake-quantized, int8 and ORT models (with data).
  std::vector<int64_t> correct(4, 0);
  for (int i = 0; i < c.samples; ++i) {
    const at::Tensor x = sample(i);
    const at::Tensor want = output_tensor(fake_quantized, x, "fake-quantized");
    const at::Tensor got = output_tensor(int8, x, "int8");
    c.against_fake_quantized.add(got, want, "int8 model's", "fake-quantized model");
    at::Tensor from_ort;
    if (ort) {
      from_ort = ort->run(x);
      c.against_ort->add(got, from_ort, "int8 model's", "ONNX Runtime model");
    }
    if (data.size() > 0 && got.dim() == 2) {
      const at::Tensor labels = batch_of(data.labels, i);
      LITHE_CHECK(got.size(0) == labels.size(0), sdk::Errc::kUnsupported, F("data_path"),
                  ": the model returns ", got.size(0), " rows for a batch of ", labels.size(0),
                  " images; accuracy needs one row per image");
      const at::Tensor float_out = output_tensor(model, x, "float");
      const std::vector<at::Tensor> outputs = {float_out, want, got, from_ort};
      for (size_t m = 0; m < outputs.size(); ++m) {
        if (outputs[m].defined()) {
          correct[m] += outputs[m].argmax(1).eq(labels).sum().item<int64_t>();
        }
      }
      c.labelled += labels.size(0);
    }
    if (i == 0) {
      const at::Tensor flat = got.reshape({-1}).slice(0, 0, 1000).contiguous();
      c.first_output.assign(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
    }
  }
  c.output_step = c.report.output_scales.size() == 1 ? c.report.output_scales[0] : 0;
  if (c.labelled > 0) {
    static const char* const kModels[] = {"float", "fake_quantized", "int8", "onnxruntime"};
    for (size_t m = 0; m < (ort ? 4u : 3u); ++m) {
      c.accuracy.emplace_back(kModels[m], ratio(static_cast<double>(correct[m]),
                                                static_cast<double>(c.labelled)));
    }
  }
  ort.reset();  // its threads must not compete with the timings below

  torch::jit::Module float_model = model;
  const std::vector<double> latency = median_latencies({&float_model, &fake_quantized, &int8},
                                                       sample(0), r.warmup, r.latency_runs);
  c.float_latency_ms = latency[0];
  c.fake_quantized_latency_ms = latency[1];
  c.int8_latency_ms = latency[2];
  c.threads = at::get_num_threads();
  c.float_bytes = r.model.size_bytes();
  c.int8_bytes = int8_bytes.size();
  c.certificate_json = certificate_json(r, c);

  int8_out.write(int8_bytes);
  certificate_out.write(c.certificate_json);
  onnx_out.write(std::move(onnx_bytes));
  int8_out.commit();
  certificate_out.commit();
  onnx_out.commit();
  return c;
}

}  // namespace

ConversionResult run_conversion(const ConversionRequest& request) {
  return rethrow_with_fields([&] { return convert(request); });
}

}  // namespace lithe::host
