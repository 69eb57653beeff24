#pragma once
/// \file
/// The training engine: seeded shuffled mini-batches, cross-entropy, SGD or Adam, per-epoch
/// evaluation. When a compression session is given (TrainingHooks: pruning or quantization),
/// it is driven exactly like NNI's patched optimizer: update_epoch(e) at each epoch start,
/// optimizer_step instead of optimizer.step() (masks recomputed and re-applied, quantizer
/// steps), step() after each batch; its extra_parameters are trained with the model's.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lithe/host/train/dataset.h"
#include "lithe/host/model/model.h"
#include "lithe/host/session/training_hooks.h"

namespace lithe::host {

class ProcessGroup;
class PruningSession;
class QuantizationSession;

struct TrainOptions {
  int64_t epochs = 1;          ///< > 0
  int64_t batch_size = 64;     ///< > 0; the last batch may be smaller (not dropped)
  std::string optimizer = "sgd";  ///< "sgd" or "adam"
  double lr = 0.01;            ///< > 0
  double momentum = 0.9;       ///< SGD only, [0, 1)
  double weight_decay = 5e-4;  ///< >= 0
  int64_t lr_step = 0;         ///< multiply lr by lr_gamma every lr_step epochs (0 = never)
  double lr_gamma = 0.1;       ///< (0, 1]
  uint64_t seed = 0;           ///< epoch e uses the e-th randperm(N) of a CPU generator seeded so
  int64_t eval_batch_size = 1000;
  bool progress = true;        ///< progress output on stderr (a bar on a terminal, lines otherwise)
  /// Data-parallel training (nullptr or a group of one: a single process). Every rank calls
  /// train() with the same options and data; `batch_size` is per rank, so a step covers
  /// batch_size × world_size samples of the epoch's permutation, rank r taking the r-th part
  /// (the last, smaller step is split as evenly as possible). The ranks start from rank 0's
  /// weights (the session's masks or quantization state must already agree: checked);
  /// gradients are averaged over the step's samples (weighted by each rank's share) before
  /// every optimizer step, so the ranks keep identical weights and train as one process with
  /// batch_size × world_size (up to float summation order; BatchNorm normalises each rank's
  /// share with its own batch statistics, as DistributedDataParallel does). After each
  /// epoch the weights and the session's replicated state are checked to be identical,
  /// buffers (BatchNorm statistics) are taken from rank 0, and the test set is evaluated in
  /// shards. Only rank 0 prints progress. The session (if any) gets the group for the length
  /// of the call.
  ProcessGroup* process_group = nullptr;
  /// Knowledge distillation (distillation.h): a teacher model, run in evaluation mode without
  /// gradients on every training batch, whose softened logits the model learns together with
  /// the labels; nullptr trains on the labels alone. Its outputs must have the model's shape.
  /// The caller keeps it alive for the call; train() leaves its mode as it found it.
  Model* teacher = nullptr;
  double kd_temperature = 4;  ///< T > 0: both logits are divided by T before the softmax
  double kd_alpha = 0.9;      ///< [0, 1]: the distillation term's weight, 1 − α the labels'
};

struct EvalResult {
  double accuracy = 0;  ///< top-1, in [0, 1]
  double loss = 0;      ///< mean cross-entropy
  int64_t samples = 0;
};

struct EpochResult {
  int64_t epoch = 0;
  double train_loss = 0;
  EvalResult test;       ///< empty (samples 0) without a test set
  double seconds = 0;    ///< training time of the epoch (evaluation excluded)
};

/// Throws sdk::Error(kInvalidConfig) naming the option, the rule and the value.
void validate_train_options(const TrainOptions& options);

/// Checks before any work that the model accepts the dataset's samples and that labels fit its
/// outputs (sdk::Error(kShapeMismatch) naming the dataset and both shapes). Its probe forward is
/// not observed by activation collectors.
void check_dataset_fits_model(Model& model, const Dataset& data);

/// Evaluation mode, no gradients, batches in file order; not observed by activation
/// collectors (UnobservedForwards).
/// With a process group of several ranks, each evaluates its contiguous share of `data` and
/// the results are combined: every rank returns the whole result.
EvalResult evaluate(Model& model, const Dataset& data, int64_t batch_size = 1000,
                    ProcessGroup* group = nullptr);

/// NNI's statistics pass for data-driven pruners, without training: the first `batches`
/// batches of `data` (file order, `batch_size` samples each) run forward and backward in
/// evaluation mode, each followed by PruningSession::optimizer_step with a zero learning rate
/// (weights never change) and step(), so activation collectors and optimizer-step callbacks
/// (APoZ, mean activation, TaylorFO) see real data; then one more mask update. Returns the
/// number of batches run. Throws sdk::Error(kInvalidConfig) for batches <= 0, batch_size <= 0
/// or more batches than the data holds, kShapeMismatch when the data does not fit the model
/// (all before any work), and kInvalidConfig when a batch gives a non-finite gradient (before
/// that batch's step). The model's training mode is restored in every case.
/// The session is marked calibrating meanwhile (schedules need no update_epoch yet). Neither
/// calibrate() nor train() calls session.end_of_data(): more passes may follow; the caller
/// calls it after the last one.
int64_t calibrate(Model& model, const Dataset& data, PruningSession& session, int64_t batches,
                  int64_t batch_size = 64);

/// Post-training range calibration for quantizers: the first `batches` batches of `data` (file
/// order) run forward without gradients, the model in evaluation mode (BatchNorm statistics
/// and weights unchanged) while the quantizer sees training forwards, so activation ranges
/// (QAT's EMA, LSQ's initial step sizes) come from real data. Same argument checks and errors
/// as the pruning calibrate(); the model's mode is restored. Returns the number of batches.
int64_t calibrate(Model& model, const Dataset& data, QuantizationSession& session,
                  int64_t batches, int64_t batch_size = 64);

/// Trains `model` in place. `session` may be null. `on_epoch` runs after each epoch.
std::vector<EpochResult> train(Model& model, const Dataset& train_data, const Dataset* test_data,
                               const TrainOptions& options, TrainingHooks* session = nullptr,
                               const std::function<void(const EpochResult&)>& on_epoch = {});

}  // namespace lithe::host
