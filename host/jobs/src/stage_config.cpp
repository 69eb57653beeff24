// The stage config of run_stages (`lithe pipeline --config`): parsed and checked before any
// stage runs.
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/io/json_document.h"
#include "lithe/host/jobs/stages_job.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad_stage(const std::string& file, const std::string& path, const std::string& what) {
  throw sdk::Error(sdk::Errc::kInvalidConfig, file + ": " + path + ": " + what);
}

int64_t stage_positive_int(const json& value, const std::string& file, const std::string& path) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1) {
    bad_stage(file, path, "must be an integer >= 1, got " + value.dump());
  }
  return value.get<int64_t>();
}

// Every rule that needs no model: keys, types, the order of stages.
std::vector<Stage> parse_stage_document(const json& doc, const std::string& file,
                                         const PluginRegistry& registry) {
  if (!doc.is_object()) {
    bad_stage(file, "/", "must be an object {\"stages\": [...]}, got " + doc.dump().substr(0, 80));
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "stages") {
      bad_stage(file, "/" + key, "unknown key (the only key is \"stages\")");
    }
  }
  if (!doc.contains("stages") || !doc["stages"].is_array() || doc["stages"].empty()) {
    bad_stage(file, "/stages", "must be a non-empty list of stages");
  }
  std::vector<Stage> stages;
  bool pruned = false;     // a pruner ran and its masks are not applied by a speedup yet
  bool quantized = false;  // a quantizer ran
  for (size_t i = 0; i < doc["stages"].size(); ++i) {
    const json& s = doc["stages"][i];
    const std::string at = "/stages/" + std::to_string(i);
    if (!s.is_object()) {
      bad_stage(file, at, "must be an object with one of \"compress\", \"speedup\", \"convert\"");
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
      bad_stage(file, at,
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
        bad_stage(file, at + "/" + key, "unknown key for this stage");
      }
    }
    if (stage.kind == StageKind::kCompress) {
      if (!s["compress"].is_object()) {
        bad_stage(file, at + "/compress", "must be a compression config object {\"algorithm\": ...}");
      }
      stage.config =
          parse_compression_config(s["compress"].dump(), file + " " + at + "/compress");
      stage.quantizer =
          registry.find(AlgorithmKind::kQuantizer, stage.config.algorithm) != nullptr;
      if (s.contains("epochs")) {
        stage.epochs = stage_positive_int(s["epochs"], file, at + "/epochs");
      }
      if (s.contains("calibration_batches")) {
        stage.calibration_batches =
            stage_positive_int(s["calibration_batches"], file, at + "/calibration_batches");
      }
      if (s.contains("recalibrate_bn")) {
        stage.recalibrate_bn = stage_positive_int(s["recalibrate_bn"], file, at + "/recalibrate_bn");
      }
      if (s.contains("fold_batchnorm")) {
        if (!s["fold_batchnorm"].is_boolean()) {
          bad_stage(file, at + "/fold_batchnorm",
              "must be true or false, got " + s["fold_batchnorm"].dump());
        }
        stage.fold_batchnorm = s["fold_batchnorm"].get<bool>();
      }
      if (pruned && !stage.quantizer) {
        bad_stage(file, at,
            "a second pruner before the first one's speedup: put a \"speedup\" stage "
            "between them");
      }
      if (pruned && stage.quantizer) {
        bad_stage(file, at,
            "a quantizer after a pruner needs the pruned model made smaller first: "
            "put a \"speedup\" stage before it");
      }
      pruned = !stage.quantizer;
      quantized = quantized || stage.quantizer;
    } else if (stage.kind == StageKind::kSpeedup) {
      if (!s["speedup"].is_object() || !s["speedup"].empty()) {
        bad_stage(file, at + "/speedup", "must be {} (speedup takes no options here)");
      }
      if (!pruned) {
        bad_stage(file, at, "speedup needs a pruning stage (its masks) right before it");
      }
      pruned = false;
    } else {
      if (!s["convert"].is_object() || !s["convert"].empty()) {
        bad_stage(file, at + "/convert", "must be {} (its option is \"engine\" beside it)");
      }
      if (s.contains("engine")) {
        if (!s["engine"].is_string()) {
          bad_stage(file, at + "/engine", "must be a string, got " + s["engine"].dump());
        }
        stage.engine = parse_quantized_engine(s["engine"].get<std::string>(),
                                                    file + ": " + at + "/engine");
      }
      if (!quantized) {
        bad_stage(file, at, "convert needs a quantization stage before it");
      }
      if (i + 1 != doc["stages"].size()) {
        bad_stage(file, at, "convert must be the last stage (an int8 model is not compressed further)");
      }
    }
    stages.push_back(std::move(stage));
  }
  return stages;
}

}  // namespace

std::vector<Stage> parse_stages(const std::string& json_text, const std::string& source,
                                const PluginRegistry& registry) {
  return parse_stage_document(parse_json_document(json_text, source), source, registry);
}

std::vector<Stage> read_stages(const std::filesystem::path& path, const PluginRegistry& registry) {
  return parse_stage_document(read_json_document(path), path.string(), registry);
}

}  // namespace lithe::host
