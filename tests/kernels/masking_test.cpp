// Tensor-level entry points: shapes, dtype conversion, layout handling and the error messages of
// every argument check.

#include "lithe/kernels/masking.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lithe/kernels/selection.h"
#include "lithe/sdk/error.h"

namespace lithe::kernels {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Property;
using ::testing::Throws;
using ::testing::ThrowsMessage;

int64_t zeros_in(const at::Tensor& t) { return (t == 0).sum().item<int64_t>(); }

TEST(ExactKKeepMaskTest, ReturnsFloatMaskShapedLikeScoresWithExactlyKZeros) {
  at::manual_seed(0);
  const at::Tensor scores = at::randn({64, 3, 3, 3});
  const at::Tensor keep = exact_k_keep_mask(scores, 1000, true);
  EXPECT_EQ(keep.sizes(), scores.sizes());
  EXPECT_EQ(keep.scalar_type(), at::kFloat);
  EXPECT_EQ(zeros_in(keep), 1000);
  EXPECT_EQ((keep == 1).sum().item<int64_t>(), scores.numel() - 1000);
  // Every pruned magnitude is <= every kept magnitude.
  const at::Tensor mag = scores.abs();
  EXPECT_LE(mag.masked_select(keep == 0).max().item<float>(),
            mag.masked_select(keep == 1).min().item<float>());
}

TEST(ExactKKeepMaskTest, BreaksTiesByLowerFlatIndex) {
  const at::Tensor scores = at::full({2, 3}, 0.5, at::kFloat);
  const at::Tensor keep = exact_k_keep_mask(scores, 4, true);
  EXPECT_TRUE(at::equal(keep, at::tensor({0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f}).view({2, 3})));
}

TEST(ExactKKeepMaskTest, ConvertsDoubleAndHalfScoresToFloat) {
  const at::Tensor scores = at::tensor({3.0, -1.0, 2.0, 0.25, -4.0}, at::kDouble);
  const at::Tensor expected = at::tensor({1.0f, 0.0f, 1.0f, 0.0f, 1.0f});
  for (const auto dtype : {at::kDouble, at::kHalf, at::kBFloat16, at::kFloat}) {
    const at::Tensor keep = exact_k_keep_mask(scores.to(dtype), 2, true);
    EXPECT_EQ(keep.scalar_type(), at::kFloat) << dtype;
    EXPECT_TRUE(at::equal(keep, expected)) << dtype;
  }
}

TEST(ExactKKeepMaskTest, NonContiguousScoresUseLogicalElementOrder) {
  at::manual_seed(1);
  const at::Tensor base = at::randn({300, 200});
  const at::Tensor transposed = base.t();
  ASSERT_FALSE(transposed.is_contiguous());
  const at::Tensor keep = exact_k_keep_mask(transposed, 30000, false);
  EXPECT_EQ(keep.sizes(), transposed.sizes());
  EXPECT_TRUE(at::equal(keep, exact_k_keep_mask(transposed.contiguous(), 30000, false)));
  // Signed order: the selected entries are the 30000 smallest values.
  EXPECT_LE(transposed.masked_select(keep == 0).max().item<float>(),
            transposed.masked_select(keep == 1).min().item<float>());
}

TEST(ExactKKeepMaskTest, AcceptsEmptyAndScalarScores) {
  const at::Tensor empty = exact_k_keep_mask(at::empty({0, 4}), 0, true);
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 4}));
  const at::Tensor scalar = exact_k_keep_mask(at::scalar_tensor(2.0), 1, true);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<float>(), 0.0f);
}

TEST(ExactKKeepMaskTest, RejectsKAboveNumelNamingTheValue) {
  const at::Tensor scores = at::ones({2, 3});
  EXPECT_THAT([&] { (void)exact_k_keep_mask(scores, 7, true); },
              ThrowsMessage<sdk::Error>(
                  AllOf(HasSubstr("k must be in [0, numel] = [0, 6]"), HasSubstr("got 7"))));
  EXPECT_THAT([&] { (void)exact_k_keep_mask(scores, 7, true); },
              Throws<sdk::Error>(Property(&sdk::Error::code, sdk::Errc::kInvalidConfig)));
}

TEST(ExactKKeepMaskTest, RejectsNegativeKNamingTheValue) {
  EXPECT_THAT([] { (void)exact_k_keep_mask(at::ones({4}), -1, true); },
              ThrowsMessage<sdk::Error>(HasSubstr("k must be in [0, numel] = [0, 4] for scores "
                                                  "of shape [4], got -1")));
}

TEST(ExactKKeepMaskTest, RejectsIntegerScoresNamingTheDtype) {
  const at::Tensor scores = at::arange(10);
  EXPECT_THAT([&] { (void)exact_k_keep_mask(scores, 3, true); },
              ThrowsMessage<sdk::Error>(HasSubstr("scores must have a floating dtype, got Long")));
  EXPECT_THAT([&] { (void)exact_k_keep_mask(scores, 3, true); },
              Throws<sdk::Error>(Property(&sdk::Error::code, sdk::Errc::kDeviceMismatch)));
}

TEST(ExactKKeepMaskTest, RejectsUndefinedScores) {
  EXPECT_THAT([] { (void)exact_k_keep_mask(at::Tensor(), 0, true); },
              ThrowsMessage<sdk::Error>(HasSubstr("scores must be a defined tensor")));
}

