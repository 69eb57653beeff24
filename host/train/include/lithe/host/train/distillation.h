#pragma once
/// \file
/// Knowledge distillation (Hinton et al. 2015; NNI's fine-tuning-with-KD example): a student
/// learns the teacher's softened class distribution as well as the labels. Used by train() when
/// TrainOptions::teacher is set; usable in an embedder's own loop.

#include <ATen/core/Tensor.h>

#include "lithe/host/model/model.h"
#include "lithe/host/train/dataset.h"

namespace lithe::host {

/// The distillation loss of one batch of logits [N, C]:
///   α · T² · KL(softmax(teacher / T) ‖ softmax(student / T))  +  (1 − α) · CE(student, labels)
/// with the KL divergence summed over classes and averaged over the batch (PyTorch's KLDivLoss
/// with reduction "batchmean") and the cross-entropy averaged over the batch. The T² factor
/// keeps the distillation gradients' scale independent of T. Differentiable in
/// `student_logits`; `teacher_logits` is treated as a constant (detached).
/// sdk::Error(kShapeMismatch) when the logits are not both [N, C] of one shape;
/// kInvalidConfig for T <= 0 (or not finite) or α outside [0, 1].
at::Tensor distillation_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                             const at::Tensor& labels, double temperature, double alpha);

/// Checks before any training that `teacher` can teach `student` on `data`: it accepts the
/// samples, is not the student itself, and its output has the student's shape (one logit per
/// class, the same classes). sdk::Error(kShapeMismatch / kInvalidConfig) naming both shapes.
/// The probe forwards are not observed by activation collectors.
void check_teacher(Model& teacher, Model& student, const Dataset& data);

}  // namespace lithe::host
