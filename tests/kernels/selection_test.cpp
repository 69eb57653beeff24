// Raw CPU selection kernel: exact k, (score, index) order, NaN/inf/-0 handling, and identical
// bytes for every thread count. The reference is a std::stable_sort of indices by score.

#include "lithe/kernels/selection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace lithe::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

/// keep mask by definition: stable-sort the indices by score (NaN after everything, -0 == +0)
/// and select the first k.
std::vector<float> reference_keep(const std::vector<float>& x, int64_t k, bool by_magnitude) {
  std::vector<int64_t> order(x.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  auto score = [&](int64_t i) { return by_magnitude ? std::fabs(x[i]) : x[i]; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float sa = score(a);
    const float sb = score(b);
    if (std::isnan(sa)) {
      return false;
    }
    return std::isnan(sb) || sa < sb;
  });
  std::vector<float> keep(x.size(), 1.0f);
  for (int64_t r = 0; r < k; ++r) {
    keep[static_cast<std::size_t>(order[static_cast<std::size_t>(r)])] = 0.0f;
  }
  return keep;
}

std::vector<float> select(const std::vector<float>& x, int64_t k, bool by_magnitude,
                          int num_threads = 1) {
  // Poisoned so that an element the kernel forgot to write shows up.
  std::vector<float> keep(x.size(), -7.0f);
  select_smallest_cpu(x.data(), static_cast<int64_t>(x.size()), k, by_magnitude, keep.data(),
                      num_threads);
  return keep;
}

int64_t count_zeros(const std::vector<float>& keep) {
  return std::count(keep.begin(), keep.end(), 0.0f);
}

std::vector<float> uniform(std::size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (auto& v : x) {
    v = dist(gen);
  }
  return x;
}

/// Values drawn from a small set, so most elements tie with many others.
std::vector<float> few_levels(std::size_t n, int levels, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-levels, levels);
  std::vector<float> x(n);
  for (auto& v : x) {
    v = static_cast<float>(dist(gen)) * 0.25f;
  }
  return x;
}

/// Rounds every `stride`-th value to a multiple of 1/scale, creating duplicates.
std::vector<float> rounded(std::vector<float> x, float scale, std::size_t stride) {
  for (std::size_t i = 0; i < x.size(); i += stride) {
    x[i] = std::round(x[i] * scale) / scale;
  }
  return x;
}

std::vector<int64_t> ks_for(int64_t n) {
  std::vector<int64_t> ks = {0, 1, 2, n / 7, n / 3, n / 2, (n * 4) / 5, n - 2, n - 1, n};
  ks.erase(std::remove_if(ks.begin(), ks.end(), [n](int64_t k) { return k < 0 || k > n; }),
           ks.end());
  return ks;
}

class SelectionSizeTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(SelectionSizeTest, SelectsExactlyKForManyK) {
  const int64_t n = GetParam();
  const std::vector<float> x = uniform(static_cast<std::size_t>(n), -1.0f, 1.0f, 7);
  for (const bool by_magnitude : {true, false}) {
    for (const int64_t k : ks_for(n)) {
      const std::vector<float> keep = select(x, k, by_magnitude);
      EXPECT_EQ(count_zeros(keep), k) << "n=" << n << " k=" << k << " mag=" << by_magnitude;
      EXPECT_EQ(std::count(keep.begin(), keep.end(), 1.0f), n - k) << "n=" << n << " k=" << k;
      EXPECT_EQ(keep, reference_keep(x, k, by_magnitude)) << "n=" << n << " k=" << k;
    }
  }
}

// 1..kSmallN-1 take the nth_element path, larger sizes the radix path.
INSTANTIATE_TEST_SUITE_P(Sizes, SelectionSizeTest,
                         ::testing::Values(1, 2, 3, 17, 1000, 8191, 8192, 70001, 300000));

TEST(SelectionTest, TiesAtThresholdGoToLowerIndex) {
  const std::vector<float> x = {3.0f, 1.0f, 2.0f, 1.0f, -1.0f, 2.0f, 1.0f, 0.5f};
  // |x| sorted: 0.5(7) 1(1) 1(3) 1(4) 1(6) 2(2) 2(5) 3(0); k = 3 takes 0.5 and the first two 1s.
  EXPECT_EQ(select(x, 3, true),
            (std::vector<float>{1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 1.0f, 1.0f, 0.0f}));
  // k = 6 takes every 1 and the first 2 (index 2), not index 5.
  EXPECT_EQ(select(x, 6, true),
            (std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f}));
}

