// Knowledge distillation: the loss is Hinton's α·T²·KL + (1 − α)·CE computed by hand here;
// training with a teacher makes the model learn the teacher's function where the labels say
// nothing (random labels), and a teacher that cannot teach the model is refused before any
// work, naming both shapes.
#include "lithe/host/train/distillation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TEST(DistillationLossTest, IsAlphaTSquaredKlPlusTheRestCrossEntropyByHand) {
  const at::Tensor student = at::tensor({1.0, -0.5, 2.0, 0.0, 0.3, -1.2}, at::kFloat).reshape({2, 3});
  const at::Tensor teacher = at::tensor({0.2, 0.1, 3.0, -2.0, 1.0, 0.5}, at::kFloat).reshape({2, 3});
  const at::Tensor labels = at::tensor({2, 1}, at::kLong);
  const double t = 3.0;
  const double alpha = 0.7;
  // By hand in double: per row, Σ_c p_t,c · (log p_t,c − log p_s,c), averaged over rows.
  const at::Tensor s = student.to(at::kDouble) / t;
  const at::Tensor k = teacher.to(at::kDouble) / t;
  double kl = 0;
  double ce = 0;
  for (int64_t row = 0; row < 2; ++row) {
    const at::Tensor ps = s[row].exp() / s[row].exp().sum();
    const at::Tensor pt = k[row].exp() / k[row].exp().sum();
    kl += (pt * (pt.log() - ps.log())).sum().item<double>();
    const at::Tensor raw = student[row].to(at::kDouble);
    ce += -(raw[labels[row].item<int64_t>()] - raw.exp().sum().log()).item<double>();
  }
  const double want = alpha * t * t * kl / 2 + (1 - alpha) * ce / 2;
  EXPECT_NEAR(distillation_loss(student, teacher, labels, t, alpha).item<double>(), want, 1e-5);
  // α = 0 is the labels' cross-entropy alone; α = 1 ignores the labels.
  EXPECT_NEAR(distillation_loss(student, teacher, labels, t, 0).item<double>(), ce / 2, 1e-5);
  EXPECT_NEAR(distillation_loss(student, teacher, at::tensor({0, 0}, at::kLong), t, 1).item<double>(),
              t * t * kl / 2, 1e-5);
}

TEST(DistillationLossTest, ItsGradientVanishesWhereTheStudentIsTheTeacherAndSkipsTheTeacher) {
  const at::Tensor teacher = at::randn({4, 5}).requires_grad_(true);
  const at::Tensor student = teacher.detach().clone().requires_grad_(true);
  const at::Tensor loss = distillation_loss(student, teacher, at::zeros({4}, at::kLong), 2.0, 1.0);
  loss.backward();
  EXPECT_NEAR(loss.item<double>(), 0, 1e-6);
  EXPECT_LT(student.grad().abs().max().item<double>(), 1e-6);
  EXPECT_FALSE(teacher.grad().defined()) << "the teacher's logits are constants";
}

TEST(DistillationLossTest, BadArgumentsNameTheRuleAndTheValue) {
  const at::Tensor a = at::randn({2, 3});
  const at::Tensor labels = at::zeros({2}, at::kLong);
  EXPECT_THAT([&] { distillation_loss(a, a, labels, 0, 0.5); },
              ThrowsMessage<sdk::Error>(HasSubstr("temperature must be > 0, got 0")));
  EXPECT_THAT([&] { distillation_loss(a, a, labels, 2, 1.5); },
              ThrowsMessage<sdk::Error>(HasSubstr("alpha must be in [0, 1], got 1.5")));
  EXPECT_THAT([&] { distillation_loss(a, at::randn({2, 4}), labels, 2, 0.5); },
              ThrowsMessage<sdk::Error>(HasSubstr("the teacher's have shape [2, 4], the model's "
                                                  "[2, 3]")));
}

// 8 features, 4 classes: a fixed random linear teacher, and random labels that carry nothing.
struct Problem {
  Dataset data;
  torch::nn::Linear teacher{nullptr};
  Problem() {
    torch::manual_seed(1);
    data.images = torch::randn({512, 8});
    data.labels = torch::randint(0, 4, {512}, at::kLong);
    data.source = "<random>";
    teacher = torch::nn::Linear(8, 4);
    torch::NoGradGuard no_grad;
    teacher->weight.mul_(4);  // confident, so its argmax is a clear function of the input
  }
  double agreement(torch::nn::Linear& student) {
    torch::NoGradGuard no_grad;
    return student->forward(data.images)
        .argmax(1)
        .eq(teacher->forward(data.images).argmax(1))
        .to(at::kDouble)
        .mean()
        .item<double>();
  }
};

TEST(DistillationTrainingTest, TheModelLearnsTheTeachersFunctionNotTheRandomLabels) {
  Problem p;
  const std::unique_ptr<Model> teacher = make_nn_model(p.teacher.ptr(), [&](const at::Tensor& x) {
    return p.teacher->forward(x);
  });
  double with_teacher = 0;
  double without = 0;
  for (const bool distil : {true, false}) {
    torch::manual_seed(2);
    torch::nn::Linear student(8, 4);
    const std::unique_ptr<Model> model =
        make_nn_model(student.ptr(), [&](const at::Tensor& x) { return student->forward(x); });
    TrainOptions options;
    options.epochs = 15;
    options.batch_size = 32;
    options.lr = 0.1;
    options.progress = false;
    options.teacher = distil ? teacher.get() : nullptr;
    options.kd_temperature = 2;
    options.kd_alpha = 1;
    train(*model, p.data, nullptr, options);
    (distil ? with_teacher : without) = p.agreement(student);
  }
  EXPECT_GT(with_teacher, 0.9) << "distilled: agrees with the teacher";
  EXPECT_LT(without, with_teacher - 0.3) << "labels alone: " << without;
  EXPECT_TRUE(p.teacher->is_training()) << "the teacher gets its mode back";
}

TEST(DistillationTrainingTest, ATeacherThatCannotTeachIsRefusedBeforeAnyWork) {
  Problem p;
  torch::nn::Linear other(8, 6);
  torch::nn::Linear student(8, 4);
  const at::Tensor before = student->weight.clone();
  const std::unique_ptr<Model> model =
      make_nn_model(student.ptr(), [&](const at::Tensor& x) { return student->forward(x); });
  const std::unique_ptr<Model> six =
      make_nn_model(other.ptr(), [&](const at::Tensor& x) { return other->forward(x); });
  TrainOptions options;
  options.progress = false;
  options.teacher = six.get();
  EXPECT_THAT([&] { train(*model, p.data, nullptr, options); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "the teacher model outputs shape [1, 6] on a sample of dataset '<random>', "
                  "the model being trained [1, 4]")));
  options.teacher = model.get();
  EXPECT_THAT([&] { train(*model, p.data, nullptr, options); },
              ThrowsMessage<sdk::Error>(HasSubstr("the teacher is the model being trained")));
  options.teacher = six.get();
  options.kd_alpha = -0.1;
  EXPECT_THAT([&] { train(*model, p.data, nullptr, options); },
              ThrowsMessage<sdk::Error>(HasSubstr("alpha must be in [0, 1], got -0.1")));
  EXPECT_TRUE(torch::equal(student->weight, before));
}

}  // namespace
}  // namespace lithe::host
