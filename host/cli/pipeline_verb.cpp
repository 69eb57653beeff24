// `lithe pipeline`: several compression steps from one config file, in order (host::run_stages,
// the job embedders call): pruning and quantization jobs (what `lithe compress` runs), speedup
// of the pruned model, and native int8 conversion, with parameters, FLOPs, file size, latency
// and accuracy after every stage. Only the final model (and the report) is written; the stages'
// models pass from one stage to the next in memory.
#include <cstdio>
#include <string>
#include <vector>

#include "field_flags.h"
#include "input_shape.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/jobs/stages_job.h"
#include "lithe/sdk/error.h"
#include "training_options.h"
#include "verbs.h"

namespace lithe::cli {

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
  host::StagesRequest request;
  request.input_shape = parse_input_shape(input_shape_text);
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader);
  request.stages = host::read_stages(config_path, registry);
  request.stages_source = config_path;
  host::validate_train_options([&] {
    host::TrainOptions o = train_options;
    o.epochs = 1;
    return o;
  }());
  request.model = host::ModelSource::file(model_path);
  request.output = host::Output::to_file(output_path);
  request.report = host::Output::to_file(json_path);
  request.data_path = data;
  request.test_data_path = test_path;
  request.measure_accuracy = !no_accuracy;
  request.train_options = train_options;
  FlagWords flags = compress_flags();
  flags["report"] = "--json";
  flags["input_shape"] = "--input-shape";
  const host::StagesResult result =
      in_flags(flags, [&] { return host::run_stages(request, registry); });

  std::printf("%-40s %12s %14s %12s %12s %9s\n", "stage", "float params", "FLOPs", "file bytes",
              "latency ms", "accuracy");
  for (const host::StageRow& row : result.rows) {
    std::printf("%-40s %12lld %14s %12ju %12.3f %9s\n", row.stage.c_str(),
                static_cast<long long>(row.float_parameters),
                row.flops ? std::to_string(*row.flops).c_str() : "-", row.file_bytes,
                row.latency_ms,
                row.accuracy ? std::to_string(*row.accuracy).substr(0, 6).c_str() : "-");
  }
  std::printf("\nwrote %s\n", output_path.c_str());
  return 0;
}

}  // namespace lithe::cli
