#include "lithe/host/train/trainer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/dist/process_group.h"
#include "lithe/host/session/quantization_session.h"
#include "lithe/sdk/error.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/train/distillation.h"
#include "evaluation_tally.h"

namespace lithe::host {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One line per epoch when stderr is not a terminal; an updating bar with rate and ETA when it is.
class Progress {
 public:
  Progress(bool enabled, int64_t epoch, int64_t epochs, int64_t steps)
      : enabled_(enabled), tty_(::isatty(2) != 0), epoch_(epoch), epochs_(epochs), steps_(steps),
        start_(Clock::now()) {}

  void update(int64_t step, double loss) {
    if (!enabled_ || !tty_ || (step % 10 != 0 && step != steps_)) {
      return;
    }
    const double elapsed = seconds_since(start_);
    const double rate = step / std::max(elapsed, 1e-9);
    const double eta = (steps_ - step) / std::max(rate, 1e-9);
    const int width = 30;
    const int filled = static_cast<int>(width * step / std::max<int64_t>(steps_, 1));
    std::fprintf(stderr, "\repoch %lld/%lld [%s%s] %lld/%lld  %.0f steps/s  eta %.0fs  loss %.4f ",
                 static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_),
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                 static_cast<long long>(step), static_cast<long long>(steps_), rate, eta, loss);
    std::fflush(stderr);
  }

