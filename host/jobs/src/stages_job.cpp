#include "lithe/host/jobs/stages_job.h"

#include <ATen/ATen.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <sstream>
#include <utility>

#include "lithe/host/export/int8_convert.h"
#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/jobs/compression_job.h"
#include "lithe/host/model/model.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/host/speedup/speedup.h"
#include "lithe/host/train/dataset.h"
#include "lithe/sdk/error.h"
#include "job_support.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;
using job_support::F;
using job_support::module_bytes;
using job_support::parameter_count;

// A stage's model: its bytes (what a file of it holds; empty for the input, which is never
// written) and, loaded from them, the module the next stage and the measurements read.
struct StageModel {
  std::string bytes;
  torch::jit::Module module;
};

// What a stage's model is: parameters (float ones; an int8 model's are packed), FLOPs, bytes
// and accuracy (its latency is measured with every other stage's, below).
StageRow measure(const std::string& stage, StageModel& model, uintmax_t file_bytes,
                 const StagesRequest& r, const std::optional<Dataset>& test) {
  model.module.eval();
  StageRow row;
  row.stage = stage;
  row.file_bytes = file_bytes;
  row.float_parameters = parameter_count(model.module);
  try {
    row.flops = count_flops(model.module, r.input_shape, FlopsMode::kDefault).total_flops;
  } catch (const std::exception& e) {
    const std::string why = e.what();
    row.flops_note = why.substr(0, why.find('\n'));
  }
  if (test) {
    const std::unique_ptr<Model> adapted = make_torchscript_model(model.module);
    row.accuracy = evaluate(*adapted, *test, r.train_options.batch_size).accuracy;
  }
  return row;
}

// Every stage's latency, in one loop that alternates the stage models (medians), so that their
// ratios are not skewed by the machine's load changing between stages.
void time_stages(std::vector<StageRow>& rows, std::vector<StageModel>& models,
                 const std::vector<int64_t>& shape) {
  std::vector<torch::jit::Module*> timed;
  for (StageModel& m : models) {
    timed.push_back(&m.module);
  }
  const at::Tensor x = at::randn(shape, at::detail::createCPUGenerator(20261125));
  const std::vector<double> medians = median_latencies(timed, x, 2, 10);
  for (size_t i = 0; i < medians.size(); ++i) {
    rows[i].latency_ms = medians[i];
  }
}

std::string report_json(const StagesRequest& r, const std::vector<StageRow>& rows) {
  json report = {{"model", r.model.label()},
                 {"config", r.stages_source},
                 {"input_shape", r.input_shape},
                 {"stages", json::array()}};
  for (const StageRow& row : rows) {
    json out = {{"stage", row.stage},
                {"file_bytes", row.file_bytes},
                {"float_parameters", row.float_parameters}};
    out["flops"] = row.flops ? json(*row.flops) : json(nullptr);
    if (!row.flops_note.empty()) {
      out["flops_note"] = row.flops_note;
    }
    if (row.accuracy) {
      out["accuracy"] = *row.accuracy;
    }
    out["latency_ms"] = row.latency_ms;
    report["stages"].push_back(std::move(out));
  }
  return report.dump(1) + "\n";
}

