#pragma once
/// \file
/// One compression job, for pruners and quantizers alike: what `lithe compress` runs and what an
/// embedder calls on a model in memory. run_compression() stages the outputs, copies or loads
/// the model, builds the session (validating the whole config), checks that the ONNX export can
/// express the model, reads the data, evaluates, compresses, calibrates, fine-tunes, and writes
/// the model, the masks or the calibration, and the ONNX model (exported from the model's bytes
/// in memory), which replace existing files only once all were written.

#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lithe/host/dist/process_group.h"
#include "lithe/host/export/int8_convert.h"
#include "lithe/host/export/onnx_export.h"
#include "lithe/host/io/field_error.h"
#include "lithe/host/jobs/job_output.h"
#include "lithe/host/jobs/model_source.h"
#include "lithe/host/model/batchnorm_folding.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/session/quantization_session.h"
#include "lithe/host/train/batchnorm_recalibration.h"
#include "lithe/host/train/trainer.h"

namespace lithe::host {

/// What to compress, with what, and where the results go. Errors name the request's fields
/// (FieldError: `output`, `masks`, ...), which the CLI writes as its options.
struct CompressionRequest {
  ModelSource model;                  ///< the TorchScript model (file or memory; never written)
  CompressionConfig config;           ///< parsed and checked once, e.g. read_compression_config()
  std::filesystem::path config_path;  ///< where `config` came from ("" if built in memory)
  /// The compressed TorchScript model (a file, memory or both; required).
  Output output;
  /// Pruners: also write the masks (NNI mask.pth layout).
  Output masks;
  /// Quantizers: the per-layer calibration JSON. Not wanted: beside a file `output`, with the
  /// extension .calibration.json (default_calibration_path); none when `output` is memory only
  /// (CompressionResult::calibration_json holds it).
  Output calibration;
  /// Also write the model as saved in ONNX (QDQ for quantizers).
  Output onnx;
  OnnxExportOptions onnx_export;  ///< input shape and opset of the ONNX model
  /// Training data: a directory of MNIST-layout IDX files or a tensor file. Read only when
  /// fine-tuning or calibrating, or with read_data_first.
  std::filesystem::path data_path;
  /// Read the data (data_path or test_data_path) before compressing, so that "before"
  /// measures the model as it came even when the algorithm evaluates or fine-tunes while it
  /// compresses. Otherwise data_path is read only when needed (it may be a default).
  bool read_data_first = false;
  /// Test data ("" = the test split of a data_path directory, none for a tensor file).
  std::filesystem::path test_data_path;
  /// Before any fine-tuning, run this many batches without changing the weights (pruners:
  /// forward and backward for data-driven masks; quantizers: forward to track ranges).
  int64_t calibration_batches = 0;
  /// Quantizers: fold every BatchNorm2d into the convolution before it (fold_batchnorms) before
  /// the session starts, so output grids are placed after the normalization, where an int8
  /// kernel writes them (`lithe convert`). The written model is the folded one. Unset: fold
  /// when the algorithm is a quantizer (a departure from NNI v2.0, which never folds: an output
  /// grid before a BatchNorm is one no int8 kernel can write). true with a pruner is refused.
  std::optional<bool> fold_batchnorm;
  /// Re-estimate the running statistics of every BatchNorm layer on this many batches of the
  /// training data (recalibrate_batchnorm) once the algorithm compressed the model: pruners
  /// after the calibration pass that decides data-driven masks, quantizers before theirs (so
  /// activation ranges are observed through the new statistics); before any fine-tuning.
  /// 0 = no re-estimation.
  int64_t recalibrate_bn_batches = 0;
  /// Quantizers: also write the native int8 model of the result (convert_to_int8 on the model
  /// written to `output`). Checked before any training by converting the freshly quantized
  /// model.
  Output int8;
  QuantizedEngine int8_engine = QuantizedEngine::kAuto;  ///< with int8
  /// With int8: write the int8 model even when quantized layers run in float
  /// (Int8ConvertOptions::allow_float_layers); default: refuse before any work.
  bool int8_allow_float_layers = false;
  /// Fine-tune while compressing (quantization-aware training for quantizers) with
  /// train_options; without it only train_options' batch sizes are read.
  bool fine_tune = false;
  TrainOptions train_options;  ///< process_group is taken from `process_group` below
  /// Where the model computes while it is compressed (parse_device: the CPU or a CUDA device
  /// libtorch sees): the algorithm, calibration, BatchNorm re-estimation, fine-tuning and
  /// evaluation run there; the data stays on the CPU and each batch moves. Every output holds
  /// its tensors on the CPU; the int8 model and the FLOP counts are the CPU's.
  c10::Device device{c10::kCPU};
  /// Data parallel: every rank runs the job on the same request; only rank 0 writes outputs.
  ProcessGroup* process_group = nullptr;

