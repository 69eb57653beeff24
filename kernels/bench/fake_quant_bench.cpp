// Benchmark of the fused per-tensor fake quantization (y + STE mask in one pass) against
// at::fake_quantize_per_tensor_affine and std::memcpy of the same input bytes.
//
//   lithe_bench_fake_quant [--numel 67108864] [--repeats 7] [--threads 1]
//
// GB/s counts the bytes each operation reads plus the bytes it writes, divided by the median
// time: fused = 4n read + 4n y + n mask; ATen = 4n read + 4n y (the result it returns; its
// internal bool mask is not counted, which favours ATen); memcpy = 4n read + 4n written.
// The fused kernel and memcpy write into buffers allocated and touched before timing; ATen
// allocates its output (and mask) inside every call, as callers of the op always pay for.
// Input: randn * 2, scale = 6 / 255, zero point 128, range [0, 255] (about 1% clipped).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "bench_support.h"
#include "lithe/kernels/fake_quant.h"

namespace {

struct Args {
  int64_t numel = int64_t{64} << 20;
  int repeats = 7;
  int threads = 1;
};

Args parse_args(int argc, char** argv) {
  const lithe::bench::FlagParser flags("lithe_bench_fake_quant",
                                "[--numel N>=1] [--repeats N>=1] [--threads N>=1]");
  Args args;
  flags.parse(argc, argv, [&](const std::string& flag, const char* value) {
    if (flag == "--numel") {
      args.numel = flags.positive(flag, value, int64_t{1} << 31);
    } else if (flag == "--repeats") {
      args.repeats = static_cast<int>(flags.positive(flag, value, 1000));
    } else if (flag == "--threads") {
      args.threads = static_cast<int>(flags.positive(flag, value, 1024));
    } else {
      return false;
    }
    return true;
  });
  return args;
}

// One untimed warm-up run: first-touch page faults, thread pool start.
double median_seconds(int repeats, const std::function<void()>& fn) {
  return lithe::bench::median_seconds(repeats, fn, /*warmups=*/1);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  c10::NoGradGuard no_grad;
  at::set_num_threads(args.threads);
  const int64_t n = args.numel;
  const double scale = 6.0 / 255.0;
  const int64_t zero_point = 128;
  const int64_t qmin = 0;
  const int64_t qmax = 255;

  at::manual_seed(0);
  const at::Tensor x = at::randn({n}) * 2.0;
  const float* xp = x.data_ptr<float>();
  at::Tensor y = at::zeros({n});
  at::Tensor mask = at::zeros({n}, at::kByte);
  at::Tensor copy = at::zeros({n});
  at::Tensor aten_y;

  const auto nb = static_cast<double>(n);
  const double fused_bytes = 9.0 * nb;
  const double aten_bytes = 8.0 * nb;
  const double memcpy_bytes = 8.0 * nb;

  const auto run_fused = [&](lithe::kernels::QuantFormula formula) {
    lithe::kernels::fake_quant_per_tensor_cpu(xp, n, static_cast<float>(scale),
                                              static_cast<float>(zero_point), qmin, qmax,
                                              y.data_ptr<float>(), mask.data_ptr<uint8_t>(),
                                              formula, args.threads);
  };
  const double t_fused =
      median_seconds(args.repeats, [&] { run_fused(lithe::kernels::QuantFormula::kNni); });
  const double t_fused_aten_order =
      median_seconds(args.repeats, [&] { run_fused(lithe::kernels::QuantFormula::kAten); });
  const double t_aten = median_seconds(args.repeats, [&] {
    aten_y = at::fake_quantize_per_tensor_affine(x, scale, zero_point, qmin, qmax);
  });
  const double t_memcpy = median_seconds(args.repeats, [&] {
    std::memcpy(copy.data_ptr<float>(), xp, static_cast<std::size_t>(n) * sizeof(float));
  });
  // Sanity: the ATen-order kernel (the last fused run left y) must equal ATen bit for bit.
  run_fused(lithe::kernels::QuantFormula::kAten);
  const bool equal_to_aten = at::equal(y, aten_y);

  const double gbs_fused = fused_bytes / t_fused / 1e9;
  const double gbs_fused_aten_order = fused_bytes / t_fused_aten_order / 1e9;
  const double gbs_aten = aten_bytes / t_aten / 1e9;
  const double gbs_memcpy = memcpy_bytes / t_memcpy / 1e9;

  std::printf("numel: %lld floats (%.0f MiB); threads: %d (at::get_num_threads() = %d); "
              "repeats: %d (median, after 1 warm-up)\n",
              static_cast<long long>(n), nb * 4.0 / (1 << 20), args.threads,
              at::get_num_threads(), args.repeats);
  std::printf("scale = 6/255, zero_point = 128, range [0, 255]; GB/s = (read + write bytes) / "
              "time\n\n");
  std::printf("%-44s %10s %10s %8s\n", "operation", "ms", "GB/s", "bytes/el");
  std::printf("%-44s %10.1f %10.2f %8d\n", "lithe fused, NNI order (y + uint8 mask)",
              t_fused * 1e3, gbs_fused, 9);
  std::printf("%-44s %10.1f %10.2f %8d\n", "lithe fused, ATen order (y + uint8 mask)",
              t_fused_aten_order * 1e3, gbs_fused_aten_order, 9);
  std::printf("%-44s %10.1f %10.2f %8d\n", "at::fake_quantize_per_tensor_affine (y)",
              t_aten * 1e3, gbs_aten, 8);
  std::printf("%-44s %10.1f %10.2f %8d\n", "std::memcpy (same input bytes)", t_memcpy * 1e3,
              gbs_memcpy, 8);
  std::printf("\nfused / memcpy bandwidth: %.2f (target >= 0.70)\n", gbs_fused / gbs_memcpy);
  std::printf("fused / ATen bandwidth:   %.2f (target >= 5); ATen time / fused time: %.2f\n",
              gbs_fused / gbs_aten, t_aten / t_fused);
  std::printf("ATen-order fused output == at::fake_quantize_per_tensor_affine: %s\n",
              equal_to_aten ? "yes (bit-exact)" : "NO");
  return equal_to_aten ? 0 : 1;
}