TEST(ExactKKeepMaskTest, RejectsDevicesWithoutKernelsNamingTheDevice) {
  const at::Tensor scores = at::empty({4}, at::TensorOptions().device(at::kMeta));
  EXPECT_THAT(
      [&] { (void)exact_k_keep_mask(scores, 1, true); },
      ThrowsMessage<sdk::Error>(HasSubstr("scores must be on the CPU or a CUDA device, got meta")));
  EXPECT_THAT([&] { (void)exact_k_keep_mask(scores, 1, true); },
              Throws<sdk::Error>(Property(&sdk::Error::code, sdk::Errc::kDeviceMismatch)));
}

TEST(ExactKKeepMaskTest, RejectsSparseScores) {
  const at::Tensor sparse = at::ones({3, 3}).to_sparse();
  EXPECT_THAT([&] { (void)exact_k_keep_mask(sparse, 1, true); },
              ThrowsMessage<sdk::Error>(HasSubstr("scores must be a dense (strided) tensor")));
}

TEST(ApplyMaskTest, ZeroesMaskedWeightsInPlace) {
  at::manual_seed(2);
  const at::Tensor weight = at::randn({128, 64, 3, 3});
  const at::Tensor original = weight.clone();
  const at::Tensor mask = exact_k_keep_mask(weight, weight.numel() / 2, true);
  const void* storage = weight.data_ptr();
  apply_mask_(weight, mask);
  EXPECT_EQ(weight.data_ptr(), storage);
  EXPECT_TRUE(at::equal(weight, original * mask));
  EXPECT_EQ(zeros_in(weight), weight.numel() / 2);
}

TEST(ApplyMaskTest, HandlesNonContiguousAndDoubleWeights) {
  const at::Tensor base = at::arange(1, 13, at::kFloat).view({3, 4});
  const at::Tensor weight = base.t();  // a non-contiguous view: the update must reach `base`
  const at::Tensor mask =
      at::tensor({1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f})
          .view({4, 3});
  apply_mask_(weight, mask);
  EXPECT_TRUE(at::equal(base, (at::arange(1, 13, at::kFloat).view({3, 4}).t() * mask).t()));

  const at::Tensor dweight = at::full({2, 2}, 3.0, at::kDouble);
  apply_mask_(dweight, at::tensor({0.0, 1.0, 1.0, 0.0}, at::kDouble).view({2, 2}));
  EXPECT_TRUE(at::equal(dweight, at::tensor({0.0, 3.0, 3.0, 0.0}, at::kDouble).view({2, 2})));
}

TEST(ApplyMaskTest, WorksOnLeafThatRequiresGrad) {
  const at::Tensor weight = at::ones({4}).set_requires_grad(true);
  apply_mask_(weight, at::tensor({0.0f, 1.0f, 0.0f, 1.0f}));
  EXPECT_TRUE(at::equal(weight.detach(), at::tensor({0.0f, 1.0f, 0.0f, 1.0f})));
}

TEST(ApplyMaskTest, RejectsShapeMismatchNamingBothShapes) {
  const at::Tensor weight = at::ones({3, 2});
  EXPECT_THAT(
      [&] {
        apply_mask_(weight, at::ones({2, 3}));
      },
      ThrowsMessage<sdk::Error>(HasSubstr("mask shape [2, 3] must equal weight shape [3, 2]")));
  EXPECT_THAT([&] { apply_mask_(weight, at::ones({6})); },
              Throws<sdk::Error>(Property(&sdk::Error::code, sdk::Errc::kShapeMismatch)));
}

TEST(ApplyMaskTest, RejectsDtypeMismatchNamingBothDtypes) {
  EXPECT_THAT([] { apply_mask_(at::ones({4}), at::ones({4}, at::kDouble)); },
              ThrowsMessage<sdk::Error>(
                  HasSubstr("mask dtype must equal the weight dtype Float, got Double")));
  EXPECT_THAT([] { apply_mask_(at::ones({4}), at::ones({4}, at::kDouble)); },
              Throws<sdk::Error>(Property(&sdk::Error::code, sdk::Errc::kDeviceMismatch)));
}

TEST(ApplyMaskTest, RejectsIntegerWeights) {
  EXPECT_THAT([] { apply_mask_(at::ones({4}, at::kInt), at::ones({4}, at::kInt)); },
              ThrowsMessage<sdk::Error>(HasSubstr("weight must have a floating dtype, got Int")));
}

TEST(ApplyMaskTest, RejectsDeviceMismatchNamingBothDevices) {
  const at::Tensor meta = at::empty({4}, at::TensorOptions().device(at::kMeta));
  EXPECT_THAT(
      [&] { apply_mask_(at::ones({4}), meta); },
      ThrowsMessage<sdk::Error>(HasSubstr("mask must be on the weight's device cpu, got meta")));
  EXPECT_THAT(
      [&] { apply_mask_(meta, meta); },
      ThrowsMessage<sdk::Error>(HasSubstr("weight must be on the CPU or a CUDA device, got meta")));
}

TEST(ApplyMaskTest, RejectsUndefinedTensors) {
  EXPECT_THAT([] { apply_mask_(at::ones({4}), at::Tensor()); },
              ThrowsMessage<sdk::Error>(
                  HasSubstr("weight and mask must be defined tensors, got a defined weight and an "
                            "undefined mask")));
}

}  // namespace
}  // namespace lithe::kernels