  void finish(const EpochResult& r) {
    if (!enabled_) {
      return;
    }
    if (tty_) {
      std::fprintf(stderr, "\n");
    }
    std::fprintf(stderr, "epoch %lld/%lld: train loss %.4f, %.1f s", static_cast<long long>(r.epoch + 1),
                 static_cast<long long>(epochs_), r.train_loss, r.seconds);
    if (r.test.samples > 0) {
      std::fprintf(stderr, ", test accuracy %.4f, test loss %.4f", r.test.accuracy, r.test.loss);
    }
    std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  bool tty_;
  int64_t epoch_;
  int64_t epochs_;
  int64_t steps_;
  Clock::time_point start_;
};

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o, Model& model,
                                                       TrainingHooks* session) {
  std::vector<at::Tensor> parameters = model.parameters();
  if (session != nullptr) {
    for (const at::Tensor& extra : session->extra_parameters()) {
      parameters.push_back(extra);
    }
  }
  if (o.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(
        parameters, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(
      parameters,
      torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) {
    group.options().set_lr(lr);
  }
}

}  // namespace

void validate_train_options(const TrainOptions& o) {
  LITHE_CHECK(o.epochs > 0, sdk::Errc::kInvalidConfig, "epochs must be > 0, got ", o.epochs);
  LITHE_CHECK(o.batch_size > 0, sdk::Errc::kInvalidConfig, "batch size must be > 0, got ",
              o.batch_size);
  LITHE_CHECK(o.eval_batch_size > 0, sdk::Errc::kInvalidConfig,
              "evaluation batch size must be > 0, got ", o.eval_batch_size);
  LITHE_CHECK(o.optimizer == "sgd" || o.optimizer == "adam", sdk::Errc::kInvalidConfig,
              "optimizer must be 'sgd' or 'adam', got '", o.optimizer, "'");
  LITHE_CHECK(o.lr > 0, sdk::Errc::kInvalidConfig, "learning rate must be > 0, got ", o.lr);
  LITHE_CHECK(o.momentum >= 0 && o.momentum < 1, sdk::Errc::kInvalidConfig,
              "momentum must be in [0, 1), got ", o.momentum);
  LITHE_CHECK(o.weight_decay >= 0, sdk::Errc::kInvalidConfig, "weight decay must be >= 0, got ",
              o.weight_decay);
  LITHE_CHECK(o.lr_step >= 0, sdk::Errc::kInvalidConfig, "lr step must be >= 0, got ", o.lr_step);
  LITHE_CHECK(o.lr_gamma > 0 && o.lr_gamma <= 1, sdk::Errc::kInvalidConfig,
              "lr gamma must be in (0, 1], got ", o.lr_gamma);
  LITHE_CHECK(std::isfinite(o.kd_temperature) && o.kd_temperature > 0, sdk::Errc::kInvalidConfig,
              "distillation temperature must be > 0, got ", o.kd_temperature);
  LITHE_CHECK(o.kd_alpha >= 0 && o.kd_alpha <= 1, sdk::Errc::kInvalidConfig,
              "distillation alpha must be in [0, 1], got ", o.kd_alpha);
}

void check_dataset_fits_model(Model& model, const Dataset& data) {
  LITHE_CHECK(data.size() > 0, sdk::Errc::kShapeMismatch, "dataset '", data.source, "' is empty");
  const UnobservedForwards unobserved;  // a probe, not data a pruner may learn from
  const bool was_training = model.is_training();
  model.train(false);
  at::Tensor output;
  try {
    at::NoGradGuard no_grad;
    output = model.forward(data.images.narrow(0, 0, 1).to(model.device()));
  } catch (const sdk::Error&) {
    model.train(was_training);
    throw;  // Lithe's own errors (a quantizer, a collector) already say what and where
  } catch (const std::exception& e) {
    model.train(was_training);
    throw sdk::Error(sdk::Errc::kShapeMismatch,
                     "dataset '" + data.source + "' has samples of shape " +
                         c10::str(data.images.sizes().slice(1)) +
                         ", which the model does not accept: " +
                         graph_trace::interpreter_message(e));
  }
  model.train(was_training);
  LITHE_CHECK(output.dim() == 2 && output.size(0) == 1, sdk::Errc::kShapeMismatch,
              "the model must output [batch, classes] logits, got shape ", output.sizes());
  const int64_t classes = output.size(1);
  const at::Tensor bad = data.labels.lt(0).logical_or(data.labels.ge(classes));
  if (bad.any().item<bool>()) {
    const int64_t index = bad.nonzero()[0][0].item<int64_t>();
    throw sdk::Error(sdk::Errc::kShapeMismatch,
                     "dataset '" + (data.labels_source.empty() ? data.source : data.labels_source) +
                         "': sample " + std::to_string(index) +
                         " has label " + std::to_string(data.labels[index].item<int64_t>()) +
                         "; labels must be in [0, " + std::to_string(classes) +
                         ") for a model with " + std::to_string(classes) + " outputs (" +
                         std::to_string(bad.sum().item<int64_t>()) + " labels out of range)");
  }
}

namespace {

// Stops training at the first non-finite loss or gradient, naming where (1-based epoch and step).
// Stops training at the first non-finite loss or gradient, naming where (1-based epoch and step);
// returns the loss. One reduction per gradient (its sum: NaN or infinite exactly when an entry
// is, short of a float overflow that is divergence too) and a single synchronisation per step.
double check_finite_step(const std::vector<at::Tensor>& parameters, const at::Tensor& loss,
                         int64_t epoch, int64_t step) {
  std::vector<at::Tensor> sums = {loss.detach().to(at::kDouble).reshape({1})};
  for (const at::Tensor& p : parameters) {
    if (p.grad().defined() && p.grad().numel() > 0) {
      sums.push_back(p.grad().sum().to(loss.device(), at::kDouble).reshape({1}));
    }
  }
  const at::Tensor all = at::cat(sums);
  const double value = all[0].item<double>();
  if (!std::isfinite(value) || !all.isfinite().all().item<bool>()) {
    throw sdk::Error(sdk::Errc::kInvalidModel,
                     "training diverged at epoch " + std::to_string(epoch + 1) + " step " +
                         std::to_string(step + 1) + ": " +
                         (std::isfinite(value) ? "a gradient is NaN or infinite"
                                               : "the loss is " + c10::str(value)) +
                         " (lower --lr, or check the data and the model's weights for NaN/Inf); "
                         "nothing was written");
  }
  return value;
}

}  // namespace

EvalResult evaluate(Model& model, const Dataset& data, int64_t batch_size, ProcessGroup* group) {
  // Held-out data never feeds a pruner's statistics (NNI's hooks would see it).
  const UnobservedForwards unobserved;
  const bool was_training = model.is_training();
  model.train(false);
  at::NoGradGuard no_grad;
  detail::EvalTally tally;
  const c10::Device device = model.device();  // batches go where the model is
  // This rank's contiguous share [first, last) of the samples.
  const bool shared = group != nullptr && group->world_size() > 1;
  const int64_t first = shared ? data.size() * group->rank() / group->world_size() : 0;
  const int64_t last = shared ? data.size() * (group->rank() + 1) / group->world_size() : data.size();
  for (int64_t start = first; start < last; start += batch_size) {
    const int64_t n = std::min(batch_size, last - start);
    tally.add(model.forward(data.images.narrow(0, start, n).to(device)),
              data.labels.narrow(0, start, n).to(device));
  }
  if (shared) {
    std::vector<at::Tensor> totals = {at::tensor({tally.loss_sum}, at::kDouble),
                                      at::tensor({tally.correct}, at::kLong)};
    group->all_reduce(totals, sdk::Reduction::kSum, "evaluation results");
    tally.loss_sum = totals[0].item<double>();
    tally.correct = totals[1].item<int64_t>();
  }
  model.train(was_training);
  return tally.result(data.size());
}

namespace detail {

void EvalTally::add(const at::Tensor& logits, const at::Tensor& labels) {
  loss_sum += torch::nn::functional::cross_entropy(
                  logits, labels,
                  torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                  .item<double>();
  correct += logits.argmax(1).eq(labels).sum().item<int64_t>();
}

EvalResult EvalTally::result(int64_t samples) const {
  EvalResult r;
  r.samples = samples;
  r.accuracy = samples == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(samples);
  r.loss = samples == 0 ? 0.0 : loss_sum / static_cast<double>(samples);
  return r;
}

}  // namespace detail

namespace {

void check_calibration_request(const Dataset& data, int64_t batches, int64_t batch_size) {
  LITHE_CHECK(batches > 0, sdk::Errc::kInvalidConfig, "calibration batches must be > 0, got ",
              batches);
  LITHE_CHECK(batch_size > 0, sdk::Errc::kInvalidConfig, "batch size must be > 0, got ",
              batch_size);
  const int64_t available = (data.size() + batch_size - 1) / batch_size;
  LITHE_CHECK(batches <= available, sdk::Errc::kInvalidConfig, batches,
              " calibration batches asked for, but dataset '", data.source, "' holds only ",
              available, " batches of ", batch_size, " samples");
}

}  // namespace

int64_t calibrate(Model& model, const Dataset& data, QuantizationSession& session,
                  int64_t batches, int64_t batch_size) {
  check_calibration_request(data, batches, batch_size);
  check_dataset_fits_model(model, data);
  struct Restore {
    Model& model;
    QuantizationSession& session;
    bool training;
    ~Restore() {
      session.set_calibrating(false);
      model.train(training);
    }
  } restore{model, session, model.is_training()};
  model.train(false);
  session.set_calibrating(true);
  at::NoGradGuard no_grad;
  const c10::Device device = model.device();
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t start = b * batch_size;
    const int64_t n = std::min(batch_size, data.size() - start);
    model.forward(data.images.narrow(0, start, n).to(device));
  }
  return batches;
}

int64_t calibrate(Model& model, const Dataset& data, PruningSession& session, int64_t batches,
                  int64_t batch_size) {
  check_calibration_request(data, batches, batch_size);
  check_dataset_fits_model(model, data);
  struct Restore {
    Model& model;
    PruningSession& session;
    bool training;
    ~Restore() {
      session.set_calibrating(false);
      model.train(training);
    }
  } restore{model, session, model.is_training()};
  model.train(false);
  session.set_calibrating(true);  // a statistics pass, not training: no epochs yet
  // lr 0: the pruner's statistics see gradients and optimizer steps, the weights stay as they
  // are (SGD without momentum or weight decay adds exactly -0 * grad, as long as the gradient
  // is finite, which is checked before every step).
  const std::vector<at::Tensor> parameters = model.parameters();
  torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(0.0));
  const c10::Device device = model.device();
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t start = b * batch_size;
    const int64_t n = std::min(batch_size, data.size() - start);
    optimizer.zero_grad();
    const at::Tensor logits = model.forward(data.images.narrow(0, start, n).to(device));
    torch::nn::functional::cross_entropy(logits, data.labels.narrow(0, start, n).to(device))
        .backward();
    for (const at::Tensor& p : parameters) {
      LITHE_CHECK(!p.grad().defined() || p.grad().isfinite().all().item<bool>(),
                  sdk::Errc::kInvalidConfig, "calibration batch ", b, " of '", data.source,
                  "' gives a non-finite gradient; the statistics would corrupt the weights");
    }
    session.optimizer_step(optimizer);
    session.step();
  }
  optimizer.zero_grad();
  session.update_masks();  // TaylorFO decides at the update after its last statistics step
  return batches;
}

