#pragma once
/// \file
/// A staged compression: what `lithe pipeline` runs and what an embedder calls on a model in
/// memory. Stages run in order, each on the model the one before it made, passed in memory:
/// compression jobs (run_compression: pruners and quantizers), speedup of the pruned model
/// (speedup_model, checked), and native int8 conversion; then every stage's model is measured
/// side by side (parameters, FLOPs, bytes, latency in one alternating loop, accuracy).

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lithe/host/io/field_error.h"
#include "lithe/host/jobs/job_output.h"
#include "lithe/host/jobs/model_source.h"
#include "lithe/host/model/quantized_engine.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/train/trainer.h"

namespace lithe::host {

enum class StageKind { kCompress, kSpeedup, kConvert };

/// One stage of a stage config.
struct Stage {
  StageKind kind = StageKind::kCompress;
  std::string where;                   ///< its JSON path, "/stages/2", for messages
  CompressionConfig config;            ///< compress
  bool quantizer = false;              ///< compress: the algorithm is a quantizer
  int64_t epochs = 0;                  ///< compress: fine-tune epochs (0: none)
  int64_t calibration_batches = 0;     ///< compress
  std::optional<bool> fold_batchnorm;  ///< compress (unset: fold for quantizers)
  int64_t recalibrate_bn = 0;          ///< compress: BatchNorm re-estimation batches (0: none)
  QuantizedEngine engine = QuantizedEngine::kAuto;  ///< convert
};

/// Parses a stage config, {"stages": [{"compress": {...config...}, "epochs": N}, {"speedup": {}},
/// {"compress": {...}, "calibration_batches": N, "fold_batchnorm": true, "recalibrate_bn": N},
/// {"convert": {}, "engine": "auto"}]}, with every rule that needs no model: keys, types, and
/// the order of stages (a speedup right after each pruner, a quantizer before convert, convert
/// last). `registry` tells pruners from quantizers. Throws sdk::Error "SOURCE: /json/path: rule,
/// value".
std::vector<Stage> parse_stages(const std::string& json_text, const std::string& source,
                                const PluginRegistry& registry);
/// parse_stages on a file's contents (its path is the source).
std::vector<Stage> read_stages(const std::filesystem::path& path, const PluginRegistry& registry);

/// What to run and where the results go. Errors name the fields (FieldError).
struct StagesRequest {
  ModelSource model;                 ///< the model the first stage reads (file or memory)
  std::vector<Stage> stages;         ///< parse_stages
  std::string stages_source;         ///< where the stages came from, prefixed to their errors
  std::vector<int64_t> input_shape;  ///< for speedup, FLOPs and latency, batch first
  Output output;                     ///< the last stage's model (required)
  Output report;                     ///< the per-stage report as JSON
  std::filesystem::path data_path;   ///< training data of the compression stages
  std::filesystem::path test_data_path;  ///< "" = the test split of a data_path directory
  bool measure_accuracy = true;      ///< evaluate every stage's model on the test data
  TrainOptions train_options;        ///< of the compression stages (epochs set per stage)
};

/// One row of the report: a stage's model.
struct StageRow {
  std::string stage;  ///< "input", the algorithm, "speedup", "convert (engine, ...)"
  uintmax_t file_bytes = 0;
  int64_t float_parameters = 0;  ///< an int8 model's weights are packed, not counted
  std::optional<int64_t> flops;  ///< NNI's count; an int8 model carries its quantized model's
  std::string flops_note;        ///< why not counted, or where an int8 model's count comes from
  std::optional<double> accuracy;
  double latency_ms = 0;  ///< median, timed with every other stage's model alternating
};

struct StagesResult {
  std::vector<StageRow> rows;  ///< the input, then one per stage
  std::string report_json;     ///< what `report` holds
};

/// Runs every stage, measures, and writes the last model and the report (both or neither).
/// Throws FieldError naming the request field, or sdk::Error prefixed with the stage
/// ("SOURCE: /stages/2/compress: ...").
StagesResult run_stages(const StagesRequest& request, const PluginRegistry& registry);

}  // namespace lithe::host