TEST(SelectionTest, TiesAtThresholdGoToLowerIndexOnLargeInputs) {
  // Few levels: the threshold bucket holds most elements (multi-pass path).
  const std::vector<float> heavy = few_levels(200000, 4, 11);
  // Many duplicated values: small threshold bucket with duplicates (candidate-list path).
  const std::vector<float> light = rounded(uniform(400000, -1.0f, 1.0f, 12), 20000.0f, 1);
  for (const auto* x : {&heavy, &light}) {
    for (const bool by_magnitude : {true, false}) {
      for (const int64_t k : ks_for(static_cast<int64_t>(x->size()))) {
        EXPECT_EQ(select(*x, k, by_magnitude, 2), reference_keep(*x, k, by_magnitude))
            << "n=" << x->size() << " k=" << k << " mag=" << by_magnitude;
      }
    }
  }
}

TEST(SelectionTest, AllEqualInputSelectsFirstKIndices) {
  for (const int64_t n : {int64_t{5}, int64_t{100000}}) {
    const std::vector<float> x(static_cast<std::size_t>(n), 0.375f);
    for (const int64_t k : ks_for(n)) {
      const std::vector<float> keep = select(x, k, true, 4);
      std::vector<float> expected(static_cast<std::size_t>(n), 1.0f);
      std::fill(expected.begin(), expected.begin() + k, 0.0f);
      EXPECT_EQ(keep, expected) << "n=" << n << " k=" << k;
    }
  }
}

TEST(SelectionTest, NegativeZeroTiesWithPositiveZero) {
  const std::vector<float> x = {0.0f, -0.0f, 1.0f, -0.0f, 0.0f, -1.0f};
  // By magnitude the four zeros tie, so the first three indices of them are selected.
  EXPECT_EQ(select(x, 3, true), (std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f, 1.0f, 1.0f}));
  // Signed: -1 first, then the zeros in index order regardless of their sign bit.
  EXPECT_EQ(select(x, 3, false), (std::vector<float>{0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 0.0f}));
  std::vector<float> large(50000);
  for (std::size_t i = 0; i < large.size(); ++i) {
    large[i] = i % 3 == 0 ? -0.0f : (i % 3 == 1 ? 0.0f : 1.0f);
  }
  for (const bool by_magnitude : {true, false}) {
    EXPECT_EQ(select(large, 20000, by_magnitude, 2), reference_keep(large, 20000, by_magnitude));
  }
}

TEST(SelectionTest, NanOrdersAfterInfinity) {
  const std::vector<float> x = {kNan, kInf, -kInf, 1.0f, -kNan, -2.0f};
  // |x|: 1(3) 2(5) inf(1) inf(2) NaN(0) NaN(4).
  EXPECT_EQ(select(x, 4, true), (std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f}));
  EXPECT_EQ(select(x, 5, true), (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f}));
  // x: -inf(2) -2(5) 1(3) inf(1) NaN(0) NaN(4); a negative NaN is still a NaN.
  EXPECT_EQ(select(x, 3, false), (std::vector<float>{1.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f}));
  EXPECT_EQ(select(x, 4, false), (std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f}));

  std::vector<float> large = uniform(100000, -1e30f, 1e30f, 5);
  for (std::size_t i = 0; i < large.size(); i += 97) {
    large[i] = i % 2 == 0 ? kNan : -kNan;
  }
  for (std::size_t i = 1; i < large.size(); i += 89) {
    large[i] = i % 2 == 0 ? kInf : -kInf;
  }
  for (const bool by_magnitude : {true, false}) {
    for (const int64_t k : ks_for(static_cast<int64_t>(large.size()))) {
      EXPECT_EQ(select(large, k, by_magnitude, 2), reference_keep(large, k, by_magnitude))
          << "k=" << k << " mag=" << by_magnitude;
    }
  }
}