namespace {

/// The data-parallel side of train(): which samples of a step are this rank's, and the
/// exchanges that keep the ranks identical. A group of one (or none) makes every call a no-op.
class DataParallel {
 public:
  DataParallel(ProcessGroup* group, Model& model, TrainingHooks* session)
      : group_(group != nullptr && group->world_size() > 1 ? group : nullptr),
        model_(model),
        session_(session) {}

  bool active() const { return group_ != nullptr; }
  int64_t rank() const { return active() ? group_->rank() : 0; }
  int64_t world() const { return active() ? group_->world_size() : 1; }

  /// This rank's part {offset, count} of a step of `global` samples: as equal as possible, the
  /// first `global % world` ranks one more.
  std::pair<int64_t, int64_t> share(int64_t global) const {
    const int64_t base = global / world();
    const int64_t extra = global % world();
    return {rank() * base + std::min(rank(), extra), base + (rank() < extra ? 1 : 0)};
  }

  /// Every rank starts from rank 0's model and trainable extras; the session's state (masks,
  /// quantization state computed by compress() from each rank's own weights) must already
  /// agree.
  void start(const std::vector<at::Tensor>& extra) {
    if (!active()) {
      return;
    }
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> state = model_.state_tensors();
    state.insert(state.end(), extra.begin(), extra.end());
    group_->broadcast(state, 0, "the initial model");
    if (session_ != nullptr) {
      group_->check_identical(session_->replicated_state(),
                              "the masks or quantization state before training (start every "
                              "rank from the same model and configuration)");
    }
  }

