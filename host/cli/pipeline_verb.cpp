// `lithe pipeline`: several compression steps from one config file, in order: pruning and
// quantization jobs (what `lithe compress` runs), speedup of the pruned model, and native int8
// conversion, with parameters, FLOPs, file size, latency and accuracy after every stage. Only the
// final model (and the report) is written; the stages' models live in a temporary folder.
#include <ATen/ATen.h>
#include <torch/script.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "field_flags.h"
#include "input_shape.h"
#include "lithe/host/export/int8_convert.h"
#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/io/json_document.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/model/model.h"
#include "lithe/host/jobs/compression_job.h"
#include "lithe/host/speedup/latency.h"
#include "lithe/host/speedup/speedup.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "training_options.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

enum class StageKind { kCompress, kSpeedup, kConvert };

struct Stage {
  StageKind kind;
  std::string where;                // "/stages/2", for messages
  host::CompressionConfig config;   // compress
  bool quantizer = false;           // compress
  int64_t epochs = 0;               // compress: fine-tune epochs (0: none)
  int64_t calibration_batches = 0;  // compress
  std::optional<bool> fold_batchnorm;  // compress (unset: fold for quantizers)
  int64_t recalibrate_bn = 0;       // compress: BatchNorm re-estimation batches (0: none)
  host::QuantizedEngine engine = host::QuantizedEngine::kAuto;  // convert
};

[[noreturn]] void bad(const std::string& file, const std::string& path, const std::string& what) {
  throw sdk::Error(sdk::Errc::kInvalidConfig, file + ": " + path + ": " + what);
}

int64_t positive_int(const json& value, const std::string& file, const std::string& path) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1) {
    bad(file, path, "must be an integer >= 1, got " + value.dump());
  }
  return value.get<int64_t>();
}

// Every rule that needs no model: keys, types, the order of stages.
std::vector<Stage> parse_stages(const json& doc, const std::string& file,
                                const host::PluginRegistry& registry) {
  if (!doc.is_object()) {
    bad(file, "/", "must be an object {\"stages\": [...]}, got " + doc.dump().substr(0, 80));
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "stages") {
      bad(file, "/" + key, "unknown key (the only key is \"stages\")");
    }
  }
  if (!doc.contains("stages") || !doc["stages"].is_array() || doc["stages"].empty()) {
    bad(file, "/stages", "must be a non-empty list of stages");
  }
  std::vector<Stage> stages;
  bool pruned = false;     // a pruner ran and its masks are not applied by a speedup yet
  bool quantized = false;  // a quantizer ran
  for (size_t i = 0; i < doc["stages"].size(); ++i) {
    const json& s = doc["stages"][i];
    const std::string at = "/stages/" + std::to_string(i);
    if (!s.is_object()) {
      bad(file, at, "must be an object with one of \"compress\", \"speedup\", \"convert\"");
    }
    Stage stage;
    stage.where = at;
    int kinds = 0;
    for (const auto& [key, value] : s.items()) {
      if (key == "compress" || key == "speedup" || key == "convert") {
        ++kinds;
        stage.kind = key == "compress"  ? StageKind::kCompress
                     : key == "speedup" ? StageKind::kSpeedup
                                        : StageKind::kConvert;
      }
    }
    if (kinds != 1) {
      bad(file, at,
          "must have exactly one of \"compress\", \"speedup\", \"convert\", got " +
              std::to_string(kinds));
    }
    static const std::set<std::string> compress_keys = {"compress", "epochs", "calibration_batches",
                                                        "fold_batchnorm", "recalibrate_bn"};
    for (const auto& [key, value] : s.items()) {
      const bool known = stage.kind == StageKind::kCompress  ? compress_keys.count(key) != 0
                         : stage.kind == StageKind::kSpeedup ? key == "speedup"
                                                             : key == "convert" || key == "engine";
      if (!known) {
        bad(file, at + "/" + key, "unknown key for this stage");
      }
    }
    if (stage.kind == StageKind::kCompress) {
      if (!s["compress"].is_object()) {
        bad(file, at + "/compress", "must be a compression config object {\"algorithm\": ...}");
      }
      stage.config =
          host::parse_compression_config(s["compress"].dump(), file + " " + at + "/compress");
      stage.quantizer =
          registry.find(host::AlgorithmKind::kQuantizer, stage.config.algorithm) != nullptr;
      if (s.contains("epochs")) {
        stage.epochs = positive_int(s["epochs"], file, at + "/epochs");
      }
      if (s.contains("calibration_batches")) {
        stage.calibration_batches =
            positive_int(s["calibration_batches"], file, at + "/calibration_batches");
      }
      if (s.contains("recalibrate_bn")) {
        stage.recalibrate_bn = positive_int(s["recalibrate_bn"], file, at + "/recalibrate_bn");
      }
      if (s.contains("fold_batchnorm")) {
        if (!s["fold_batchnorm"].is_boolean()) {
          bad(file, at + "/fold_batchnorm",
              "must be true or false, got " + s["fold_batchnorm"].dump());
        }
        stage.fold_batchnorm = s["fold_batchnorm"].get<bool>();
      }
      if (pruned && !stage.quantizer) {
        bad(file, at,
            "a second pruner before the first one's speedup: put a \"speedup\" stage "
            "between them");
      }
      if (pruned && stage.quantizer) {
        bad(file, at,
            "a quantizer after a pruner needs the pruned model made smaller first: "
            "put a \"speedup\" stage before it");
      }
      pruned = !stage.quantizer;
      quantized = quantized || stage.quantizer;
    } else if (stage.kind == StageKind::kSpeedup) {
      if (!s["speedup"].is_object() || !s["speedup"].empty()) {
        bad(file, at + "/speedup", "must be {} (speedup takes no options here)");
      }
      if (!pruned) {
        bad(file, at, "speedup needs a pruning stage (its masks) right before it");
      }
      pruned = false;
    } else {
      if (!s["convert"].is_object() || !s["convert"].empty()) {
        bad(file, at + "/convert", "must be {} (its option is \"engine\" beside it)");
      }
      if (s.contains("engine")) {
        if (!s["engine"].is_string()) {
          bad(file, at + "/engine", "must be a string, got " + s["engine"].dump());
        }
        stage.engine = host::parse_quantized_engine(s["engine"].get<std::string>(),
                                                    file + ": " + at + "/engine");
      }
      if (!quantized) {
        bad(file, at, "convert needs a quantization stage before it");
      }
      if (i + 1 != doc["stages"].size()) {
        bad(file, at, "convert must be the last stage (an int8 model is not compressed further)");
      }
    }
    stages.push_back(std::move(stage));
  }
  return stages;
}