TEST(SelectionTest, SignedScoresSelectMostNegativeFirst) {
  const std::vector<float> x = {-5.0f, 3.0f, -1.0f, 0.0f, 2.0f, -0.5f};
  EXPECT_EQ(select(x, 2, false), (std::vector<float>{0.0f, 1.0f, 0.0f, 1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(select(x, 2, true), (std::vector<float>{1.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.0f}));
  const std::vector<float> large = uniform(120000, -3.0f, 1.0f, 9);
  const std::vector<float> keep = select(large, 60000, false, 2);
  EXPECT_EQ(keep, reference_keep(large, 60000, false));
  // Every selected value is <= every kept value.
  float max_selected = -kInf;
  float min_kept = kInf;
  for (std::size_t i = 0; i < large.size(); ++i) {
    if (keep[i] == 0.0f) {
      max_selected = std::max(max_selected, large[i]);
    } else {
      min_kept = std::min(min_kept, large[i]);
    }
  }
  EXPECT_LE(max_selected, min_kept);
  EXPECT_LT(max_selected, 0.0f);
}

TEST(SelectionTest, MatchesStableSortReferenceOnRandomInputs) {
  std::mt19937 gen(123);
  for (int trial = 0; trial < 24; ++trial) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 250000)(gen);
    std::vector<float> x;
    switch (trial % 4) {
      case 0:
        x = uniform(n, -1.0f, 1.0f, gen());
        break;
      case 1: {  // normal, like trained weights
        std::normal_distribution<float> dist(0.0f, 0.05f);
        x.resize(n);
        for (auto& v : x) {
          v = dist(gen);
        }
        break;
      }
      case 2:
        x = few_levels(n, 50, gen());
        break;
      default:  // a narrow range: every value shares the top 16 key bits
        x = uniform(n, 1.0f, 1.001f, gen());
        break;
    }
    const auto k = std::uniform_int_distribution<int64_t>(0, static_cast<int64_t>(n))(gen);
    const bool by_magnitude = trial % 3 != 0;
    const int threads = 1 + trial % 3;
    EXPECT_EQ(select(x, k, by_magnitude, threads), reference_keep(x, k, by_magnitude))
        << "trial=" << trial << " n=" << n << " k=" << k;
  }
}

TEST(SelectionTest, MaskIsByteIdenticalForOneTwoAndFourThreads) {
  const std::size_t n = 1 << 20;
  const std::vector<float> x = rounded(uniform(n, -1.0f, 1.0f, 3), 1000.0f, 3);  // many ties
  const std::vector<float> heavy = few_levels(n, 3, 4);
  for (const auto* input : {&x, &heavy}) {
    for (const bool by_magnitude : {true, false}) {
      const int64_t k = static_cast<int64_t>(static_cast<double>(n) * 0.8);
      const std::vector<float> one = select(*input, k, by_magnitude, 1);
      const std::vector<float> two = select(*input, k, by_magnitude, 2);
      const std::vector<float> four = select(*input, k, by_magnitude, 4);
      EXPECT_EQ(std::memcmp(one.data(), two.data(), n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(one.data(), four.data(), n * sizeof(float)), 0);
      EXPECT_EQ(count_zeros(one), k);
      EXPECT_EQ(one, reference_keep(*input, k, by_magnitude));
    }
  }
}

TEST(SelectionTest, DefaultThreadCountGivesTheSameMask) {
  const std::vector<float> x = few_levels(300000, 20, 8);
  EXPECT_EQ(select(x, 123456, true, 0), select(x, 123456, true, 1));
  EXPECT_EQ(select(x, 123456, true, -3), reference_keep(x, 123456, true));
}

TEST(ApplyMaskTest, MultipliesInPlace) {
  for (const int threads : {1, 2, 0}) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{600000}}) {
      std::vector<float> x = uniform(n, -2.0f, 2.0f, 21);
      std::vector<float> mask(n);
      for (std::size_t i = 0; i < n; ++i) {
        mask[i] = i % 3 == 0 ? 0.0f : 1.0f;
      }
      std::vector<float> expected(n);
      for (std::size_t i = 0; i < n; ++i) {
        expected[i] = x[i] * mask[i];
      }
      apply_mask_cpu(x.data(), mask.data(), static_cast<int64_t>(n), threads);
      EXPECT_EQ(x, expected) << "n=" << n << " threads=" << threads;
    }
  }
}

TEST(CudaBuildTest, CudaCompiledReportsTheBuildConfiguration) {
#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
  EXPECT_TRUE(cuda_compiled());
#else
  EXPECT_FALSE(cuda_compiled());
#endif
}

}  // namespace
}  // namespace lithe::kernels
