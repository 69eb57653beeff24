#include "compress_report.h"

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "onnx_output.h"
#include "training_options.h"

namespace lithe::cli {
namespace {

using Json = nlohmann::ordered_json;

void print_pruning_table(const std::vector<host::LayerReport>& report) {
  std::printf("%-28s %-10s %12s %12s %10s %8s\n", "layer", "type", "params", "pruned",
              "sparsity", "target");
  int64_t total = 0;
  int64_t pruned = 0;
  for (const host::LayerReport& r : report) {
    const double achieved =
        r.weight_numel == 0 ? 0.0 : static_cast<double>(r.weight_zeros) / r.weight_numel;
    char target[32] = "-";
    if (r.sparsity_target >= 0) {
      std::snprintf(target, sizeof(target), "%.4f", r.sparsity_target);
    }
    std::printf("%-28s %-10s %12lld %12lld %10.4f %8s\n", r.name.c_str(), r.op_type.c_str(),
                static_cast<long long>(r.weight_numel), static_cast<long long>(r.weight_zeros),
                achieved, target);
    total += r.weight_numel;
    pruned += r.weight_zeros;
  }
  std::printf("%-28s %-10s %12lld %12lld %10.4f\n", "total", "", static_cast<long long>(total),
              static_cast<long long>(pruned),
              total == 0 ? 0.0 : static_cast<double>(pruned) / static_cast<double>(total));
}

// "scale=0.0123 zero_point=64 ..." for a state list, numbers of one element only.
std::string state_text(const host::QuantTypeReport& t) {
  std::string out;
  for (const auto& [key, values] : t.state) {
    if (values.size() != 1) {
      continue;
    }
    char number[64];
    std::snprintf(number, sizeof(number), "%.6g", values[0]);
    out += (out.empty() ? "" : " ") + key + "=" + number;
  }
  return out.empty() ? "-" : out;
}

void print_quantization_table(const std::vector<host::QuantLayerReport>& report) {
  std::printf("%-24s %-10s %-7s %5s  %s\n", "layer", "type", "tensor", "bits", "state");
  for (const host::QuantLayerReport& r : report) {
    for (const host::QuantTypeReport& t : r.types) {
      std::printf("%-24s %-10s %-7s %5lld  %s\n", r.name.c_str(), r.op_type.c_str(),
                  sdk::quant_type_name(t.type), static_cast<long long>(t.bits),
                  state_text(t).c_str());
    }
  }
}

}  // namespace

Json compress_result_json(const host::CompressionRequest& request,
                          const host::CompressionResult& result) {
  const bool quantizer = result.kind == host::AlgorithmKind::kQuantizer;
  Json out;
  out["algorithm"] = request.config.algorithm;
  out["model"] = request.model.label();
  out["output"] = request.output.file.string();
  out["device"] = request.device.str();
  if (quantizer) {
    out["calibration"] = result.calibration_path.string();
    if (result.folded_batchnorm) {
      Json folded = Json::array();
      for (const host::FoldedBatchNorm& f : result.batchnorm_folding.folded) {
        folded.push_back({{"batchnorm", f.batchnorm}, {"into", f.convolution}});
      }
      Json kept = Json::array();
      for (const host::UnfoldedBatchNorm& k : result.batchnorm_folding.kept) {
        kept.push_back({{"batchnorm", k.batchnorm}, {"reason", k.reason}});
      }
      out["batchnorm_folding"] = {{"folded", folded}, {"kept", kept}};
    }
  } else {
    out["masks"] = request.masks.file.empty() ? Json() : Json(request.masks.file.string());
  }
  out["onnx"] = result.onnx ? onnx_summary_json(request.onnx.file.string(), request.onnx_export.opset,
                                                *result.onnx)
                            : Json();
  if (quantizer) {
    out["layers"] = Json::parse(result.calibration_json)["layers"];
  } else {
    out["layers"] = Json::array();
    for (const host::LayerReport& r : result.pruning) {
      out["layers"].push_back(
          {{"name", r.name},
           {"type", r.op_type},
           {"params", r.weight_numel},
           {"pruned", r.weight_zeros},
           {"target", r.sparsity_target < 0 ? Json() : Json(r.sparsity_target)}});
    }
  }
  if (request.needs_data() || result.algorithm_training_epochs > 0 ||
      result.algorithm_evaluations > 0) {
    const bool has_test = result.before.has_value();
    out["algorithm_training_epochs"] = result.algorithm_training_epochs;
    out["algorithm_evaluations"] = result.algorithm_evaluations;
    out["accuracy_before"] = result.before ? eval_json(*result.before) : Json();
    out["accuracy_after"] = result.after ? eval_json(*result.after) : Json();
    out["epochs"] = Json::array();
    for (const host::EpochResult& r : result.epochs) {
      out["epochs"].push_back({{"epoch", r.epoch},
                               {"train_loss", r.train_loss},
                               {"seconds", r.seconds},
                               {"test", has_test ? eval_json(r.test) : Json()}});
    }
  }
  if (result.batchnorm_recalibration) {
    const host::BatchNormRecalibration& r = *result.batchnorm_recalibration;
    out["batchnorm_recalibration"] = {
        {"batches", r.batches},
        {"samples", r.samples},
        {"layers", r.layers},
        {"not_reached", r.not_reached},
        {"accuracy", result.after_recalibration ? eval_json(*result.after_recalibration) : Json()}};
  }
  if (result.int8) {
    const host::Int8ConvertReport& r = *result.int8;
    Json float_layers = Json::array();
    for (const host::FloatLayer& layer : r.float_layers) {
      float_layers.push_back({{"layer", layer.name}, {"reason", layer.reason}});
    }
    out["int8"] = {{"output", request.int8.file.string()},
                   {"engine", host::quantized_engine_name(r.engine)},
                   {"int8_layers", r.int8_layers.size()},
                   {"inputs_from_ranges", r.inputs_from_ranges},
                   {"float_layers", float_layers},
                   {"accuracy", result.int8_accuracy ? eval_json(*result.int8_accuracy) : Json()}};
  }
  out["seconds"] = {{"load", result.load_seconds},
                    {"compress", result.compress_seconds},
                    {"algorithm", result.algorithm_seconds},
                    {"save", result.save_seconds}};
  return out;
}

void print_compress_result(const host::CompressionRequest& request,
                           const host::CompressionResult& result, const std::string& input_shape,
                           bool json) {
  if (json) {
    std::cout << compress_result_json(request, result).dump(2) << "\n";
    return;
  }
  const bool quantizer = result.kind == host::AlgorithmKind::kQuantizer;
  const size_t epochs = result.epochs.size();
  const char* plural = epochs == 1 ? "" : "s";
  if (quantizer) {
    if (result.folded_batchnorm) {
      std::printf("BatchNorm folded: %zu into the convolution before them\n",
                  result.batchnorm_folding.folded.size());
      for (const host::UnfoldedBatchNorm& k : result.batchnorm_folding.kept) {
        std::printf("  kept %s: %s\n", k.batchnorm.c_str(), k.reason.c_str());
      }
    }
    print_quantization_table(result.quantization);
    if (result.before && result.after) {
      std::printf("\ntest accuracy: %.4f float, %.4f quantized", result.before->accuracy,
                  result.after->accuracy);
      if (epochs > 0) {
        std::printf(" after %zu epoch%s of quantization-aware training", epochs, plural);
      }
      std::printf("\n");
    }
    std::printf("\nwrote %s and %s\n", request.output.file.c_str(),
                result.calibration_path.c_str());
  } else {
    print_pruning_table(result.pruning);
    if (result.algorithm_training_epochs > 0) {
      std::printf("\n%s trained %lld epoch%s while compressing\n", request.config.algorithm.c_str(),
                  static_cast<long long>(result.algorithm_training_epochs),
                  result.algorithm_training_epochs == 1 ? "" : "s");
    }
    if (result.algorithm_evaluations > 0) {
      std::printf("%s%s evaluated the model %lld time%s while compressing\n",
                  result.algorithm_training_epochs > 0 ? "" : "\n",
                  request.config.algorithm.c_str(),
                  static_cast<long long>(result.algorithm_evaluations),
                  result.algorithm_evaluations == 1 ? "" : "s");
    }
    if (result.before && result.after && epochs == 0) {
      std::printf("\ntest accuracy: %.4f before, %.4f after pruning (no fine-tuning)\n",
                  result.before->accuracy, result.after->accuracy);
    } else if (result.before && result.after) {
      std::printf("\ntest accuracy: %.4f before, %.4f after %zu epoch%s of fine-tuning\n",
                  result.before->accuracy, result.after->accuracy, epochs, plural);
    }
    std::printf("\nwrote %s%s%s\n", request.output.file.c_str(),
                request.masks.file.empty() ? "" : " and ", request.masks.file.c_str());
  }
  if (result.batchnorm_recalibration) {
    const host::BatchNormRecalibration& r = *result.batchnorm_recalibration;
    std::printf("BatchNorm statistics re-estimated on %lld batches (%lld samples): %zu layers",
                static_cast<long long>(r.batches), static_cast<long long>(r.samples),
                r.layers.size());
    if (result.after_recalibration) {
      std::printf(", test accuracy %.4f right after", result.after_recalibration->accuracy);
    }
    std::printf("\n");
    for (const std::string& layer : r.not_reached) {
      std::printf("  not reached by the data, kept: %s\n", layer.c_str());
    }
  }
  if (result.int8) {
    const host::Int8ConvertReport& r = *result.int8;
    std::printf("int8 model %s (engine %s): %zu int8 layers, %zu in float", request.int8.file.c_str(),
                host::quantized_engine_name(r.engine), r.int8_layers.size(), r.float_layers.size());
    if (result.int8_accuracy) {
      std::printf(", test accuracy %.4f", result.int8_accuracy->accuracy);
    }
    std::printf("\n");
    for (const host::FloatLayer& layer : r.float_layers) {
      std::printf("  %s runs its fake quantization in float: %s\n", layer.name.c_str(),
                  layer.reason.c_str());
    }
  }
  if (result.onnx) {
    print_onnx_summary(request.onnx.file.string(), request.onnx_export.opset, input_shape,
                       *result.onnx);
  }
  std::printf("time: load %.3f s, %s%s %.3f s, save %.3f s\n", result.load_seconds,
              quantizer ? "quantize" : "compress",
              request.fine_tune ? (quantizer ? " + train" : " + fine-tune") : "",
              result.compress_seconds, result.save_seconds);
}

}  // namespace lithe::cli
