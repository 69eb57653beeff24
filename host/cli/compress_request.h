#pragma once
// What `lithe compress` was asked to do, after argument parsing and the checks that need no
// model: shared by the pruning and the quantization paths of the verb.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lithe/host/train/dataset.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/train/trainer.h"
#include "onnx_output.h"

namespace lithe::cli {

struct CompressRequest {
  std::string model_path;
  std::string config_path;
  std::string output_path;
  std::string masks_path;        ///< pruners only ("" = none)
  std::string calibration_path;  ///< quantizers: the calibration JSON ("" = beside the output)
  std::string data;
  std::string test_path;
  bool json = false;
  bool fine_tune = false;
  int64_t calibration_batches = 0;
  host::TrainOptions train_options;
  OnnxRequest onnx;  ///< also write the saved model as ONNX (QDQ for quantizers)
  /// Whether data is read (fine-tuning or calibration).
  bool needs_data() const { return fine_tune || calibration_batches > 0; }
  /// The files the run reads, named by their options (for check_output_paths).
  std::vector<host::NamedPath> inputs() const {
    return {{"--model", model_path},
            {"--config", config_path},
            {"--data", needs_data() ? data : std::string()},
            {"--test-data", test_path}};
  }
};

/// Loaded training and test data, when the request needs data; checked against the model.
struct CompressData {
  host::Dataset train;
  host::Dataset test;
  bool has_test() const { return test.size() > 0; }
};

/// Reads the data the request names (nothing when it needs none) and checks it fits `model`.
CompressData load_compress_data(const CompressRequest& request, host::Model& model);

/// Wall time since `start`, in seconds (the verbs' timing lines).
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// {"accuracy", "loss", "samples"} of an evaluation, for --json summaries.
nlohmann::ordered_json eval_json(const host::EvalResult& r);

/// `OUT.pt` -> `OUT.calibration.json` (the default calibration file of quantizers).
std::string default_calibration_path(const std::string& output_path);

}  // namespace lithe::cli
