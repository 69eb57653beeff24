#include "lithe/host/train/distillation.h"

#include <ATen/ATen.h>

#include <cmath>

#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

at::Tensor probe_output(Model& model, const Dataset& data) {
  const UnobservedForwards unobserved;
  const bool was_training = model.is_training();
  model.train(false);
  at::NoGradGuard no_grad;
  at::Tensor out;
  try {
    out = model.forward(data.images.narrow(0, 0, 1).to(model.device()));
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return out;
}

}  // namespace

at::Tensor distillation_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                             const at::Tensor& labels, double temperature, double alpha) {
  LITHE_CHECK(std::isfinite(temperature) && temperature > 0, sdk::Errc::kInvalidConfig,
              "distillation temperature must be > 0, got ", temperature);
  LITHE_CHECK(alpha >= 0 && alpha <= 1, sdk::Errc::kInvalidConfig,
              "distillation alpha must be in [0, 1], got ", alpha);
  LITHE_CHECK(student_logits.dim() == 2 && student_logits.sizes() == teacher_logits.sizes(),
              sdk::Errc::kShapeMismatch, "distillation compares [batch, classes] logits; the "
              "teacher's have shape ", teacher_logits.sizes(), ", the model's ",
              student_logits.sizes());
  const at::Tensor log_student = at::log_softmax(student_logits / temperature, 1);
  const at::Tensor log_teacher = at::log_softmax(teacher_logits.detach() / temperature, 1);
  // KL(p_t ‖ p_s) = Σ p_t (log p_t − log p_s), from log-probabilities so that a class the
  // teacher rules out (p_t = 0) adds exactly 0 rather than 0 · −inf.
  const at::Tensor kl = (log_teacher.exp() * (log_teacher - log_student)).sum() /
                        static_cast<double>(student_logits.size(0));
  at::Tensor loss = kl * (alpha * temperature * temperature);
  if (alpha < 1) {
    loss = loss + at::cross_entropy_loss(student_logits, labels) * (1 - alpha);
  }
  return loss;
}

void check_teacher(Model& teacher, Model& student, const Dataset& data) {
  LITHE_CHECK(&teacher != &student, sdk::Errc::kInvalidConfig,
              "the teacher is the model being trained; distillation needs another model");
  LITHE_CHECK(teacher.device() == student.device(), sdk::Errc::kInvalidConfig,
              "the teacher model is on ", teacher.device().str(), ", the model being trained on ",
              student.device().str(), "; distillation runs both on one device");
  try {
    check_dataset_fits_model(teacher, data);
  } catch (const sdk::Error& e) {
    throw sdk::Error(e.code(), std::string("the teacher model: ") + e.what());
  }
  const at::Tensor taught = probe_output(teacher, data);
  const at::Tensor learner = probe_output(student, data);
  LITHE_CHECK(taught.sizes() == learner.sizes(), sdk::Errc::kShapeMismatch,
              "the teacher model outputs shape ", taught.sizes(), " on a sample of dataset '",
              data.source, "', the model being trained ", learner.sizes(),
              "; distillation compares their logits class by class");
}

}  // namespace lithe::host