// A folder beside the output for the stages' models, removed with this object.
class WorkFolder {
 public:
  explicit WorkFolder(const fs::path& output) {
    const fs::path parent = fs::absolute(output).parent_path();
    std::random_device random;
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = parent / (".lithe-pipeline-" + std::to_string(random()));
      std::error_code ec;
      if (fs::create_directory(path_, ec)) {
        return;
      }
      LITHE_CHECK(!ec || ec == std::errc::file_exists, sdk::Errc::kIo,
                  "cannot create a working folder in '", parent.string(), "': ", ec.message());
    }
    throw sdk::Error(sdk::Errc::kIo, "cannot create a working folder in '" + parent.string() + "'");
  }
  ~WorkFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  WorkFolder(const WorkFolder&) = delete;
  WorkFolder& operator=(const WorkFolder&) = delete;
  fs::path file(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

int64_t parameter_count(const torch::jit::Module& module) {
  int64_t n = 0;
  for (const at::Tensor& p : module.parameters()) {
    n += p.numel();
  }
  return n;
}

// What a stage's model (loaded from `file`) is: parameters (float ones; an int8 model's are
// packed), FLOPs, file size and accuracy (its latency is measured with every other stage's,
// time_stages).
json measure(const std::string& stage, const fs::path& file, torch::jit::Module& module,
             const std::vector<int64_t>& shape, const std::optional<host::Dataset>& test,
             int64_t batch_size) {
  module.eval();
  json row = {{"stage", stage},
              {"file_bytes", fs::file_size(file)},
              {"float_parameters", parameter_count(module)}};
  try {
    row["flops"] = host::count_flops(module, shape, host::FlopsMode::kDefault).total_flops;
  } catch (const std::exception& e) {
    std::string why = e.what();
    row["flops"] = nullptr;
    row["flops_note"] = why.substr(0, why.find('\n'));
  }
  if (test) {
    const std::unique_ptr<host::Model> model = host::make_torchscript_model(module);
    row["accuracy"] = host::evaluate(*model, *test, batch_size).accuracy;
  }
  return row;
}

// Every stage's latency, in one loop that alternates the stage models (medians), so that their
// ratios are not skewed by the machine's load changing between stages.
void time_stages(json& rows, std::vector<torch::jit::Module>& modules,
                 const std::vector<int64_t>& shape) {
  std::vector<torch::jit::Module*> timed;
  for (torch::jit::Module& m : modules) {
    timed.push_back(&m);
  }
  const at::Tensor x = at::randn(shape, at::detail::createCPUGenerator(20261125));
  const std::vector<double> medians = host::median_latencies(timed, x, 2, 10);
  for (size_t i = 0; i < medians.size(); ++i) {
    rows[i]["latency_ms"] = medians[i];
  }
}

}  // namespace