  /// Whether data is read (fine-tuning or calibration).
  bool needs_data() const {
    return fine_tune || calibration_batches > 0 || recalibrate_bn_batches > 0;
  }
};

struct CompressionResult;

/// What a caller may want to hear while the job runs.
struct CompressionCallbacks {
  /// Advice that is not an error (e.g. "pruned nothing without data"), one sentence naming
  /// request fields.
  std::function<void(const FieldText&)> on_note;
  /// Once the algorithm compressed (its training and evaluations counted in the result), before
  /// calibration, fine-tuning and any write: a caller may refuse to go on by throwing (e.g. an
  /// option it was given that the run turned out not to read); no output is then changed.
  std::function<void(const CompressionResult&)> on_compressed;
};

/// What the job did.
struct CompressionResult {
  AlgorithmKind kind = AlgorithmKind::kPruner;   ///< kPruner or kQuantizer
  std::vector<LayerReport> pruning;              ///< pruners: per-layer sparsity
  std::vector<QuantLayerReport> quantization;    ///< quantizers: per-layer grids
  bool folded_batchnorm = false;                 ///< whether BatchNorm folding ran
  BatchNormFolding batchnorm_folding;            ///< what it folded and kept
  std::string calibration_json;                  ///< quantizers: what the calibration file holds
  std::filesystem::path calibration_path;        ///< quantizers: the file it was written to
  std::optional<EvalResult> before;              ///< test accuracy before compression
  std::optional<EvalResult> after;               ///< and after (fine-tuning included)
  std::vector<EpochResult> epochs;               ///< fine-tuning epochs
  /// Epochs the algorithm trained for while compressing (SDK 1.7 fine_tune: ADMM, Slim's
  /// sparse training), with the request's training options on its data.
  int64_t algorithm_training_epochs = 0;
  /// Evaluations the algorithm asked for while it compressed (SDK 1.7 evaluate).
  int64_t algorithm_evaluations = 0;
  std::optional<OnnxExportSummary> onnx;         ///< when an ONNX file was written
  /// With recalibrate_bn_batches: the layers re-estimated, and the test accuracy right after
  /// (before any fine-tuning), when there is test data.
  std::optional<BatchNormRecalibration> batchnorm_recalibration;
  std::optional<EvalResult> after_recalibration;
  std::optional<Int8ConvertReport> int8;         ///< with int8_path: how the model converted
  std::optional<EvalResult> int8_accuracy;       ///< the int8 model on the test data
  bool wrote_files = false;                      ///< outputs written; false on ranks but 0
  double load_seconds = 0;                       ///< staging, model, session, data
  double compress_seconds = 0;                   ///< evaluation, compression, calibration, training
  /// The algorithm's compress() alone: its mask computation and any training it does while
  /// compressing (ADMM), without reading the data or evaluating (part of compress_seconds).
  double algorithm_seconds = 0;
  double save_seconds = 0;                       ///< writing and committing the files
};

/// Runs the job. Checks the request before any work (no output may be an input, another output
/// or a special file; masks are for pruners, calibration for quantizers; the ONNX options), then
/// runs it as described in the file comment. Throws FieldError naming the request field, or
/// sdk::Error naming the file or layer; on any error no output is changed.
CompressionResult run_compression(const CompressionRequest& request,
                                  const PluginRegistry& registry,
                                  const CompressionCallbacks& callbacks = {});

/// `OUT.pt` -> `OUT.calibration.json`: the default calibration file of quantizers.
std::filesystem::path default_calibration_path(const std::filesystem::path& output_path);

}  // namespace lithe::host
