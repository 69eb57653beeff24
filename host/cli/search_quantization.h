#pragma once
// `lithe search --quantize Q.json`: the best model found, quantized (and converted to int8)
// before anything is written. The quantization is one lithe compress job on the staged best
// model, so its options, checks and outputs are those of `lithe compress --config Q.json`.

#include <cstdint>
#include <string>
#include <vector>

#include "lithe/host/io/output_paths.h"
#include "field_flags.h"
#include "lithe/host/jobs/compression_job.h"
#include "verbs.h"

namespace lithe::cli {

struct SearchQuantization {
  std::string config_path;          ///< --quantize: a quantizer's config ("" = none)
  std::string output_path;          ///< --quantized-output (default OUTPUT.quantized.pt)
  std::string int8_path;            ///< --convert: the native int8 model ("" = none)
  int64_t calibration_batches = 0;  ///< --quantize-calibration-batches
  int64_t epochs = 0;               ///< --quantize-epochs (quantization-aware training)
  bool fold_batchnorm = false;      ///< --fold-batchnorm (the default)
  bool keep_batchnorm = false;      ///< --no-fold-batchnorm
  host::CompressionConfig config;   ///< read by check()
};

/// Adds --quantize, --quantized-output, --quantize-calibration-batches, --quantize-epochs,
/// --fold-batchnorm and --convert, bound to `q`.
void add_search_quantization_options(po::options_description& desc, SearchQuantization& q);

/// Before any work: options that need --quantize without it, counts below 0, and the config
/// file (read and parsed). Fills the default output path from the search's `--output`. Returns
/// the outputs it will write, for check_output_paths.
std::vector<host::NamedPath> check_search_quantization(
    SearchQuantization& q, const po::variables_map& given, const std::string& search_output);

/// Once plugins are loaded, still before the search: the config names a quantizer.
void check_search_quantizer(const SearchQuantization& q, const host::PluginRegistry& registry);

/// The compress job quantizing the staged best model `model_path` with the search's data and
/// training options.
/// The words of `lithe search --quantize ...` for the quantization request's fields.
const FlagWords& search_quantization_flags();

host::CompressionRequest search_quantization_request(const SearchQuantization& q,
                                                     const std::string& model_path,
                                                     const std::string& data,
                                                     const std::string& test_data,
                                                     const host::TrainOptions& train);

}  // namespace lithe::cli
