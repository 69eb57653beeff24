#include "lithe/host/jobs/compression_job.h"

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <utility>

#include <torch/script.h>

#include "lithe/host/io/mask_file.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/model/batchnorm_folding.h"
#include "lithe/host/model/model.h"
#include "lithe/host/pipeline/pruned_cost_meter.h"
#include "lithe/host/train/dataset.h"
#include "lithe/sdk/error.h"
#include "job_support.h"

namespace lithe::host {
namespace {

using job_support::Clock;
using job_support::F;
using job_support::seconds_since;

// The ONNX bytes of `module` (a copy of the job's own, on the CPU), in eval mode.
std::string export_copy(torch::jit::Module module, const OnnxExportOptions& options,
                        OnnxExportSummary* summary) {
  module.eval();
  return export_onnx(module, options, summary);
}

// The native int8 model of a quantized module (a copy of the job's own, on the CPU).
torch::jit::Module convert_copy(torch::jit::Module module, const Int8ConvertOptions& options,
                                Int8ConvertReport* report) {
  module.eval();
  torch::jit::Module int8 = convert_to_int8(module, options, report);
  int8.eval();
  return int8;
}

// Whether any quantized layer has input or output ranges, which need data to calibrate.
bool quantizes_activations(const std::vector<QuantLayerReport>& report) {
  for (const QuantLayerReport& layer : report) {
    for (const QuantTypeReport& t : layer.types) {
      if (t.type == sdk::QuantType::kInput || t.type == sdk::QuantType::kOutput) {
        return true;
      }
    }
  }
  return false;
}

int64_t pruned_weights(const std::vector<LayerReport>& report) {
  int64_t pruned = 0;
  for (const LayerReport& r : report) {
    pruned += r.weight_zeros;
  }
  return pruned;
}

void note(const CompressionCallbacks& callbacks, const std::string& marked) {
  if (callbacks.on_note) {
    callbacks.on_note(FieldText(marked));
  }
}

// The outputs of one job, staged before any work so that a bad output directory fails first;
// they replace existing files (and fill the caller's strings) only in commit(), once every one
// was written.
struct StagedOutputs {
  StagedOutput model;
  StagedOutput masks;        // pruners, when asked for
  StagedOutput calibration;  // quantizers
  StagedOutput onnx;         // when asked for
  StagedOutput int8;         // quantizers, when asked for

