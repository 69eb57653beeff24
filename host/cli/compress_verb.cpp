// `lithe compress` and `lithe apply`.
#include <chrono>
#include <future>
#include <optional>
#include <cstdio>
#include <iostream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/model/apply_compression_results.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/model/model.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/sdk/error.h"
#include "lithe/host/train/trainer.h"
#include "training_options.h"
#include "compress_request.h"
#include "quantize_compress.h"
#include "rank_run.h"
#include "verbs.h"

namespace lithe::cli {
namespace {

using Clock = std::chrono::steady_clock;


void print_table(const std::vector<host::LayerReport>& report) {
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

int64_t pruned_weights(const std::vector<host::LayerReport>& report) {
  int64_t pruned = 0;
  for (const host::LayerReport& r : report) {
    pruned += r.weight_zeros;
  }
  return pruned;
}

}  // namespace

nlohmann::ordered_json eval_json(const host::EvalResult& r) {
  return {{"accuracy", r.accuracy}, {"loss", r.loss}, {"samples", r.samples}};
}

CompressData load_compress_data(const CompressRequest& request, host::Model& model) {
  CompressData out;
  if (request.needs_data()) {
    out.train = load_data(request.data, "train");
    host::check_dataset_fits_model(model, out.train);
    out.test = load_test_data(request.data, request.test_path);
    if (out.has_test()) {
      host::check_dataset_fits_model(model, out.test);
    }
  }
  return out;
}

std::string default_calibration_path(const std::string& output_path) {
  std::filesystem::path path(output_path);
  path.replace_extension(".calibration.json");
  return path.string();
}

int run_compress(const std::vector<std::string>& args) {
  CommonOptions common;
  CompressRequest request;
  request.data = host::kDefaultDataDir;
  host::TrainOptions& train_options = request.train_options;
  constexpr int64_t kNoEpochs = std::numeric_limits<int64_t>::min();
  train_options.epochs = kNoEpochs;  // no fine-tuning unless asked for
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&request.model_path)->required(), "TorchScript model to compress")
      ("config", po::value(&request.config_path)->required(),
       "JSON file {\"algorithm\": ..., \"config_list\": [...], \"options\": {...}}")
      ("output", po::value(&request.output_path)->required(),
       "compressed TorchScript model to write")
      ("masks", po::value(&request.masks_path),
       "pruners: also write the masks (NNI mask.pth layout)")
      ("calibration", po::value(&request.calibration_path),
       "quantizers: where to write the per-layer calibration JSON (bits, scale, zero point, "
       "ranges per quant type); default: OUTPUT with extension .calibration.json")
      ("epochs", po::value(&train_options.epochs),
       "fine-tune for N > 0 epochs while compressing (schedules such as agp and "
       "lottery_ticket, data-driven pruners and quantization-aware training need them); "
       "without it: one-shot, no data")
      ("calibration-batches", po::value(&request.calibration_batches),
       "before any fine-tuning, run N batches of --data without changing the weights. Pruners: "
       "forward and backward, then prune (one-shot data-driven pruning: apoz, mean_activation, "
       "taylor_fo; their statistics_batch_num must not exceed N). Quantizers: forward only, "
       "to track activation ranges (post-training calibration)")
      ("onnx", po::value(&request.onnx.path),
       "also write the compressed model as ONNX (NNI's onnx_path): pruned weights as they are, "
       "quantized models in QDQ form with the learned scales and zero points; needs "
       "--input-shape")
      ("input-shape", po::value(&request.onnx.input_shape),
       "with --onnx: the exported input's static shape, batch first, e.g. 1,1,28,28")
      ("onnx-opset", po::value(&request.onnx.opset)->default_value(13),
       "with --onnx: ONNX opset, 13..17")
      ("json", po::bool_switch(&request.json), "print a JSON summary instead of the table");
  add_training_options(desc, train_options, request.data, request.test_path);
  add_common_options(desc, common);
  po::variables_map given;
  if (!parse_verb_args("compress",
                       "--model M.pt --config C.json --output OUT.pt [--masks MASKS.pt] "
                       "[--calibration CAL.json] [--calibration-batches N] [--epochs N] "
                       "[--data DIR|FILE] [--onnx OUT.onnx --input-shape 1,1,28,28]",
                       args, desc, nullptr, &given)) {
    return 0;
  }
  request.fine_tune = train_options.epochs != kNoEpochs;
  // Before any work: no output may replace an input, another output or a special file.
  host::check_output_paths(
      request.inputs(),
      {{"--output", request.output_path},
       {"--masks", request.masks_path},
       {"--calibration", request.calibration_path},
       {"--onnx", request.onnx.path}});
  LITHE_CHECK(request.onnx.wanted() || given.count("onnx-opset") == 0 ||
                  given["onnx-opset"].defaulted(),
              sdk::Errc::kInvalidConfig, "--onnx-opset has no effect without --onnx");
  check_onnx_request(request.onnx);
  if (request.fine_tune) {
    host::validate_train_options(train_options);  // epochs <= 0, lr, ... fail before any work
  }
  LITHE_CHECK(given.count("calibration-batches") == 0 || request.calibration_batches > 0,
              sdk::Errc::kInvalidConfig, "--calibration-batches must be > 0, got ",
              request.calibration_batches);
  if (!request.fine_tune) {
    // Calibration reads the data and the batch size only; without it nothing is read.
    static const std::set<std::string> used_by_calibration = {"data", "test-data", "batch-size"};
    for (const std::string& name : training_option_names()) {
      const bool used = request.needs_data() && used_by_calibration.count(name) != 0;
      LITHE_CHECK(used || given.count(name) == 0 || given[name].defaulted(),
                  sdk::Errc::kInvalidConfig, "--", name, " has no effect without --epochs",
                  request.needs_data() ? "" : " or --calibration-batches");
    }
    LITHE_CHECK(train_options.batch_size > 0, sdk::Errc::kInvalidConfig,
                "batch size must be > 0, got ", train_options.batch_size);
  }
  const host::CompressionConfig config = host::read_compression_config(request.config_path);
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader);
  // Data parallel when started once per rank (torchrun, lithe launch): only rank 0 writes.
  const RankRun ranks;
  request.train_options.process_group = ranks.group();
  if (registry.find(host::AlgorithmKind::kQuantizer, config.algorithm) != nullptr) {
    LITHE_CHECK(request.masks_path.empty(), sdk::Errc::kInvalidConfig, "--masks: '",
                config.algorithm, "' is a quantizer, which computes no masks");
    return compress_with_quantizer(request, config, registry, ranks);
  }
  LITHE_CHECK(request.calibration_path.empty(), sdk::Errc::kInvalidConfig, "--calibration: '",
              config.algorithm, "' is not a quantizer, so there is no calibration to write");
  const std::string& output_path = request.output_path;
  const std::string& masks_path = request.masks_path;
  const bool json = request.json;
  const int64_t calibration_batches = request.calibration_batches;
  const bool fine_tune = request.fine_tune;
  const bool needs_data = request.needs_data();
  const auto start = Clock::now();
  // Staged first: a bad output directory fails before any work. Both files are written under
  // temporary names and only renamed into place once both succeeded.
  host::StagedFile model_file(output_path, "--output");
  std::optional<host::StagedFile> masks_file;
  if (!masks_path.empty()) {
    masks_file.emplace(masks_path, "--masks");
  }
  std::optional<host::StagedFile> onnx_file;
  if (request.onnx.wanted()) {
    onnx_file.emplace(request.onnx.path, "--onnx");
  }
  const auto model = host::load_torchscript_model(request.model_path);
  // The whole config is validated here, before any dataset is read.
  host::PruningSession session(*model, registry, config);
  if (onnx_file) {
    // A model the export cannot express fails now, not after the fine-tuning (masks do not
    // change which ops it has); the file is written again from the result.
    check_exportable(request.model_path, request.onnx);
  }
  CompressData data = load_compress_data(request, *model);
  const host::Dataset& train_data = data.train;
  const host::Dataset& test_data = data.test;
  const bool has_test = data.has_test();
  const double load_seconds = seconds_since(start);
  const auto prune_start = Clock::now();
  std::optional<host::EvalResult> before;
  if (has_test) {
    before = host::evaluate(*model, test_data, train_options.eval_batch_size);
  }
  session.compress();
  if (calibration_batches > 0) {
    host::calibrate(*model, train_data, session, calibration_batches, train_options.batch_size);
  }
  std::vector<host::EpochResult> epochs;
  if (fine_tune) {
    train_options.progress = !json && ranks.writer();
    epochs = host::train(*model, train_data, has_test ? &test_data : nullptr, train_options,
                         &session);
  }
  std::optional<host::EvalResult> after;
  if (has_test) {
    after = epochs.empty() ? host::evaluate(*model, test_data, train_options.eval_batch_size)
                           : epochs.back().test;
  }
  const double prune_seconds = seconds_since(prune_start);
  const std::vector<host::LayerReport> report = session.report();
  if (!needs_data && pruned_weights(report) == 0) {
    std::fprintf(stderr,
                 "lithe compress: note: '%s' pruned nothing without data; schedules need "
                 "--epochs N, data-driven pruners --calibration-batches N or --epochs N\n",
                 config.algorithm.c_str());
  }

  const auto save_start = Clock::now();
  host::OnnxExportSummary onnx_summary;
  if (ranks.writer()) {
    std::future<void> masks_written;  // the masks are written on a second thread
    if (masks_file) {
      masks_written = std::async(std::launch::async, [&] {
        masks_file->write(host::serialize_masks(session.masks()));
      });
    }
    model_file.write(model->serialize());
    if (onnx_file) {
      onnx_summary = export_saved_model(model_file.temp_path(), request.onnx, *onnx_file);
    }
    if (masks_written.valid()) {
      masks_written.get();
    }
    ranks.commit({&model_file, masks_file ? &*masks_file : nullptr,
                  onnx_file ? &*onnx_file : nullptr});
  }
  const double save_seconds = seconds_since(save_start);

  if (json) {
    nlohmann::ordered_json out;
    out["algorithm"] = config.algorithm;
    out["model"] = request.model_path;
    out["output"] = output_path;
    out["masks"] = masks_path.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(masks_path);
    out["onnx"] = request.onnx.wanted()
                      ? onnx_summary_json(request.onnx.path, request.onnx.opset, onnx_summary)
                      : nlohmann::ordered_json();
    out["layers"] = nlohmann::ordered_json::array();
    for (const host::LayerReport& r : report) {
      out["layers"].push_back({{"name", r.name},
                               {"type", r.op_type},
                               {"params", r.weight_numel},
                               {"pruned", r.weight_zeros},
                               {"target", r.sparsity_target < 0 ? nlohmann::ordered_json()
                                                                : nlohmann::ordered_json(r.sparsity_target)}});
    }
    if (needs_data) {
      out["accuracy_before"] = before ? eval_json(*before) : nlohmann::ordered_json();
      out["accuracy_after"] = after ? eval_json(*after) : nlohmann::ordered_json();
      out["epochs"] = nlohmann::ordered_json::array();
      for (const host::EpochResult& r : epochs) {
        out["epochs"].push_back({{"epoch", r.epoch},
                                 {"train_loss", r.train_loss},
                                 {"seconds", r.seconds},
                                 {"test", has_test ? eval_json(r.test) : nlohmann::ordered_json()}});
      }
    }
    out["seconds"] = {{"load", load_seconds}, {"compress", prune_seconds}, {"save", save_seconds}};
    std::cout << out.dump(2) << "\n";
  } else {
    print_table(report);
    if (before && after && epochs.empty()) {
      std::printf("\ntest accuracy: %.4f before, %.4f after pruning (no fine-tuning)\n",
                  before->accuracy, after->accuracy);
    } else if (before && after) {
      std::printf("\ntest accuracy: %.4f before, %.4f after %lld epoch%s of fine-tuning\n",
                  before->accuracy, after->accuracy, static_cast<long long>(epochs.size()),
                  epochs.size() == 1 ? "" : "s");
    }
    std::printf("\nwrote %s%s%s\n", output_path.c_str(), masks_path.empty() ? "" : " and ",
                masks_path.c_str());
    if (request.onnx.wanted()) {
      print_onnx_summary(request.onnx.path, request.onnx.opset, request.onnx.input_shape,
                         onnx_summary);
    }
    std::printf("time: load %.3f s, compress%s %.3f s, save %.3f s\n", load_seconds,
                fine_tune ? " + fine-tune" : "", prune_seconds, save_seconds);
  }
  return 0;
}

int run_apply(const std::vector<std::string>& args) {
  std::string model_path;
  std::string masks_path;
  std::string output_path;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model")
      ("masks", po::value(&masks_path)->required(), "mask file (NNI mask.pth layout)")
      ("output", po::value(&output_path)->required(), "masked TorchScript model to write");
  if (!parse_verb_args("apply", "--model M.pt --masks MASKS.pt --output OUT.pt", args, desc)) {
    return 0;
  }
  host::check_output_paths({{"--model", model_path}, {"--masks", masks_path}},
                           {{"--output", output_path}});
  host::StagedFile output(output_path, "--output");
  const auto model = host::load_torchscript_model(model_path);
  const host::NamedMasks masks = host::load_masks(masks_path);
  host::apply_compression_results(*model, masks, masks_path);
  output.write(model->serialize());
  output.commit();
  std::printf("applied masks of %d layers from %s; wrote %s\n", static_cast<int>(masks.size()),
              masks_path.c_str(), output_path.c_str());
  return 0;
}

}  // namespace lithe::cli