  /// Averages the gradients of `parameters` over the step's samples: this rank's mean-loss
  /// gradient weighted by its share `mine / global`, summed over the ranks.
  void average_gradients(const std::vector<at::Tensor>& parameters, int64_t mine,
                         int64_t global, const std::string& when) {
    if (!active()) {
      return;
    }
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> grads;
    // Which ranks have a gradient for each parameter, summed with the gradients (same bucket):
    // a parameter keeps one on every rank iff some rank computed one.
    at::Tensor present = at::zeros({static_cast<int64_t>(parameters.size())}, at::kFloat);
    float* has_grad = present.data_ptr<float>();
    for (size_t i = 0; i < parameters.size(); ++i) {
      const at::Tensor& p = parameters[i];
      at::Tensor grad = p.grad();
      if (grad.defined()) {
        has_grad[i] = 1;
      } else {  // unused here; another rank may have one
        grad = at::zeros_like(p);
        const_cast<at::Tensor&>(p).mutable_grad() = grad;
      }
      grad.mul_(static_cast<double>(mine) / static_cast<double>(global));
      grads.push_back(grad);
    }
    grads.push_back(present);
    group_->all_reduce(grads, sdk::Reduction::kSum, "gradients at " + when);
    const float* anywhere = grads.back().data_ptr<float>();
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (anywhere[i] == 0) {
        const_cast<at::Tensor&>(parameters[i]).mutable_grad() = at::Tensor();  // unused everywhere
      }
    }
  }

