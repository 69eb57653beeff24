// CPU-against-CUDA parity of every kernel (in the spirit of ggml's test-backend-ops): each entry
// point runs on the CPU and on a CUDA device with the same inputs (sizes from one element to
// several blocks of a grid, ties, signed zeros, infinities and NaN, strided views) and the
// results must be the same bits. Selection and masking are exact by construction; fake
// quantization is element-wise IEEE arithmetic (a correctly rounded division, round half to
// even, no fused multiply-add in the formula), so it must be exact too.
//
// Runs wherever the kernels were compiled with CUDA and libtorch sees a CUDA device; elsewhere
// every test skips and says which of the two is missing (.ci/run accepts that skip as the
// machine's, not the repository's).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lithe/kernels/fake_quant_ops.h"
#include "lithe/kernels/masking.h"
#include "lithe/kernels/selection.h"
#include "lithe/sdk/error.h"

#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lithe::kernels {
namespace {

// Empty when both the CUDA kernels and a CUDA device are here, else why not.
std::string why_no_cuda() {
  if (!cuda_compiled()) {
    return "the CUDA kernels are not compiled into this build (no CUDA compiler at configure "
           "time, or LITHE_WITH_CUDA=OFF)";
  }
  if (!at::hasCUDA()) {
    return "libtorch sees no CUDA device (a CPU-only libtorch, or no GPU on this machine)";
  }
  return "";
}

#define LITHE_REQUIRE_CUDA()                                         \
  do {                                                               \
    const std::string why = why_no_cuda();                           \
    if (!why.empty()) {                                              \
      GTEST_SKIP() << "CPU-vs-CUDA kernel parity not checked: " << why; \
    }                                                                \
  } while (0)

// Bitwise equality (signed zeros included) of two tensors of one dtype, except that any NaN
// matches any NaN: a GPU's arithmetic returns the canonical NaN (0x7fffffff) whatever the NaN it
// was given, while the CPU's SSE/AVX arithmetic keeps the input's payload, so where a kernel
// computes with a NaN the payloads differ by design; NaN positions must still agree.
::testing::AssertionResult same_bits(const at::Tensor& cpu, const at::Tensor& cuda) {
  at::Tensor a = cpu.contiguous();
  at::Tensor b = cuda.to(at::kCPU).contiguous();
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
    return ::testing::AssertionFailure() << "shape/dtype " << a.sizes() << " " << a.scalar_type()
                                         << " vs " << b.sizes() << " " << b.scalar_type();
  }
  if (a.is_floating_point()) {
    const at::Tensor nan_a = a.isnan();
    const at::Tensor nan_b = b.isnan();
    if (!at::equal(nan_a, nan_b)) {
      const int64_t first = nan_a.ne(nan_b).reshape({-1}).nonzero()[0][0].item<int64_t>();
      return ::testing::AssertionFailure()
             << "NaN positions differ; first at flat index " << first << ": CPU "
             << a.reshape({-1})[first].item<double>() << ", CUDA "
             << b.reshape({-1})[first].item<double>();
    }
    a = a.masked_fill(nan_a, 0);
    b = b.masked_fill(nan_b, 0);
  }
  const at::Tensor ia = a.scalar_type() == at::kFloat ? a.view(at::kInt) : a.to(at::kInt);
  const at::Tensor ib = b.scalar_type() == at::kFloat ? b.view(at::kInt) : b.to(at::kInt);
  const at::Tensor differ = ia.ne(ib);
  const int64_t count = differ.sum().item<int64_t>();
  if (count == 0) {
    return ::testing::AssertionSuccess();
  }
  const int64_t first = differ.reshape({-1}).nonzero()[0][0].item<int64_t>();
  return ::testing::AssertionFailure()
         << count << " of " << a.numel() << " elements differ; first at flat index " << first
         << ": CPU " << a.reshape({-1})[first].item<double>() << ", CUDA "
         << b.reshape({-1})[first].item<double>();
}

// Sizes around the CUDA kernels' block and grid boundaries, and a few million elements.
const std::vector<int64_t> kSizes = {1, 2, 31, 255, 256, 257, 1023, 4097, 65537, 1 << 22};

