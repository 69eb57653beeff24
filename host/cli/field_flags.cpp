#include "field_flags.h"

namespace lithe::cli {

const FlagWords& compress_flags() {
  static const FlagWords words = {
      {"model", "--model"},
      {"config_path", "--config"},
      {"output", "--output"},
      {"masks", "--masks"},
      {"calibration", "--calibration"},
      {"onnx", "--onnx"},
      {"onnx_export.opset", "--onnx-opset"},
      {"data_path", "--data"},
      {"test_data_path", "--test-data"},
      {"calibration_batches", "--calibration-batches"},
      {"fold_batchnorm", "--fold-batchnorm"},
      {"recalibrate_bn_batches", "--recalibrate-bn"},
      {"int8", "--convert"},
      {"fine_tune", "--epochs"},
  };
  return words;
}

host::FieldWords field_words(const FlagWords& words) {
  return [&words](const std::string& name) {
    const auto it = words.find(name);
    return it == words.end() ? std::string() : it->second;
  };
}

}  // namespace lithe::cli
