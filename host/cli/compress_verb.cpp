// `lithe compress` and `lithe apply`. compress parses its options into one
// host::CompressionRequest, runs host::run_compression (the same job embedders call) and prints.
#include <cstdio>
#include <limits>
#include <set>

#include "compress_report.h"
#include "input_shape.h"
#include "lithe/host/io/device.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/model/apply_compression_results.h"
#include "lithe/host/model/model.h"
#include "lithe/host/pipeline/compression_job.h"
#include "lithe/sdk/error.h"
#include "onnx_output.h"
#include "rank_run.h"
#include "training_options.h"
#include "verbs.h"

namespace lithe::cli {

int run_compress(const std::vector<std::string>& args) {
  CommonOptions common;
  std::string model_path;
  std::string config_path;
  std::string output_path;
  std::string masks_path;
  std::string calibration_path;
  std::string data = host::kDefaultDataDir;
  std::string test_path;
  int64_t calibration_batches = 0;
  OnnxRequest onnx;
  bool json = false;
  bool fold_batchnorm = false;
  bool keep_batchnorm = false;
  bool allow_float_layers = false;
  int64_t recalibrate_bn = 0;
  std::string int8_path;
  std::string engine_name = "auto";
  std::string device_text = "cpu";
  host::TrainOptions train_options;
  constexpr int64_t kNoEpochs = std::numeric_limits<int64_t>::min();
  train_options.epochs = kNoEpochs;  // no fine-tuning unless asked for
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model to compress")
      ("config", po::value(&config_path)->required(),
       "JSON file {\"algorithm\": ..., \"config_list\": [...], \"options\": {...}}")
      ("output", po::value(&output_path)->required(), "compressed TorchScript model to write")
      ("masks", po::value(&masks_path), "pruners: also write the masks (NNI mask.pth layout)")
      ("calibration", po::value(&calibration_path),
       "quantizers: where to write the per-layer calibration JSON (bits, scale, zero point, "
       "ranges per quant type); default: OUTPUT with extension .calibration.json")
      ("epochs", po::value(&train_options.epochs),
       "fine-tune for N > 0 epochs while compressing (schedules such as agp and "
       "lottery_ticket, data-driven pruners and quantization-aware training need them); "
       "without it: one-shot, no data")
      ("calibration-batches", po::value(&calibration_batches),
       "before any fine-tuning, run N batches of --data without changing the weights. Pruners: "
       "forward and backward, then prune (one-shot data-driven pruning: apoz, mean_activation, "
       "taylor_fo; their statistics_batch_num must not exceed N). Quantizers: forward only, "
       "to track activation ranges (post-training calibration)")
      ("onnx", po::value(&onnx.path),
       "also write the compressed model as ONNX (NNI's onnx_path): pruned weights as they are, "
       "quantized models in QDQ form with the learned scales and zero points; needs "
       "--input-shape")
      ("input-shape", po::value(&onnx.input_shape),
       "with --onnx: the exported input's static shape, batch first, e.g. 1,1,28,28")
      ("onnx-opset", po::value(&onnx.opset)->default_value(13),
       "with --onnx: ONNX opset, 13..17")
      ("fold-batchnorm", po::bool_switch(&fold_batchnorm),
       "quantizers (the default for them): fold each BatchNorm2d into the Conv2d before it "
       "first, so output grids sit after the normalization, where int8 kernels write them "
       "(lithe convert); the model written is the folded one")
      ("no-fold-batchnorm", po::bool_switch(&keep_batchnorm),
       "quantizers: keep BatchNorm layers as they are (NNI v2.0's behaviour; output grids then "
       "sit before the normalization, and lithe convert cannot run those layers int8)")
      ("recalibrate-bn", po::value(&recalibrate_bn),
       "re-estimate every BatchNorm layer's running mean and variance on N batches of --data "
       "once the model is compressed (pruners: after --calibration-batches; quantizers: "
       "before it), before any fine-tuning; pruning changes what BatchNorm layers see")
      ("convert", po::value(&int8_path),
       "quantizers: also write the native int8 TorchScript model (what lithe convert writes)")
      ("allow-float-layers", po::bool_switch(&allow_float_layers),
       "with --convert: write the int8 model even when quantized layers must run in float "
       "(default: refuse before any work, naming them and the fix)")
      ("engine", po::value(&engine_name)->default_value("auto"),
       "with --convert: quantized engine, auto (= x86, libtorch 2.x's default: fbgemm and "
       "oneDNN), x86, fbgemm, onednn or qnnpack")
      ("device", po::value(&device_text)->default_value(device_text),
       "where the model computes while compressed (the algorithm, calibration, fine-tuning, "
       "evaluation): cpu, cuda or cuda:N; files are written with CPU tensors")
      ("json", po::bool_switch(&json), "print a JSON summary instead of the table");
  std::string teacher_path;
  add_training_options(desc, train_options, data, test_path, teacher_path);
  add_common_options(desc, common);
  po::variables_map given;
  if (!parse_verb_args("compress",
                       "--model M.pt --config C.json --output OUT.pt [--masks MASKS.pt] "
                       "[--calibration CAL.json] [--calibration-batches N] [--epochs N] "
                       "[--data DIR|FILE] [--recalibrate-bn N] [--onnx OUT.onnx --input-shape "
                       "1,1,28,28] [--convert INT8.pt]",
                       args, desc, nullptr, &given)) {
    return 0;
  }
  host::CompressionRequest request;
  request.model_path = model_path;
  request.config_path = config_path;
  request.output_path = output_path;
  request.masks_path = masks_path;
  request.calibration_path = calibration_path;
  request.onnx_path = onnx.path;
  request.data_path = data;
  request.test_data_path = test_path;
  request.data_given = (given.count("data") != 0 && !given["data"].defaulted()) ||
                       !test_path.empty();
  request.calibration_batches = calibration_batches;
  request.device = host::parse_device(device_text);
  LITHE_CHECK(!(fold_batchnorm && keep_batchnorm), sdk::Errc::kInvalidConfig,
              "--fold-batchnorm and --no-fold-batchnorm: give one of them");
  if (fold_batchnorm || keep_batchnorm) {
    request.fold_batchnorm = fold_batchnorm;
  }
  request.recalibrate_bn_batches = recalibrate_bn;
  request.int8_path = int8_path;
  LITHE_CHECK(!int8_path.empty() || !allow_float_layers, sdk::Errc::kInvalidConfig,
              "--allow-float-layers has no effect without --convert");
  request.int8_allow_float_layers = allow_float_layers;
  request.fine_tune = train_options.epochs != kNoEpochs;
  // Before any work (plugins, config): no output may replace an input, another output or a
  // special file, and options that would be ignored are errors. run_compression checks the
  // request again, with the default calibration file, once the algorithm's kind is known.
  host::check_output_paths({{"--model", model_path},
                            {"--config", config_path},
                            {"--data", data},
                            {"--test-data", test_path},
                            {"--teacher", teacher_path}},
                           {{"--output", output_path},
                            {"--masks", masks_path},
                            {"--calibration", calibration_path},
                            {"--onnx", onnx.path},
                            {"--convert", int8_path},
                            // Written beside --onnx when the weights exceed 2 GiB.
                            {"the external data file of --onnx",
                             onnx.wanted() ? host::onnx_external_data_path(onnx.path).string()
                                           : std::string()}});
  LITHE_CHECK(onnx.wanted() || given.count("onnx-opset") == 0 || given["onnx-opset"].defaulted(),
              sdk::Errc::kInvalidConfig, "--onnx-opset has no effect without --onnx");
  check_onnx_request(onnx);
  if (onnx.wanted()) {
    request.onnx = {parse_input_shape(onnx.input_shape), onnx.opset};
  }
  if (request.fine_tune) {
    host::validate_train_options(train_options);  // epochs <= 0, lr, ... fail before any work
  }
  LITHE_CHECK(given.count("recalibrate-bn") == 0 || recalibrate_bn > 0,
              sdk::Errc::kInvalidConfig, "--recalibrate-bn must be > 0, got ", recalibrate_bn);
  LITHE_CHECK(!int8_path.empty() || given.count("engine") == 0 || given["engine"].defaulted(),
              sdk::Errc::kInvalidConfig, "--engine has no effect without --convert");
  request.int8_engine = host::parse_quantized_engine(engine_name, "--engine");
  LITHE_CHECK(given.count("calibration-batches") == 0 || calibration_batches > 0,
              sdk::Errc::kInvalidConfig, "--calibration-batches must be > 0, got ",
              calibration_batches);
  if (!request.fine_tune) {
    // Calibration reads the data and the batch size only; without it nothing is read. An
    // algorithm that trains while compressing (SDK 1.7 fine_tune: admm, slim's sparse
    // training) uses all of them, one that evaluates the data: whether it did is known once
    // it compressed, so the job fails then, before writing anything, for an option unused.
    static const std::set<std::string> used_by_calibration = {"data", "test-data", "batch-size"};
    for (const std::string& name : training_option_names()) {
      const bool used = request.needs_data() && used_by_calibration.count(name) != 0;
      if (!used && given.count(name) != 0 && !given[name].defaulted()) {
        request.training_options_given_without_use.push_back(name);
      }
    }
    host::TrainOptions checked = train_options;
    checked.epochs = 1;  // what an algorithm's fine-tune would use, epochs aside
    host::validate_train_options(checked);
  }
  const std::unique_ptr<host::Model> teacher = load_teacher(teacher_path, given, train_options);
  if (teacher != nullptr) {
    teacher->to(request.device);
  }
  request.config = host::read_compression_config(config_path);
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(common, loader);
  // Data parallel when started once per rank (torchrun, lithe launch): only rank 0 writes.
  const RankRun ranks;
  ranks.require_cpu_for_ranks(request.device);
  request.process_group = ranks.group();
  train_options.progress = !json && ranks.writer();
  request.train_options = train_options;
  host::CompressionCallbacks callbacks;
  callbacks.on_note = [](const std::string& text) {
    std::fprintf(stderr, "lithe compress: note: %s\n", text.c_str());
  };
  const host::CompressionResult result = host::run_compression(request, registry, callbacks);
  print_compress_result(request, result, onnx.input_shape, json);
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
