#pragma once
/// \file
/// The certified int8 conversion: what `lithe convert` runs and what an embedder calls on a
/// model in memory. run_conversion() converts a model quantized by Lithe into a native int8
/// TorchScript model and certifies it: the int8 model's outputs against the fake-quantized
/// model's (and, given ONNX Runtime, against the QDQ ONNX model run there) on the same inputs,
/// each model's accuracy on labelled data, the file sizes and the latencies.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/export/int8_convert.h"
#include "lithe/host/export/onnx_export.h"
#include "lithe/host/io/field_error.h"
#include "lithe/host/jobs/job_output.h"
#include "lithe/host/jobs/model_source.h"
#include "lithe/host/jobs/output_agreement.h"

namespace lithe::host {

/// The certificate's seeded inputs: sample i is
/// torch.randn(input_shape, generator=torch.Generator().manual_seed(kConversionCheckSeed + i)),
/// reproducible in Python.
inline constexpr uint64_t kConversionCheckSeed = 20261125;

/// What to convert and where the results go. Errors name the fields (FieldError).
struct ConversionRequest {
  ModelSource model;                 ///< a model quantized by Lithe (file or memory)
  std::vector<int64_t> input_shape;  ///< of the certificate's samples and timings, batch first
  Output int8;                       ///< the int8 TorchScript model (required)
  Output certificate;                ///< the certificate as JSON
  Output onnx;                       ///< the QDQ ONNX model at input_shape
  int64_t onnx_opset = 13;           ///< with onnx or onnxruntime_library
  Int8ConvertOptions options;        ///< engine, allow_float_layers (fake_quantized: false)
  /// Compare on these images (an MNIST-layout directory: its test split; or a tensor file)
  /// instead of seeded ones, and report each model's accuracy on their labels; "" = seeded.
  std::filesystem::path data_path;
  int samples = 64;       ///< batches compared (fewer when the data has fewer)
  int latency_runs = 20;  ///< timed forwards of each model
  int warmup = 3;         ///< untimed forwards before timing
  /// ONNX Runtime's shared library: run the QDQ ONNX model on the same inputs; "" = not run.
  std::filesystem::path onnxruntime_library;
};

/// What the conversion found; everything the certificate holds.
struct ConversionResult {
  Int8ConvertReport report;        ///< how each layer runs
  int samples = 0;                 ///< batches compared
  std::string data_source;         ///< the labelled data compared on; "" = seeded inputs
  OutputAgreement against_fake_quantized;
  std::optional<OutputAgreement> against_ort;  ///< when ONNX Runtime ran
  std::string ort_version;                     ///< when ONNX Runtime ran
  /// The output grid step of a model with one output grid; 0 otherwise.
  double output_step = 0;
  /// Images whose labels were compared (with data_path and [batch, classes] outputs) and the
  /// share each model got right: "float", "fake_quantized", "int8" (and "onnxruntime").
  int64_t labelled = 0;
  std::vector<std::pair<std::string, double>> accuracy;
  std::vector<float> first_output;  ///< the int8 output on the first sample (first 1,000 values)
  uintmax_t float_bytes = 0;        ///< the quantized model's TorchScript size
  uintmax_t int8_bytes = 0;         ///< the int8 model's
  double float_latency_ms = 0;      ///< medians of latency_runs forwards
  double fake_quantized_latency_ms = 0;
  double int8_latency_ms = 0;
  int threads = 0;                         ///< intra-op threads while timing
  std::optional<OnnxExportSummary> onnx;   ///< when an ONNX model was exported
  std::string certificate_json;            ///< the certificate, as written to `certificate`
};

/// Runs the conversion. Checks the request first (shape, counts, output paths, the ONNX Runtime
/// library), stages the outputs, converts, certifies, and writes every output or none. Throws
/// FieldError naming the request field, or sdk::Error naming the layer or file.
ConversionResult run_conversion(const ConversionRequest& request);

}  // namespace lithe::host