  void commit() {
    for (StagedOutput* output : {&model, &masks, &calibration, &onnx, &int8}) {
      output->commit();
    }
  }
};

// The checks that need no model: option combinations and output paths.
void check_request(const CompressionRequest& request, bool quantizer,
                   const Output& calibration) {
  const std::string& algorithm = request.config.algorithm;
  LITHE_CHECK(!request.model.empty(), sdk::Errc::kInvalidConfig, F("model"), ": no model given");
  LITHE_CHECK(request.output.wanted(), sdk::Errc::kInvalidConfig, F("output"),
              ": no output model path given");
  LITHE_CHECK(!quantizer || !request.masks.wanted(), sdk::Errc::kInvalidConfig, F("masks"), ": '",
              algorithm, "' is a quantizer, which computes no masks");
  LITHE_CHECK(quantizer || !request.fold_batchnorm.value_or(false), sdk::Errc::kInvalidConfig,
              F("fold_batchnorm"), ": '", algorithm,
              "' is not a quantizer; BatchNorm folding places quantizers' output grids");
  LITHE_CHECK(quantizer || !request.calibration.wanted(), sdk::Errc::kInvalidConfig,
              F("calibration"), ": '", algorithm,
              "' is not a quantizer, so there is no calibration to write");
  LITHE_CHECK(quantizer || !request.int8.wanted(), sdk::Errc::kInvalidConfig, F("int8"), ": '",
              algorithm,
              "' is not a quantizer; an int8 model needs quantized layers (prune, speed up, "
              "then quantize: lithe pipeline)");
  LITHE_CHECK(request.recalibrate_bn_batches >= 0, sdk::Errc::kInvalidConfig,
              F("recalibrate_bn_batches"), " must be >= 0 (0: no re-estimation), got ",
              request.recalibrate_bn_batches);
  LITHE_CHECK(request.calibration_batches >= 0, sdk::Errc::kInvalidConfig,
              F("calibration_batches"), " must be >= 0 (0: no calibration), got ",
              request.calibration_batches);
  if (request.fine_tune) {
    validate_train_options(request.train_options);  // epochs <= 0, lr, ... before any work
  }
  LITHE_CHECK(request.train_options.batch_size > 0, sdk::Errc::kInvalidConfig,
              "batch size must be > 0, got ", request.train_options.batch_size);
  if (request.onnx.wanted()) {
    check_onnx_export_options(request.onnx_export, F("onnx_export.opset"));
  }
  // The default calibration file (beside the output) follows the output-path rule too.
  const std::string calibration_role =
      request.calibration.wanted() ? F("calibration") : "the calibration file";
  const std::filesystem::path no_data;
  check_output_paths({{F("model"), request.model.path()},
                      {F("config_path"), request.config_path},
                      {F("data_path"), request.needs_data() ? request.data_path : no_data},
                      {F("test_data_path"), request.test_data_path}},
                     {{F("output"), request.output.file},
                      {F("masks"), request.masks.file},
                      {calibration_role, quantizer ? calibration.file : no_data},
                      {F("onnx"), request.onnx.file},
                      {F("int8"), request.int8.file}});
}

CompressionResult compress(const CompressionRequest& request, const PluginRegistry& registry,
                           const CompressionCallbacks& callbacks);

}  // namespace

std::filesystem::path default_calibration_path(const std::filesystem::path& output_path) {
  std::filesystem::path path(output_path);
  path.replace_extension(".calibration.json");
  return path;
}

CompressionResult run_compression(const CompressionRequest& request,
                                  const PluginRegistry& registry,
                                  const CompressionCallbacks& callbacks) {
  return rethrow_with_fields([&] { return compress(request, registry, callbacks); });
}

namespace {

CompressionResult compress(const CompressionRequest& request, const PluginRegistry& registry,
                           const CompressionCallbacks& callbacks) {
  const CompressionConfig& config = request.config;
  const bool quantizer = registry.find(AlgorithmKind::kQuantizer, config.algorithm) != nullptr;
  CompressionResult result;
  result.kind = quantizer ? AlgorithmKind::kQuantizer : AlgorithmKind::kPruner;
  Output calibration = request.calibration;
  if (quantizer && !calibration.wanted() && !request.output.file.empty()) {
    calibration.file = default_calibration_path(request.output.file);
  }
  result.calibration_path = quantizer ? calibration.file : std::filesystem::path();
  check_request(request, quantizer, calibration);
  const bool writer = request.process_group == nullptr || request.process_group->rank() == 0;
  const auto start = Clock::now();

  // 1. Stage every output: an unwritable directory fails before any work.
  StagedOutputs out{
      StagedOutput(request.output, F("output")),
      StagedOutput(request.masks, F("masks")),
      StagedOutput(quantizer ? calibration : Output(),
                   request.calibration.wanted() ? F("calibration") : "the calibration file"),
      StagedOutput(request.onnx, F("onnx")),
      StagedOutput(request.int8, F("int8"))};

  // 2. Model and session: the whole config is validated here, before any data is read.
  torch::jit::Module module = request.model.load(F("model"));
  result.folded_batchnorm = request.fold_batchnorm.value_or(quantizer);
  if (result.folded_batchnorm) {
    result.batchnorm_folding = fold_batchnorms(module);
  }
  // The pre-flight export of a pruned model reads the model as it came, on the CPU.
  std::optional<torch::jit::Module> as_it_came;
  if (request.onnx.wanted() && !quantizer) {
    as_it_came = module.clone();
  }
  std::unique_ptr<Model> model = make_torchscript_model(module);
  model->to(request.device);  // before a session attaches: its state is made where the model is
  std::unique_ptr<PruningSession> pruning;
  std::unique_ptr<QuantizationSession> quantization;
  if (quantizer) {
    quantization = std::make_unique<QuantizationSession>(*model, registry, config);
  } else {
    pruning = std::make_unique<PruningSession>(*model, registry, config);
  }
  // 3. Pre-flight export check of pruned models: masks do not change which ops a model has, so
  // a model the export cannot express fails now, not after the fine-tuning. (Quantized models
  // are checked once compress() installed the quantizers, below.)
  if (as_it_came) {
    (void)export_copy(*as_it_came, request.onnx_export, nullptr);
    as_it_came.reset();
  }

  // 4. Data, checked against the model. Read up front when needed or given explicitly: an
  // algorithm may train or evaluate while it compresses (SDK 1.7 fine_tune/evaluate), and the
  // model as it came must be measured before that (its first evaluation may come after its
  // first masks). The default data folder is read only on an algorithm's first use.
  Dataset train_data;
  Dataset test_data;
  bool data_loaded = false;
  const auto load_data = [&] {
    if (data_loaded) {
      return;
    }
    train_data = load_dataset(request.data_path, "train");
    check_dataset_fits_model(*model, train_data);
    test_data = load_test_dataset(request.data_path, request.test_data_path);
    if (test_data.size() > 0) {
      check_dataset_fits_model(*model, test_data);
    }
    data_loaded = true;
  };
  if (request.needs_data() || request.read_data_first) {
    load_data();
  }
  result.load_seconds = seconds_since(start);

  // 5. Evaluate, compress, calibrate, fine-tune.
  const auto compress_start = Clock::now();
  TrainOptions options = request.train_options;
  options.process_group = request.process_group;
  options.progress = options.progress && writer;
  if (test_data.size() > 0) {
    result.before = evaluate(*model, test_data, options.eval_batch_size);
  }
  TrainingHooks* hooks = quantizer ? static_cast<TrainingHooks*>(quantization.get())
                                   : static_cast<TrainingHooks*>(pruning.get());
  SessionCore& session = quantizer ? static_cast<SessionCore&>(*quantization)
                                   : static_cast<SessionCore&>(*pruning);
  // What the algorithm's fine_tune(epochs) and evaluate() run: the training options on the
  // data, each fine-tune with its own shuffling seed; the top-1 accuracy on the test data.
  int64_t fine_tunes = 0;
  // The default folder, read on first use: the model as it came can no longer be measured
  // then (masks may be applied), so "before" stays empty rather than wrong.
  double lazy_seconds = 0;
  const auto load_data_now = [&] {
    if (!data_loaded) {
      const auto lazy_start = Clock::now();
      load_data();
      lazy_seconds += seconds_since(lazy_start);
    }
  };
  session.set_fine_tuner([&](int64_t epochs) {
    load_data_now();
    TrainOptions tune = options;
    tune.epochs = epochs;
    tune.seed = options.seed + 1000003ULL * static_cast<uint64_t>(++fine_tunes);
    result.algorithm_training_epochs += epochs;
    (void)train(*model, train_data, nullptr, tune, hooks);
  });
  // Only where test data will exist (--test-data, or a --data folder, whose test split is
  // required), so that can_evaluate() is false for a --data file alone and an algorithm that
  // evaluates when it can (linear) runs without a metric instead of failing.
  std::error_code ec;
  if (!request.test_data_path.empty() || std::filesystem::is_directory(request.data_path, ec)) {
    session.set_evaluator([&]() -> double {
      load_data_now();
      LITHE_CHECK(test_data.size() > 0, sdk::Errc::kUnsupported, session.algorithm(),
                  " asked to evaluate the model, but '", request.data_path.string(),
                  "' has no test split; set ", F("test_data_path"));
      ++result.algorithm_evaluations;
      return evaluate(*model, test_data, options.eval_batch_size).accuracy;
    });
  }
  if (pruning) {
    // What a budget search (SDK 1.10 measure_cost) asks: the sped-up model's FLOPs at one
    // sample of the data, the model and the data read on first use.
    pruning->set_cost_meter(
        [&, meter = std::function<sdk::ModelCost()>()]() mutable -> sdk::ModelCost {
          if (!meter) {
            load_data_now();
            const Dataset& sample = train_data.size() > 0 ? train_data : test_data;
            LITHE_CHECK(sample.size() > 0, sdk::Errc::kUnsupported, session.algorithm(),
                        " asked for the sped-up model's cost, which is counted on one sample "
                        "of the data, and '", request.data_path.string(), "' has none");
            std::vector<int64_t> shape = sample.images.sizes().vec();
            shape.at(0) = 1;
            meter = pruned_cost_meter(request.model.load(F("model")), *pruning, shape);
          }
          return meter();
        });
  }
  const auto algorithm_start = Clock::now();
  if (quantizer) {
    quantization->compress();
  } else {
    pruning->compress();
  }
  result.algorithm_seconds = seconds_since(algorithm_start) - lazy_seconds;
  if (callbacks.on_compressed) {
    callbacks.on_compressed(result);
  }
  const bool has_test = test_data.size() > 0;
  Int8ConvertOptions int8_options;
  int8_options.engine = request.int8_engine;
  int8_options.allow_float_layers = request.int8_allow_float_layers;
  if ((out.onnx.wanted() || out.int8.wanted()) && quantizer) {
    // A quantizer the QDQ export or the int8 conversion cannot express fails now, not after
    // the training. The model's bytes load back on the CPU; the model stays where it is.
    quantization->store_state_in_model();
    const std::string bytes = model->serialize();
    if (out.onnx.wanted()) {
      (void)export_copy(module_from_bytes(bytes), request.onnx_export, nullptr);
    }
    if (out.int8.wanted()) {
      // Before the data passes: what calibration and training will observe counts as present
      // (input ranges only where calibration runs: only it observes them).
      Int8ConvertOptions preflight = int8_options;
      preflight.assume_grids_observed = request.calibration_batches > 0 || request.fine_tune;
      preflight.assume_input_ranges_observed = request.calibration_batches > 0;
      (void)convert_copy(module_from_bytes(bytes), preflight, nullptr);
    }
  }
  const auto recalibrate_bn = [&] {
    try {
      result.batchnorm_recalibration = recalibrate_batchnorm(
          *model, train_data, request.recalibrate_bn_batches, options.batch_size);
    } catch (const sdk::Error& e) {  // say which field and which model
      throw sdk::Error(e.code(), F("recalibrate_bn_batches") + " " +
                                     std::to_string(request.recalibrate_bn_batches) + " on '" +
                                     request.model.label() + "': " + e.what());
    }
    if (has_test) {
      result.after_recalibration = evaluate(*model, test_data, options.eval_batch_size);
    }
  };
  if (request.recalibrate_bn_batches > 0 && quantizer) {
    recalibrate_bn();  // activation ranges are then observed through the new statistics
  }
  if (request.calibration_batches > 0 && quantizer) {
    // Every rank calibrates on the same batches: the ranges they combine are then the same as
    // one process's, and the state stays identical.
    quantization->set_process_group(request.process_group);
    calibrate(*model, train_data, *quantization, request.calibration_batches, options.batch_size);
  } else if (request.calibration_batches > 0) {
    calibrate(*model, train_data, *pruning, request.calibration_batches, options.batch_size);
  }
  if (request.recalibrate_bn_batches > 0 && !quantizer) {
    recalibrate_bn();  // after the statistics pass that decides data-driven masks
  }
  if (request.fine_tune) {
    result.epochs = train(*model, train_data, has_test ? &test_data : nullptr, options, hooks);
  }
  // Every pass is over: an algorithm that saw fewer batches than it needs fails here, naming
  // the layer and its rule, rather than writing an uncompressed model.
  if (quantizer) {
    quantization->end_of_data();
  } else {
    pruning->end_of_data();
  }
  if (has_test) {
    result.after = result.epochs.empty() ? evaluate(*model, test_data, options.eval_batch_size)
                                         : result.epochs.back().test;
  }
  result.compress_seconds = seconds_since(compress_start);
  if (!quantizer) {
    result.pruning = pruning->report();
    if (!request.needs_data() && pruned_weights(result.pruning) == 0) {
      note(callbacks, "'" + config.algorithm + "' pruned nothing without data; schedules need " +
                          F("fine_tune") + ", data-driven pruners " + F("calibration_batches") +
                          " or " + F("fine_tune"));
    }
  }

  // 6. Write, export from the written model, commit.
  const auto save_start = Clock::now();
  if (quantizer) {
    quantization->store_state_in_model();
    result.calibration_json = quantization->calibration_json();
    result.quantization = quantization->report();
    if (!request.needs_data() && quantizes_activations(result.quantization)) {
      note(callbacks, "'" + config.algorithm +
                          "' quantizes activations without data; algorithms that track "
                          "activation ranges (qat, lsq) need " + F("fine_tune") + " or " +
                          F("calibration_batches") + " to calibrate them");
    }
  }
  if (writer) {
    std::future<void> masks_written;  // the masks are serialized and written on a second thread
    if (out.masks.wanted()) {
      masks_written = std::async(std::launch::async, [&] {
        out.masks.write(serialize_masks(pruning->masks()));
      });
    }
    model->to(c10::Device(c10::kCPU));  // every pass is over
    const std::string bytes = model->serialize();
    if (out.onnx.wanted()) {  // from the bytes written: the ONNX model is the model written
      OnnxExportSummary summary;
      out.onnx.write(export_copy(module_from_bytes(bytes), request.onnx_export, &summary));
      result.onnx = summary;
    }
    if (quantizer) {
      out.calibration.write(result.calibration_json);
    }
    if (out.int8.wanted()) {
      Int8ConvertReport report;
      torch::jit::Module int8 = convert_copy(module_from_bytes(bytes), int8_options, &report);
      out.int8.write(serialize_int8_model(int8, report.engine));
      if (has_test) {
        const std::unique_ptr<Model> int8_model = make_torchscript_model(int8);
        result.int8_accuracy = evaluate(*int8_model, test_data, options.eval_batch_size);
      }
      result.int8 = std::move(report);
    }
    out.model.write(bytes);
    if (masks_written.valid()) {
      masks_written.get();
    }
    out.commit();
    result.wrote_files = true;
  }
  result.save_seconds = seconds_since(save_start);
  return result;
}

}  // namespace
}  // namespace lithe::host