// Values with many exact ties (quarter steps), both zeros, and a few non-finite entries.
at::Tensor awkward_values(int64_t n, uint64_t seed, bool non_finite) {
  const auto generator = at::detail::createCPUGenerator(seed);
  at::Tensor x = at::round(at::randn({n}, generator) * 8) / 4;
  if (n > 8) {
    x[1] = -0.0;
    x[2] = 0.0;
    if (non_finite) {
      x[3] = std::numeric_limits<float>::infinity();
      x[4] = -std::numeric_limits<float>::infinity();
      x[5] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  return x;
}

TEST(KernelCudaParityTest, ExactKKeepMaskMatchesTheCpuForEverySizeAndK) {
  LITHE_REQUIRE_CUDA();
  for (const int64_t n : kSizes) {
    const at::Tensor scores = awkward_values(n, 100 + static_cast<uint64_t>(n), false);
    for (const int64_t k : {int64_t{0}, int64_t{1}, n / 3, n / 2, n - 1, n}) {
      if (k < 0 || k > n) {
        continue;
      }
      for (const bool by_magnitude : {false, true}) {
        const at::Tensor cpu = exact_k_keep_mask(scores, k, by_magnitude);
        const at::Tensor cuda = exact_k_keep_mask(scores.to(at::kCUDA), k, by_magnitude);
        EXPECT_TRUE(cuda.is_cuda());
        EXPECT_TRUE(same_bits(cpu, cuda))
            << "n " << n << " k " << k << " by_magnitude " << by_magnitude;
        EXPECT_EQ(cuda.eq(0).sum().item<int64_t>(), k) << "n " << n << " k " << k;
      }
    }
  }
  // A non-contiguous, double-precision view converts the same way on both devices.
  const at::Tensor wide = awkward_values(4096, 7, false).to(at::kDouble).view({64, 64}).t();
  EXPECT_TRUE(same_bits(exact_k_keep_mask(wide, 1000, true),
                        exact_k_keep_mask(wide.to(at::kCUDA), 1000, true)));
}

TEST(KernelCudaParityTest, ApplyMaskMatchesTheCpuWithNonFiniteWeights) {
  LITHE_REQUIRE_CUDA();
  for (const int64_t n : kSizes) {
    const at::Tensor weight = awkward_values(n, 200 + static_cast<uint64_t>(n), true);
    const at::Tensor mask =
        at::bernoulli(at::full({n}, 0.5), at::detail::createCPUGenerator(n)).to(at::kFloat);
    at::Tensor cpu = weight.clone();
    at::Tensor cuda = weight.to(at::kCUDA);
    apply_mask_(cpu, mask);
    apply_mask_(cuda, mask.to(at::kCUDA));
    EXPECT_TRUE(same_bits(cpu, cuda)) << "n " << n;
  }
  // Contiguous views that start 1, 2 or 3 elements past a 16-byte boundary take the scalar
  // kernel; 4 past it, the vector kernel with a scalar tail.
  const int64_t n = 4099;
  const at::Tensor weight = awkward_values(n + 8, 77, true);
  const at::Tensor mask =
      at::bernoulli(at::full({n + 8}, 0.5), at::detail::createCPUGenerator(78)).to(at::kFloat);
  for (const int64_t offset : {1, 2, 3, 4}) {
    at::Tensor cpu = weight.clone();
    at::Tensor cuda = weight.to(at::kCUDA);
    apply_mask_(cpu.narrow(0, offset, n), mask.narrow(0, offset, n));
    apply_mask_(cuda.narrow(0, offset, n), mask.to(at::kCUDA).narrow(0, offset, n));
    EXPECT_TRUE(same_bits(cpu, cuda)) << "offset " << offset;
  }
}

TEST(KernelCudaParityTest, PerTensorFakeQuantizationMatchesTheCpuInBothFormulas) {
  LITHE_REQUIRE_CUDA();
  struct Grid {
    double scale;
    double zero_point;
    int64_t qmin;
    int64_t qmax;
  };
  // uint8 affine, int8 symmetric, a 4-bit grid, a scale whose float32 rounding matters.
  const std::vector<Grid> grids = {
      {0.25, 128, 0, 255}, {0.0625, 0, -128, 127}, {0.5, 3, 0, 15}, {0.1, 17, 0, 255}};
  for (const int64_t n : kSizes) {
    const at::Tensor x = awkward_values(n, 300 + static_cast<uint64_t>(n), true) * 3;
    for (const Grid& g : grids) {
      for (const QuantFormula formula : {QuantFormula::kNni, QuantFormula::kAten}) {
        const FakeQuantResult cpu =
            fake_quantize_per_tensor(x, g.scale, g.zero_point, g.qmin, g.qmax, formula);
        const FakeQuantResult cuda = fake_quantize_per_tensor(x.to(at::kCUDA), g.scale,
                                                              g.zero_point, g.qmin, g.qmax, formula);
        EXPECT_TRUE(cuda.output.is_cuda());
        EXPECT_TRUE(same_bits(cpu.output, cuda.output))
            << "n " << n << " scale " << g.scale << " formula " << static_cast<int>(formula);
        EXPECT_TRUE(same_bits(cpu.mask, cuda.mask)) << "n " << n << " mask";
      }
    }
  }
  // Fractional zero points are NNI's (kNni only).
  const at::Tensor x = awkward_values(10000, 5, true);
  EXPECT_TRUE(same_bits(fake_quantize_per_tensor(x, 0.3, 7.5, 0, 255).output,
                        fake_quantize_per_tensor(x.to(at::kCUDA), 0.3, 7.5, 0, 255).output));
}

TEST(KernelCudaParityTest, PerChannelFakeQuantizationMatchesTheCpuOnEveryAxisAndStride) {
  LITHE_REQUIRE_CUDA();
  const auto generator = at::detail::createCPUGenerator(42);
  const at::Tensor x = at::round(at::randn({16, 8, 5, 7}, generator) * 40) / 16;
  for (int64_t axis = -4; axis < 4; ++axis) {
    const int64_t channels = x.size(axis);
    const at::Tensor scale = at::rand({channels}, generator) * 0.2 + 0.01;
    const at::Tensor zero_point = at::randint(0, 256, {channels}, generator).to(at::kFloat);
    for (const QuantFormula formula : {QuantFormula::kNni, QuantFormula::kAten}) {
      const FakeQuantResult cpu =
          fake_quantize_per_channel(x, scale, zero_point, axis, 0, 255, formula);
      const FakeQuantResult cuda =
          fake_quantize_per_channel(x.to(at::kCUDA), scale.to(at::kCUDA),
                                    zero_point.to(at::kCUDA), axis, 0, 255, formula);
      EXPECT_TRUE(same_bits(cpu.output, cuda.output)) << "axis " << axis;
      EXPECT_TRUE(same_bits(cpu.mask, cuda.mask)) << "axis " << axis;
    }
  }
  // A transposed (non-contiguous) input is read in logical order on both devices.
  const at::Tensor t = x.transpose(0, 3);
  const at::Tensor scale = at::full({t.size(0)}, 0.05);
  const at::Tensor zero_point = at::zeros({t.size(0)});
  EXPECT_TRUE(same_bits(
      fake_quantize_per_channel(t, scale, zero_point, 0, -128, 127).output,
      fake_quantize_per_channel(t.to(at::kCUDA), scale.to(at::kCUDA), zero_point.to(at::kCUDA), 0,
                                -128, 127)
          .output));
}

TEST(KernelCudaParityTest, ParametersOnAnotherDeviceThanTheInputAreRefused) {
  LITHE_REQUIRE_CUDA();
  const at::Tensor x = at::randn({4, 3}).to(at::kCUDA);
  EXPECT_THROW(fake_quantize_per_channel(x, at::full({3}, 0.1), at::zeros({3}), 1, 0, 255),
               sdk::Error);
  at::Tensor weight = at::randn({8}).to(at::kCUDA);
  EXPECT_THROW(apply_mask_(weight, at::ones({8})), sdk::Error);
}

#if defined(LITHE_HAS_CUDA) && LITHE_HAS_CUDA
// The kernels run on ATen's current stream: under a caller's CUDAStreamGuard with a non-blocking
// pool stream, each sees the inputs that stream's earlier ops wrote (a launch on another stream
// would race with them: the matmul in front keeps the stream busy for a while) and its outputs
// are ready once that stream is.
TEST(KernelCudaParityTest, KernelsRunOnTheCallersStream) {
  LITHE_REQUIRE_CUDA();
  const int64_t n = 1 << 22;
  const at::Tensor scores = awkward_values(n, 11, false);
  const at::Tensor weight = awkward_values(n, 12, true);
  const at::Tensor mask =
      at::bernoulli(at::full({n}, 0.5), at::detail::createCPUGenerator(13)).to(at::kFloat);
  const at::Tensor busy = at::randn({2048, 2048}).to(at::kCUDA);
  const at::Tensor scores_gpu = scores.to(at::kCUDA);
  const at::Tensor weight_gpu = weight.to(at::kCUDA);
  const at::Tensor mask_gpu = mask.to(at::kCUDA);
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::Tensor keep;
  at::Tensor masked;
  FakeQuantResult quantized;
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    // Written on `side` behind a queue of matmuls, then read by the kernels.
    at::Tensor sink = busy;
    for (int i = 0; i < 8; ++i) {
      sink = at::mm(sink, busy).div_(2048);
    }
    const at::Tensor x = scores_gpu.clone().add_(sink.sum().mul(0));
    masked = weight_gpu.clone().add_(sink.sum().mul(0));
    // The entry points that never wait first, while the matmuls still run; the selection,
    // which waits on the stream between its passes, last.
    apply_mask_(masked, mask_gpu);
    quantized = fake_quantize_per_tensor(x, 0.25, 128, 0, 255, QuantFormula::kAten);
    keep = exact_k_keep_mask(x, n / 2, true);
  }
  side.synchronize();
  EXPECT_TRUE(same_bits(exact_k_keep_mask(scores, n / 2, true), keep));
  at::Tensor masked_cpu = weight.clone();
  apply_mask_(masked_cpu, mask);
  EXPECT_TRUE(same_bits(masked_cpu, masked));
  EXPECT_TRUE(same_bits(fake_quantize_per_tensor(scores, 0.25, 128, 0, 255, QuantFormula::kAten)
                            .output,
                        quantized.output));
}

// apply_mask_ and per-tensor fake quantization neither wait for the device nor allocate outside
// ATen's allocator: both are illegal while a stream is captured into a CUDA graph, so capturing
// them succeeds only if they queue their kernels and return. Replaying the graph gives the
// results of eager calls.
TEST(KernelCudaParityTest, MaskingAndFakeQuantizationCaptureIntoACudaGraph) {
  LITHE_REQUIRE_CUDA();
  const int64_t n = 65537;
  const at::Tensor weight = awkward_values(n, 21, true).to(at::kCUDA);
  const at::Tensor mask =
      at::bernoulli(at::full({n}, 0.5), at::detail::createCPUGenerator(22)).to(at::kFloat);
  const at::Tensor mask_gpu = mask.to(at::kCUDA);
  at::Tensor target = at::empty_like(weight);
  FakeQuantResult quantized;
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    // Once outside the capture first (PyTorch's advice): lazy loading of the kernels' modules
    // and the allocator's first blocks happen here, not inside the graph.
    target.copy_(weight);
    apply_mask_(target, mask_gpu);
    (void)fake_quantize_per_tensor(weight, 0.1, 17, 0, 255, QuantFormula::kNni);
    side.synchronize();
    graph.capture_begin();
    target.copy_(weight);
    apply_mask_(target, mask_gpu);
    quantized = fake_quantize_per_tensor(weight, 0.1, 17, 0, 255, QuantFormula::kNni);
    graph.capture_end();
    target.fill_(7);
    graph.replay();
    side.synchronize();
  }
  at::Tensor expected = weight.cpu();
  apply_mask_(expected, mask);
  EXPECT_TRUE(same_bits(expected, target));
  EXPECT_TRUE(same_bits(fake_quantize_per_tensor(weight.cpu(), 0.1, 17, 0, 255).output,
                        quantized.output));
}
#endif

}  // namespace
}  // namespace lithe::kernels