int run_pipeline(const std::vector<std::string>& args) {
  std::string model_path;
  std::string config_path;
  std::string output_path;
  std::string json_path;
  std::string input_shape_text;
  std::string data = host::kDefaultDataDir;
  std::string test_path;
  bool no_accuracy = false;
  host::TrainOptions train_options;
  CommonOptions common;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model to compress")
      ("config", po::value(&config_path)->required(),
       "JSON file {\"stages\": [{\"compress\": {...config...}, \"epochs\": N}, {\"speedup\": {}}, "
       "{\"compress\": {...}, \"calibration_batches\": N, \"fold_batchnorm\": true, "
       "\"recalibrate_bn\": N}, "
       "{\"convert\": {}, \"engine\": \"auto\"}]}")
      ("output", po::value(&output_path)->required(), "the final model to write")
      ("input-shape", po::value(&input_shape_text)->required(),
       "input shape for speedup, FLOPs and latency, batch first, e.g. 1,1,28,28")
      ("json", po::value(&json_path), "also write the per-stage report as JSON")
      ("no-accuracy", po::bool_switch(&no_accuracy),
       "do not evaluate each stage's model on the test data");
  std::string teacher_path;
  add_training_options(desc, train_options, data, test_path, teacher_path);
  add_common_options(desc, common);
  po::variables_map given;
  if (!parse_verb_args(
          "pipeline",
          "--model M.pt --config PIPELINE.json --input-shape 1,1,28,28 --output OUT.pt "
          "[--json REPORT.json] [--teacher T.pt]",
          args, desc, nullptr, &given)) {
    return 0;
  }
  host::check_output_paths({{"--model", model_path},
                            {"--config", config_path},
                            {"--data", data},
                            {"--test-data", test_path},
                            {"--teacher", teacher_path}},
                           {{"--output", output_path}, {"--json", json_path}});
  const std::unique_ptr<host::Model> teacher = load_teacher(teacher_path, given, train_options);
  const std::vector<int64_t> shape = parse_input_shape(input_shape_text);
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader);
  const std::vector<Stage> stages =
      parse_stages(host::read_json_document(config_path), config_path, registry);
  host::validate_train_options([&] {
    host::TrainOptions o = train_options;
    o.epochs = 1;
    return o;
  }());

  // Both outputs are staged first: an unwritable place fails before any work.
  host::StagedFile staged_model(output_path, "--output");
  std::optional<host::StagedFile> staged_json;
  if (!json_path.empty()) {
    staged_json.emplace(json_path, "--json");
  }
  const WorkFolder work(output_path);
  std::optional<host::Dataset> test;
  if (!no_accuracy) {
    test = host::load_test_dataset(data, test_path);
  }

  json report = {{"model", model_path},
                 {"config", config_path},
                 {"input_shape", shape},
                 {"stages", json::array()}};
  // Every stage's model stays loaded until all are timed together.
  std::vector<torch::jit::Module> stage_models = {host::load_torchscript_module(model_path)};
  report["stages"].push_back(measure("input", model_path, stage_models.back(), shape, test,
                                     train_options.batch_size));
  fs::path current = model_path;
  fs::path masks;
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& stage = stages[i];
    const fs::path next = work.file("stage" + std::to_string(i) + ".pt");
    std::string label;
    // What the stage reports is prefixed with the stage: the config's rules that need the model
    // (a layer name, a sparsity the algorithm refuses) are checked as the stage starts.
    try {
      if (stage.kind == StageKind::kCompress) {
        host::CompressionRequest request;
        request.model = host::ModelSource::file(current);
        request.config = stage.config;
        request.config_path = config_path;
        request.output = host::Output::to_file(next);
        if (!stage.quantizer) {
          masks = work.file("stage" + std::to_string(i) + ".masks.pth");
          request.masks = host::Output::to_file(masks);
        } else {
          request.calibration =
              host::Output::to_file(work.file("stage" + std::to_string(i) + ".calibration.json"));
        }
        request.data_path = data;
        request.test_data_path = test_path;
        request.calibration_batches = stage.calibration_batches;
        request.fold_batchnorm = stage.fold_batchnorm;
        request.recalibrate_bn_batches = stage.recalibrate_bn;
        request.fine_tune = stage.epochs > 0;
        request.train_options = train_options;
        request.train_options.epochs = stage.epochs > 0 ? stage.epochs : 1;
        request.train_options.progress = false;
        in_flags(compress_flags(), [&] { return host::run_compression(request, registry); });
        label = stage.config.algorithm;
      } else if (stage.kind == StageKind::kSpeedup) {
        torch::jit::Module module = host::load_torchscript_module(current);
        module.eval();
        const at::Tensor x = at::randn(shape, at::detail::createCPUGenerator(20261122));
        const host::SpeedupResult result =
            host::speedup_model(module, host::load_masks(masks), x, masks.string());
        LITHE_CHECK(result.explained(1e-4), sdk::Errc::kInternal, stage.where,
                    ": the smaller model differs from the masked one by ",
                    result.max_abs_diff_without_bn_shift,
                    " beyond the BatchNorm shift; nothing was written. This is a Lithe bug: "
                    "please report it with the model");
        result.module->save(next.string());
        label = "speedup";
      } else {
        torch::jit::Module module = host::load_torchscript_module(current);
        host::Int8ConvertOptions options;
        options.engine = stage.engine;
        host::Int8ConvertReport convert_report;
        torch::jit::Module int8 = host::convert_to_int8(module, options, &convert_report);
        host::write_file(next, host::serialize_int8_model(int8, convert_report.engine));
        label = std::string("convert (") + host::quantized_engine_name(convert_report.engine) +
                ", " + std::to_string(convert_report.int8_layers.size()) + " int8 layers, " +
                std::to_string(convert_report.float_layers.size()) + " float)";
      }
    } catch (const sdk::Error& e) {
      const std::string at = stage.where + (stage.kind == StageKind::kCompress ? "/compress" : "");
      throw sdk::Error(e.code(), config_path + ": " + at + ": " + e.what());
    }
    current = next;
    stage_models.push_back(host::load_torchscript_module(current));
    json row = measure(label, current, stage_models.back(), shape, test,
                       train_options.batch_size);
    if (stage.kind == StageKind::kConvert) {
      // The FLOPs counter knows float ops; the int8 kernels do the quantized model's MACs.
      row["flops"] = report["stages"].back()["flops"];
      row["flops_note"] = "the quantized model's, computed by int8 kernels";
    }
    report["stages"].push_back(std::move(row));
  }
  time_stages(report["stages"], stage_models, shape);

  std::printf("%-40s %12s %14s %12s %12s %9s\n", "stage", "float params", "FLOPs", "file bytes",
              "latency ms", "accuracy");
  for (const json& row : report["stages"]) {
    std::printf("%-40s %12lld %14s %12lld %12.3f %9s\n", row["stage"].get<std::string>().c_str(),
                static_cast<long long>(row["float_parameters"].get<int64_t>()),
                row["flops"].is_null() ? "-" : std::to_string(row["flops"].get<int64_t>()).c_str(),
                static_cast<long long>(row["file_bytes"].get<int64_t>()),
                row["latency_ms"].get<double>(),
                row.contains("accuracy")
                    ? (std::to_string(row["accuracy"].get<double>()).substr(0, 6)).c_str()
                    : "-");
  }
  staged_model.write(host::read_file(current));
  if (staged_json) {
    staged_json->write(report.dump(1) + "\n");
  }
  staged_model.commit();
  if (staged_json) {
    staged_json->commit();
  }
  std::printf("\nwrote %s\n", output_path.c_str());
  return 0;
}

}  // namespace lithe::cli
