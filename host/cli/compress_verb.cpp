// `lithe compress` and `lithe apply`. compress parses its options into one
// host::CompressionRequest, runs host::run_compression (the same job embedders call) and prints.
#include <cstdio>
#include <limits>
#include <set>

#include "compress_report.h"
#include "field_flags.h"
#include "input_shape.h"
#include "lithe/host/io/device.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/model/apply_compression_results.h"
#include "lithe/host/model/model.h"
#include "lithe/host/jobs/compression_job.h"
#include "lithe/sdk/error.h"
#include "onnx_output.h"
#include "rank_run.h"
#include "training_options.h"
#include "verbs.h"

namespace lithe::cli {

namespace {

constexpr int64_t kNoEpochs = std::numeric_limits<int64_t>::min();

// What `lithe compress` reads from its command line.
struct CompressArgs {
  CommonOptions common;
  std::string model_path;
  std::string config_path;
  std::string output_path;
  std::string masks_path;
  std::string calibration_path;
  std::string data = host::kDefaultDataDir;
  std::string test_path;
  std::string teacher_path;
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
  host::TrainOptions train;

  CompressArgs() { train.epochs = kNoEpochs; }  // no fine-tuning unless asked for
};

void add_compress_options(po::options_description& desc, CompressArgs& a) {
  desc.add_options()
      ("model", po::value(&a.model_path)->required(), "TorchScript model to compress")
      ("config", po::value(&a.config_path)->required(),
       "JSON file {\"algorithm\": ..., \"config_list\": [...], \"options\": {...}}")
      ("output", po::value(&a.output_path)->required(), "compressed TorchScript model to write")
      ("masks", po::value(&a.masks_path), "pruners: also write the masks (NNI mask.pth layout)")
      ("calibration", po::value(&a.calibration_path),
       "quantizers: where to write the per-layer calibration JSON (bits, scale, zero point, "
       "ranges per quant type); default: OUTPUT with extension .calibration.json")
      ("epochs", po::value(&a.train.epochs),
       "fine-tune for N > 0 epochs while compressing (schedules such as agp and "
       "lottery_ticket, data-driven pruners and quantization-aware training need them); "
       "without it: one-shot, no data")
      ("calibration-batches", po::value(&a.calibration_batches),
       "before any fine-tuning, run N batches of --data without changing the weights. Pruners: "
       "forward and backward, then prune (one-shot data-driven pruning: apoz, mean_activation, "
       "taylor_fo; their statistics_batch_num must not exceed N). Quantizers: forward only, "
       "to track activation ranges (post-training calibration)")
      ("onnx", po::value(&a.onnx.path),
       "also write the compressed model as ONNX (NNI's onnx_path): pruned weights as they are, "
       "quantized models in QDQ form with the learned scales and zero points; needs "
       "--input-shape")
      ("input-shape", po::value(&a.onnx.input_shape),
       "with --onnx: the exported input's static shape, batch first, e.g. 1,1,28,28")
      ("onnx-opset", po::value(&a.onnx.opset)->default_value(13),
       "with --onnx: ONNX opset, 13..17")
      ("fold-batchnorm", po::bool_switch(&a.fold_batchnorm),
       "quantizers (the default for them): fold each BatchNorm2d into the Conv2d before it "
       "first, so output grids sit after the normalization, where int8 kernels write them "
       "(lithe convert); the model written is the folded one")
      ("no-fold-batchnorm", po::bool_switch(&a.keep_batchnorm),
       "quantizers: keep BatchNorm layers as they are (NNI v2.0's behaviour; output grids then "
       "sit before the normalization, and lithe convert cannot run those layers int8)")
      ("recalibrate-bn", po::value(&a.recalibrate_bn),
       "re-estimate every BatchNorm layer's running mean and variance on N batches of --data "
       "once the model is compressed (pruners: after --calibration-batches; quantizers: "
       "before it), before any fine-tuning; pruning changes what BatchNorm layers see")
      ("convert", po::value(&a.int8_path),
       "quantizers: also write the native int8 TorchScript model (what lithe convert writes)")
      ("allow-float-layers", po::bool_switch(&a.allow_float_layers),
       "with --convert: write the int8 model even when quantized layers must run in float "
       "(default: refuse before any work, naming them and the fix)")
      ("engine", po::value(&a.engine_name)->default_value("auto"),
       "with --convert: quantized engine, auto (= x86, libtorch 2.x's default: fbgemm and "
       "oneDNN), x86, fbgemm, onednn or qnnpack")
      ("device", po::value(&a.device_text)->default_value(a.device_text),
       "where the model computes while compressed (the algorithm, calibration, fine-tuning, "
       "evaluation): cpu, cuda or cuda:N; files are written with CPU tensors")
      ("json", po::bool_switch(&a.json), "print a JSON summary instead of the table");
  add_training_options(desc, a.train, a.data, a.test_path, a.teacher_path);
  add_common_options(desc, a.common);
}

bool given_explicitly(const po::variables_map& given, const char* name) {
  return given.count(name) != 0 && !given[name].defaulted();
}

// The request the options ask for, checked before any work (plugins, config): no output may
// replace an input, another output or a special file, and options that would be ignored are
// errors. run_compression checks the request again, with the default calibration file, once
// the algorithm's kind is known.
host::CompressionRequest compress_request(const CompressArgs& a, const po::variables_map& given) {
  host::check_output_paths({{"--model", a.model_path},
                            {"--config", a.config_path},
                            {"--data", a.data},
                            {"--test-data", a.test_path},
                            {"--teacher", a.teacher_path}},
                           {{"--output", a.output_path},
                            {"--masks", a.masks_path},
                            {"--calibration", a.calibration_path},
                            {"--onnx", a.onnx.path},
                            {"--convert", a.int8_path},
                            // Written beside --onnx when the weights exceed 2 GiB.
                            {"the external data file of --onnx",
                             a.onnx.wanted() ? host::onnx_external_data_path(a.onnx.path).string()
                                             : std::string()}});
  host::CompressionRequest request;
  request.model = host::ModelSource::file(a.model_path);
  request.config_path = a.config_path;
  request.output = host::Output::to_file(a.output_path);
  request.masks = host::Output::to_file(a.masks_path);
  request.calibration = host::Output::to_file(a.calibration_path);
  request.onnx = host::Output::to_file(a.onnx.path);
  request.data_path = a.data;
  request.test_data_path = a.test_path;
  request.read_data_first = given_explicitly(given, "data") || !a.test_path.empty();
  request.calibration_batches = a.calibration_batches;
  request.device = host::parse_device(a.device_text);
  LITHE_CHECK(!(a.fold_batchnorm && a.keep_batchnorm), sdk::Errc::kInvalidConfig,
              "--fold-batchnorm and --no-fold-batchnorm: give one of them");
  if (a.fold_batchnorm || a.keep_batchnorm) {
    request.fold_batchnorm = a.fold_batchnorm;
  }
  request.recalibrate_bn_batches = a.recalibrate_bn;
  request.int8 = host::Output::to_file(a.int8_path);
  LITHE_CHECK(!a.int8_path.empty() || !a.allow_float_layers, sdk::Errc::kInvalidConfig,
              "--allow-float-layers has no effect without --convert");
  request.int8_allow_float_layers = a.allow_float_layers;
  request.fine_tune = a.train.epochs != kNoEpochs;
  LITHE_CHECK(a.onnx.wanted() || !given_explicitly(given, "onnx-opset"),
              sdk::Errc::kInvalidConfig, "--onnx-opset has no effect without --onnx");
  check_onnx_request(a.onnx);
  if (a.onnx.wanted()) {
    request.onnx_export = {parse_input_shape(a.onnx.input_shape), a.onnx.opset};
  }
  if (request.fine_tune) {
    host::validate_train_options(a.train);  // epochs <= 0, lr, ... fail before any work
  } else {
    host::TrainOptions checked = a.train;
    checked.epochs = 1;  // what an algorithm's fine-tune would use, epochs aside
    host::validate_train_options(checked);
  }
  LITHE_CHECK(given.count("recalibrate-bn") == 0 || a.recalibrate_bn > 0,
              sdk::Errc::kInvalidConfig, "--recalibrate-bn must be > 0, got ", a.recalibrate_bn);
  LITHE_CHECK(!a.int8_path.empty() || !given_explicitly(given, "engine"),
              sdk::Errc::kInvalidConfig, "--engine has no effect without --convert");
  request.int8_engine = host::parse_quantized_engine(a.engine_name, "--engine");
  LITHE_CHECK(given.count("calibration-batches") == 0 || a.calibration_batches > 0,
              sdk::Errc::kInvalidConfig, "--calibration-batches must be > 0, got ",
              a.calibration_batches);
  return request;
}

// Training options given that neither fine-tuning nor calibration reads (names without "--").
// An algorithm that trains while compressing (SDK 1.7 fine_tune: admm, slim's sparse training)
// uses all of them, one that evaluates the data: whether it did is known once it compressed.
std::vector<std::string> unused_training_options(const host::CompressionRequest& request,
                                                 const po::variables_map& given) {
  std::vector<std::string> unused;
  if (request.fine_tune) {
    return unused;
  }
  static const std::set<std::string> used_by_calibration = {"data", "test-data", "batch-size"};
  for (const std::string& name : training_option_names()) {
    const bool used = request.needs_data() && used_by_calibration.count(name) != 0;
    if (!used && given_explicitly(given, name.c_str())) {
      unused.push_back(name);
    }
  }
  return unused;
}

// Refuses, before anything is written, an option the run turned out not to read.
void refuse_unused(const std::vector<std::string>& unused, const host::CompressionRequest& request,
                   const host::CompressionResult& compressed) {
  if (compressed.algorithm_training_epochs > 0) {
    return;
  }
  for (const std::string& name : unused) {
    if (compressed.algorithm_evaluations > 0 && (name == "data" || name == "test-data")) {
      continue;
    }
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     "--" + name + " has no effect without --epochs" +
                         (request.needs_data() ? "" : ", --calibration-batches or "
                                                      "--recalibrate-bn") +
                         ", and '" + request.config.algorithm + "' does not train" +
                         (compressed.algorithm_evaluations > 0 ? " (it only evaluates)" : "") +
                         " while it compresses (nothing was written)");
  }
}

}  // namespace

