#include "search_quantization.h"

#include <filesystem>

#include "lithe/sdk/error.h"


namespace lithe::cli {

const FlagWords& search_quantization_flags() {
  static const FlagWords words = [] {
    FlagWords w = compress_flags();
    w["config_path"] = "--quantize";
    w["output"] = "--quantized-output";
    w["calibration"] = "the calibration file of --quantized-output";
    w["calibration_batches"] = "--quantize-calibration-batches";
    w["fine_tune"] = "--quantize-epochs";
    w["model"] = "the searched model";
    return w;
  }();
  return words;
}

void add_search_quantization_options(po::options_description& desc, SearchQuantization& q) {
  desc.add_options()
      ("quantize", po::value(&q.config_path),
       "then quantize the best model with this quantizer config (a lithe compress --config "
       "file, e.g. ptq or qat), before anything is written")
      ("quantized-output", po::value(&q.output_path),
       "with --quantize: the quantized model (default: OUTPUT with extension .quantized.pt); "
       "its calibration JSON goes beside it")
      ("quantize-calibration-batches",
       po::value(&q.calibration_batches)->default_value(q.calibration_batches),
       "with --quantize: batches of --data that calibrate the quantizer (post-training "
       "quantization)")
      ("quantize-epochs", po::value(&q.epochs)->default_value(q.epochs),
       "with --quantize: epochs of quantization-aware training (the search's --lr, ...)")
      ("fold-batchnorm", po::bool_switch(&q.fold_batchnorm),
       "with --quantize: fold every BatchNorm2d into the convolution before it first (the "
       "default, as lithe compress)")
      ("no-fold-batchnorm", po::bool_switch(&q.keep_batchnorm),
       "with --quantize: keep BatchNorm layers as they are (as lithe compress "
       "--no-fold-batchnorm)")
      ("convert", po::value(&q.int8_path),
       "with --quantize: also write the native int8 model (what lithe convert writes)");
}

std::vector<host::NamedPath> check_search_quantization(
    SearchQuantization& q, const po::variables_map& given, const std::string& search_output) {
  if (q.config_path.empty()) {
    for (const char* option : {"quantized-output", "quantize-calibration-batches",
                               "quantize-epochs", "fold-batchnorm", "no-fold-batchnorm",
                               "convert"}) {
      LITHE_CHECK(given.count(option) == 0 || given[option].defaulted(),
                  sdk::Errc::kInvalidConfig, "--", option, " has no effect without --quantize");
    }
    return {};
  }
  LITHE_CHECK(q.calibration_batches >= 0, sdk::Errc::kInvalidConfig,
              "--quantize-calibration-batches must be >= 0, got ", q.calibration_batches);
  LITHE_CHECK(q.epochs >= 0, sdk::Errc::kInvalidConfig, "--quantize-epochs must be >= 0, got ",
              q.epochs);
  LITHE_CHECK(!(q.fold_batchnorm && q.keep_batchnorm), sdk::Errc::kInvalidConfig,
              "--fold-batchnorm and --no-fold-batchnorm: give one of them");
  if (q.output_path.empty()) {
    q.output_path = std::filesystem::path(search_output).replace_extension(".quantized.pt");
  }
  q.config = host::read_compression_config(q.config_path);
  return {{"--quantized-output", q.output_path},
          {"the calibration file of --quantized-output",
           host::default_calibration_path(q.output_path).string()},
          {"--convert", q.int8_path}};
}

void check_search_quantizer(const SearchQuantization& q, const host::PluginRegistry& registry) {
  if (q.config_path.empty()) {
    return;
  }
  const bool pruner = registry.find(host::AlgorithmKind::kPruner, q.config.algorithm) != nullptr;
  LITHE_CHECK(registry.find(host::AlgorithmKind::kQuantizer, q.config.algorithm) != nullptr,
              sdk::Errc::kInvalidConfig, q.config_path, ": /algorithm: --quantize takes a "
              "quantizer, got '", q.config.algorithm, "'",
              pruner ? " (a pruner: the search prunes with --algorithm)" : " (not registered)");
}

host::CompressionRequest search_quantization_request(const SearchQuantization& q,
                                                     const std::string& model_path,
                                                     const std::string& data,
                                                     const std::string& test_data,
                                                     const host::TrainOptions& train) {
  host::CompressionRequest request;
  request.model = host::ModelSource::file(model_path);
  request.config = q.config;
  request.config_path = q.config_path;
  request.output = host::Output::to_file(q.output_path);
  request.calibration = host::Output::to_file(host::default_calibration_path(q.output_path));
  request.int8 = host::Output::to_file(q.int8_path);
  request.data_path = data;
  request.test_data_path = test_data;
  request.read_data_first = true;  // the accuracies before and after are measured on the same data
  request.calibration_batches = q.calibration_batches;
  if (q.fold_batchnorm || q.keep_batchnorm) {  // both at once is refused before the search
    request.fold_batchnorm = q.fold_batchnorm;
  }
  request.fine_tune = q.epochs > 0;
  request.train_options = train;
  request.train_options.epochs = q.epochs > 0 ? q.epochs : train.epochs;
  request.train_options.progress = false;
  return request;
}

}  // namespace lithe::cli