// Runs one stage on `current`; returns its label and model. `masks`: the last pruner's.
std::string run_stage(const Stage& stage, const StagesRequest& r, const PluginRegistry& registry,
                      const StageModel& current, NamedMasks& masks, StageModel& next) {
  if (stage.kind == StageKind::kCompress) {
    CompressionRequest request;
    request.model = ModelSource::in_memory(current.module, "the model of the stage before");
    request.config = stage.config;
    request.config_path = r.stages_source;
    request.output = Output::to_memory(&next.bytes);
    std::string mask_bytes;
    if (!stage.quantizer) {
      request.masks = Output::to_memory(&mask_bytes);
    }
    request.data_path = r.data_path;
    request.test_data_path = r.test_data_path;
    request.calibration_batches = stage.calibration_batches;
    request.fold_batchnorm = stage.fold_batchnorm;
    request.recalibrate_bn_batches = stage.recalibrate_bn;
    request.fine_tune = stage.epochs > 0;
    request.train_options = r.train_options;
    request.train_options.epochs = stage.epochs > 0 ? stage.epochs : 1;
    request.train_options.progress = false;
    (void)run_compression(request, registry);
    if (!stage.quantizer) {
      masks = deserialize_masks(mask_bytes, "the masks of " + stage.where);
    }
    next.module = module_from_bytes(next.bytes);
    return stage.config.algorithm;
  }
  if (stage.kind == StageKind::kSpeedup) {
    torch::jit::Module module = current.module;
    module.eval();
    const at::Tensor x = at::randn(r.input_shape, at::detail::createCPUGenerator(20261122));
    const SpeedupResult result = speedup_model(module, masks, x, "the masks of the stage before");
    LITHE_CHECK(result.explained(1e-4), sdk::Errc::kInternal,
                "the smaller model differs from the masked one by ",
                result.max_abs_diff_without_bn_shift,
                " beyond the BatchNorm shift; nothing was written. This is a Lithe bug: "
                "please report it with the model");
    next.bytes = module_bytes(*result.module);
    next.module = module_from_bytes(next.bytes);
    return "speedup";
  }
  Int8ConvertOptions options;
  options.engine = stage.engine;
  Int8ConvertReport report;
  const torch::jit::Module int8 = convert_to_int8(current.module, options, &report);
  next.bytes = serialize_int8_model(int8, report.engine);
  next.module = int8;
  return std::string("convert (") + quantized_engine_name(report.engine) + ", " +
         std::to_string(report.int8_layers.size()) + " int8 layers, " +
         std::to_string(report.float_layers.size()) + " float)";
}

StagesResult stages(const StagesRequest& r, const PluginRegistry& registry) {
  LITHE_CHECK(!r.model.empty(), sdk::Errc::kInvalidConfig, F("model"), ": no model given");
  LITHE_CHECK(r.output.wanted(), sdk::Errc::kInvalidConfig, F("output"),
              ": no output model path given");
  LITHE_CHECK(!r.stages.empty(), sdk::Errc::kInvalidConfig, F("stages"),
              ": no stage given (parse_stages)");
  LITHE_CHECK(!r.input_shape.empty(), sdk::Errc::kInvalidConfig, F("input_shape"),
              ": no input shape given");
  check_output_paths({{F("model"), r.model.path()},
                      {F("data_path"), r.data_path},
                      {F("test_data_path"), r.test_data_path}},
                     {{F("output"), r.output.file}, {F("report"), r.report.file}});
  // Both outputs are staged first: an unwritable place fails before any work.
  StagedOutput model_out(r.output, F("output"));
  StagedOutput report_out(r.report, F("report"));
  std::optional<Dataset> test;
  if (r.measure_accuracy) {
    test = load_test_dataset(r.data_path, r.test_data_path);
  }

  StagesResult result;
  // Every stage's model stays loaded until all are timed together.
  std::vector<StageModel> models;
  // The input's bytes are never written: its row gives the model's size as given.
  models.push_back({{}, r.model.load(F("model"))});
  result.rows.push_back(measure("input", models.back(), r.model.size_bytes(), r, test));
  NamedMasks masks;
  for (const Stage& stage : r.stages) {
    StageModel next;
    std::string label;
    // What the stage reports is prefixed with the stage: the config's rules that need the model
    // (a layer name, a sparsity the algorithm refuses) are checked as the stage starts.
    const std::string at = stage.where + (stage.kind == StageKind::kCompress ? "/compress" : "");
    try {
      label = run_stage(stage, r, registry, models.back(), masks, next);
    } catch (const FieldError& e) {  // its fields stay marked for the front end's words
      throw sdk::Error(e.code(), r.stages_source + ": " + at + ": " + e.text().marked());
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), r.stages_source + ": " + at + ": " + e.what());
    }
    models.push_back(std::move(next));
    result.rows.push_back(measure(label, models.back(), models.back().bytes.size(), r, test));
    if (stage.kind == StageKind::kConvert) {
      // The FLOPs counter knows float ops; the int8 kernels do the quantized model's MACs.
      result.rows.back().flops = result.rows[result.rows.size() - 2].flops;
      result.rows.back().flops_note = "the quantized model's, computed by int8 kernels";
    }
  }
  time_stages(result.rows, models, r.input_shape);
  result.report_json = report_json(r, result.rows);
  model_out.write(models.back().bytes);
  report_out.write(result.report_json);
  model_out.commit();
  report_out.commit();
  return result;
}

}  // namespace

StagesResult run_stages(const StagesRequest& request, const PluginRegistry& registry) {
  return rethrow_with_fields([&] { return stages(request, registry); });
}

}  // namespace lithe::host