  double sum(double value, const std::string& what) const {
    if (!active()) {
      return value;
    }
    std::vector<at::Tensor> t = {at::tensor({value}, at::kDouble)};
    group_->all_reduce(t, sdk::Reduction::kSum, what);
    return t[0].item<double>();
  }

  /// End of an epoch: weights and the session's state must be identical on every rank;
  /// buffers (BatchNorm running statistics, computed from each rank's own batches) are taken
  /// from rank 0, as DistributedDataParallel does.
  void end_epoch(int64_t epoch) {
    if (!active()) {
      return;
    }
    const std::string when = " after epoch " + std::to_string(epoch + 1);
    group_->check_identical(model_.parameters(), "the model's weights" + when);
    if (session_ != nullptr) {
      group_->check_identical(session_->replicated_state(),
                              "the masks or quantization state" + when);
    }
    const std::vector<at::Tensor> parameters = model_.parameters();
    std::vector<at::Tensor> buffers;
    for (const at::Tensor& t : model_.state_tensors()) {
      bool is_parameter = false;
      for (const at::Tensor& p : parameters) {
        is_parameter = is_parameter || p.is_same(t);
      }
      if (!is_parameter) {
        buffers.push_back(t);
      }
    }
    at::NoGradGuard no_grad;
    group_->broadcast(buffers, 0, "buffers" + when);
  }

 private:
  ProcessGroup* group_;
  Model& model_;
  TrainingHooks* session_;
};

}  // namespace

