#include "quantize_compress.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "lithe/host/model/model.h"
#include "lithe/host/session/quantization_session.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"

namespace lithe::cli {
namespace {

using Clock = std::chrono::steady_clock;


// "scale=0.0123 zero_point=64 ..." for a state list, numbers of one element only.
std::string state_text(const host::QuantTypeReport& t) {
  std::string out;
  for (const auto& [key, values] : t.state) {
    if (values.size() != 1) {
      continue;
    }
    char number[64];
    std::snprintf(number, sizeof(number), "%.6g", values[0]);
    out += (out.empty() ? "" : " ") + key + "=" + number;
  }
  return out.empty() ? "-" : out;
}

void print_table(const std::vector<host::QuantLayerReport>& report) {
  std::printf("%-24s %-10s %-7s %5s  %s\n", "layer", "type", "tensor", "bits", "state");
  for (const host::QuantLayerReport& r : report) {
    for (const host::QuantTypeReport& t : r.types) {
      std::printf("%-24s %-10s %-7s %5lld  %s\n", r.name.c_str(), r.op_type.c_str(),
                  sdk::quant_type_name(t.type), static_cast<long long>(t.bits),
                  state_text(t).c_str());
    }
  }
}

// Whether an entry of the config quantizes inputs or outputs (ranges that need data).
bool quantizes_activations(const host::CompressionConfig& config) {
  const auto list = nlohmann::ordered_json::parse(config.config_list_json);
  for (const auto& entry : list) {
    if (entry.is_object() && entry.contains("quant_types") && entry["quant_types"].is_array()) {
      for (const auto& type : entry["quant_types"]) {
        if (type == "input" || type == "output") {
          return true;
        }
      }
    }
  }
  return false;
}

}  // namespace

int compress_with_quantizer(const CompressRequest& request, const host::CompressionConfig& config,
                            const host::PluginRegistry& registry, const RankRun& ranks) {
  const auto start = Clock::now();
  const std::string calibration_path = request.calibration_path.empty()
                                           ? default_calibration_path(request.output_path)
                                           : request.calibration_path;
  // The default calibration file (beside the output) follows the output-path rule too.
  const std::string calibration_role =
      request.calibration_path.empty() ? "the calibration file" : "--calibration";
  host::check_output_paths(
      request.inputs(),
      {{"--output", request.output_path},
       {calibration_role, calibration_path},
       {"--onnx", request.onnx.path}});
  // Staged first: a bad output directory fails before any work. Both are written under
  // temporary names and renamed into place only once both were written.
  host::StagedFile model_file(request.output_path, "--output");
  host::StagedFile calibration_file(calibration_path, calibration_role);
  std::optional<host::StagedFile> onnx_file;
  if (request.onnx.wanted()) {
    onnx_file.emplace(request.onnx.path, "--onnx");
  }
  const auto model = host::load_torchscript_model(request.model_path);
  // The whole config is validated here, before any dataset is read.
  host::QuantizationSession session(*model, registry, config);
  CompressData data = load_compress_data(request, *model);
  const double load_seconds = seconds_since(start);

  const auto quantize_start = Clock::now();
  std::optional<host::EvalResult> before;
  if (data.has_test()) {
    before = host::evaluate(*model, data.test, request.train_options.eval_batch_size);
  }
  session.compress();
  if (onnx_file) {
    // A quantizer the QDQ export cannot express (or an unsupported op) fails now, not after
    // the training; both files are written again from the result.
    session.store_state_in_model();
    model_file.write(model->serialize());  // replaced by the final model below
    check_exportable(model_file.temp_path(), request.onnx);
  }
  if (request.calibration_batches > 0) {
    // Every rank calibrates on the same batches: the ranges they combine are then the same
    // as one process's, and the state stays identical.
    session.set_process_group(ranks.group());
    host::calibrate(*model, data.train, session, request.calibration_batches,
                    request.train_options.batch_size);
  }
  std::vector<host::EpochResult> epochs;
  if (request.fine_tune) {
    host::TrainOptions options = request.train_options;
    options.progress = !request.json && ranks.writer();
    epochs = host::train(*model, data.train, data.has_test() ? &data.test : nullptr, options,
                         &session);
  }
  std::optional<host::EvalResult> after;
  if (data.has_test()) {
    after = epochs.empty()
                ? host::evaluate(*model, data.test, request.train_options.eval_batch_size)
                : epochs.back().test;
  }
  const double quantize_seconds = seconds_since(quantize_start);
  if (!request.needs_data() && quantizes_activations(config)) {
    std::fprintf(stderr,
                 "lithe compress: note: '%s' quantizes activations without data; algorithms "
                 "that track activation ranges (qat, lsq) need --epochs N or "
                 "--calibration-batches N to calibrate them\n",
                 config.algorithm.c_str());
  }

  const auto save_start = Clock::now();
  session.store_state_in_model();
  host::OnnxExportSummary onnx_summary;
  const std::string calibration = session.calibration_json();
  if (ranks.writer()) {
    model_file.write(model->serialize());
    if (onnx_file) {  // from the saved file: the ONNX model is exactly the model written
      onnx_summary = export_saved_model(model_file.temp_path(), request.onnx, *onnx_file);
    }
    calibration_file.write(calibration);
    ranks.commit({&model_file, &calibration_file, onnx_file ? &*onnx_file : nullptr});
  }
  const double save_seconds = seconds_since(save_start);

  const std::vector<host::QuantLayerReport> report = session.report();
  if (request.json) {
    nlohmann::ordered_json out;
    out["algorithm"] = config.algorithm;
    out["model"] = request.model_path;
    out["output"] = request.output_path;
    out["calibration"] = calibration_path;
    out["onnx"] = request.onnx.wanted()
                      ? onnx_summary_json(request.onnx.path, request.onnx.opset, onnx_summary)
                      : nlohmann::ordered_json();
    out["layers"] = nlohmann::ordered_json::parse(calibration)["layers"];
    if (request.needs_data()) {
      out["accuracy_before"] = before ? eval_json(*before) : nlohmann::ordered_json();
      out["accuracy_after"] = after ? eval_json(*after) : nlohmann::ordered_json();
      out["epochs"] = nlohmann::ordered_json::array();
      for (const host::EpochResult& r : epochs) {
        out["epochs"].push_back(
            {{"epoch", r.epoch},
             {"train_loss", r.train_loss},
             {"seconds", r.seconds},
             {"test", data.has_test() ? eval_json(r.test) : nlohmann::ordered_json()}});
      }
    }
    out["seconds"] = {
        {"load", load_seconds}, {"compress", quantize_seconds}, {"save", save_seconds}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  print_table(report);
  if (before && after) {
    std::printf("\ntest accuracy: %.4f float, %.4f quantized", before->accuracy, after->accuracy);
    if (!epochs.empty()) {
      std::printf(" after %lld epoch%s of quantization-aware training",
                  static_cast<long long>(epochs.size()), epochs.size() == 1 ? "" : "s");
    }
    std::printf("\n");
  }
  std::printf("\nwrote %s and %s\n", request.output_path.c_str(), calibration_path.c_str());
  if (request.onnx.wanted()) {
    print_onnx_summary(request.onnx.path, request.onnx.opset, request.onnx.input_shape,
                       onnx_summary);
  }
  std::printf("time: load %.3f s, quantize%s %.3f s, save %.3f s\n", load_seconds,
              request.fine_tune ? " + train" : "", quantize_seconds, save_seconds);
  return 0;
}

}  // namespace lithe::cli