int run_compress(const std::vector<std::string>& args) {
  CompressArgs a;
  po::options_description desc("options");
  add_compress_options(desc, a);
  po::variables_map given;
  if (!parse_verb_args("compress",
                       "--model M.pt --config C.json --output OUT.pt [--masks MASKS.pt] "
                       "[--calibration CAL.json] [--calibration-batches N] [--epochs N] "
                       "[--data DIR|FILE] [--recalibrate-bn N] [--onnx OUT.onnx --input-shape "
                       "1,1,28,28] [--convert INT8.pt]",
                       args, desc, nullptr, &given)) {
    return 0;
  }
  host::CompressionRequest request = compress_request(a, given);
  const std::vector<std::string> unused = unused_training_options(request, given);
  const std::unique_ptr<host::Model> teacher = load_teacher(a.teacher_path, given, a.train);
  if (teacher != nullptr) {
    teacher->to(request.device);
  }
  request.config = host::read_compression_config(a.config_path);
  host::PluginRegistry registry;
  host::PluginLoader loader(registry);
  prepare(a.common, loader);
  // Data parallel when started once per rank (torchrun, lithe launch): only rank 0 writes.
  const RankRun ranks;
  ranks.require_cpu_for_ranks(request.device);
  request.process_group = ranks.group();
  a.train.progress = !a.json && ranks.writer();
  request.train_options = a.train;
  host::CompressionCallbacks callbacks;
  callbacks.on_note = [](const host::FieldText& text) {
    std::fprintf(stderr, "lithe compress: note: %s\n",
                 text.in_words(field_words(compress_flags())).c_str());
  };
  callbacks.on_compressed = [&](const host::CompressionResult& compressed) {
    refuse_unused(unused, request, compressed);
  };
  const host::CompressionResult result =
      in_flags(compress_flags(), [&] { return host::run_compression(request, registry, callbacks); });
  print_compress_result(request, result, a.onnx.input_shape, a.json);
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