std::vector<EpochResult> train(Model& model, const Dataset& train_data, const Dataset* test_data,
                               const TrainOptions& options, TrainingHooks* session,
                               const std::function<void(const EpochResult&)>& on_epoch) {
  validate_train_options(options);
  check_dataset_fits_model(model, train_data);
  if (test_data != nullptr) {
    check_dataset_fits_model(model, *test_data);
  }
  Model* const teacher = options.teacher;
  if (teacher != nullptr) {
    check_teacher(*teacher, model, train_data);
  }
  // The teacher runs in evaluation mode throughout (its BatchNorm statistics and dropout
  // fixed), and gets its own mode back.
  struct TeacherMode {
    Model* teacher;
    bool training;
    ~TeacherMode() {
      if (teacher != nullptr) {
        teacher->train(training);
      }
    }
  } teacher_mode{teacher, teacher != nullptr && teacher->is_training()};
  if (teacher != nullptr) {
    teacher->train(false);
  }
  DataParallel parallel(options.process_group, model, session);
  // The data stays on the CPU (the permutation's generator too, so the batches are the same on
  // every device); each batch goes where the model is.
  const c10::Device device = model.device();
  LITHE_CHECK(!parallel.active() || device.is_cpu(), sdk::Errc::kUnsupported,
              "data-parallel training runs on the CPU (its gradients travel over Gloo); the "
              "model is on ", device.str(), ": train it in one process, or on the CPU");
  const int64_t n = train_data.size();
  const int64_t global_batch = options.batch_size * parallel.world();
  const int64_t steps = (n + global_batch - 1) / global_batch;
  const int64_t last_step = n - (steps - 1) * global_batch;
  LITHE_CHECK(last_step >= parallel.world(), sdk::Errc::kInvalidConfig, "dataset '",
              train_data.source, "' (", n, " samples) ends with a step of ", last_step,
              " samples, fewer than the ", parallel.world(),
              " ranks that must each take at least one; change the batch size");
  // The session exchanges over the group only inside this training; a later forward on one
  // rank alone (evaluation, calibration) must not start an exchange the others never join.
  struct GroupForSession {
    TrainingHooks* session;
    GroupForSession(TrainingHooks* s, ProcessGroup* group) : session(s) {
      if (session != nullptr) {
        session->set_process_group(group);
      }
    }
    ~GroupForSession() {
      if (session != nullptr) {
        session->set_process_group(nullptr);
      }
    }
  } group_for_session(session, parallel.active() ? options.process_group : nullptr);
  ProcessGroup* const eval_group = parallel.active() ? options.process_group : nullptr;
  auto optimizer = make_optimizer(options, model, session);
  std::vector<at::Tensor> trained;  // what the optimizer updates, in its order, each once
  for (const auto& group : optimizer->param_groups()) {
    for (const at::Tensor& p : group.params()) {
      bool seen = false;
      for (const at::Tensor& q : trained) {
        seen = seen || q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
      }
      if (!seen) {
        trained.push_back(p);  // a shared weight listed twice is averaged once
      }
    }
  }
  parallel.start(session != nullptr ? session->extra_parameters() : std::vector<at::Tensor>());
  at::Generator generator = at::detail::createCPUGenerator(options.seed);
  std::vector<EpochResult> results;
  for (int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    if (options.lr_step > 0) {
      const auto decays = static_cast<double>(epoch / options.lr_step);
      set_learning_rate(*optimizer, options.lr * std::pow(options.lr_gamma, decays));
    }
    if (session != nullptr) {
      session->update_epoch(epoch);
    }
    model.train(true);
    const auto start = Clock::now();
    const at::Tensor order = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
    Progress progress(options.progress && parallel.rank() == 0, epoch, options.epochs, steps);
    double loss_sum = 0;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t begin = step * global_batch;
      const int64_t global = std::min(global_batch, n - begin);
      const auto [offset, count] = parallel.share(global);
      const at::Tensor index = order.narrow(0, begin + offset, count);
      const at::Tensor images = train_data.images.index_select(0, index).to(device);
      const at::Tensor labels = train_data.labels.index_select(0, index).to(device);
      optimizer->zero_grad();
      const at::Tensor logits = model.forward(images);
      at::Tensor loss;
      if (teacher != nullptr) {
        at::Tensor taught;
        {
          at::NoGradGuard no_grad;
          const UnobservedForwards unobserved;
          taught = teacher->forward(images);
        }
        loss = distillation_loss(logits, taught, labels, options.kd_temperature, options.kd_alpha);
      } else {
        loss = torch::nn::functional::cross_entropy(logits, labels);
      }
      if (session != nullptr) {
        // SDK 1.7 loss terms (Slim's γ penalty, …): their gradients reach the weights here.
        const at::Tensor extra = session->loss_terms();
        if (extra.defined()) {
          loss = loss + extra.to(loss.device(), loss.scalar_type());
        }
      }
      loss.backward();
      parallel.average_gradients(trained, count, global,
                                 "epoch " + std::to_string(epoch + 1) + " step " +
                                     std::to_string(step + 1));
      // Before the weights change: a NaN/Inf here would otherwise train to a NaN model and be
      // written. The gradients are the averaged ones, so every rank stops at the same step.
      const double value = check_finite_step(trained, loss, epoch, step);
      if (session != nullptr) {
        session->optimizer_step(*optimizer);
        session->step();
      } else {
        optimizer->step();
      }
      loss_sum += value * static_cast<double>(count);
      progress.update(step + 1, value);
    }
    parallel.end_epoch(epoch);
    EpochResult result;
    result.epoch = epoch;
    result.seconds = seconds_since(start);
    result.train_loss =
        parallel.sum(loss_sum, "the training loss of epoch " + std::to_string(epoch + 1)) /
        static_cast<double>(n);
    if (test_data != nullptr) {
      result.test = evaluate(model, *test_data, options.eval_batch_size, eval_group);
    }
    progress.finish(result);
    results.push_back(result);
    if (on_epoch) {
      on_epoch(result);
    }
  }
  return results;
}

}  // namespace lithe::host
