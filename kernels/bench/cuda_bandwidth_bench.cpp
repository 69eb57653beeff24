// Bandwidth of every CUDA kernel against the device's own copy bandwidth and against the ATen
// operation a caller would otherwise use, on one GPU, in one run:
//
//   lithe_bench_cuda_bandwidth [--numel 67108864] [--repeats 21] [--device 0]
//
// Each row is the median of --repeats timed calls (after two untimed ones), each call bracketed
// by a device synchronisation, so a row is what a caller waits for. GB/s counts the bytes a
// kernel must read plus the bytes it must write once (its minimum traffic), divided by the
// median time; "of copy" is that figure over the device-to-device copy's, which counts 4n read
// plus 4n written. Selection makes several passes over its input, so its figure is the
// effective rate of a one-pass equivalent, not the memory traffic it really causes.
//
//   copy                  x.copy_(y)                                    8n bytes
//   apply_mask_           x *= mask (float mask)                        12n
//   torch mul_            x.mul_(mask), the ATen way                    12n
//   fake_quant tensor     y, bool mask from x (NNI formula)             9n
//   fake_quant channel    same, 256 channels along axis 0               9n
//   aten fake_quant       at::fake_quantize_per_tensor_affine (y only)  8n
//   exact_k_keep_mask     keep mask of the n/2 smallest |x|             8n
//   torch kthvalue+ge     |x|.kthvalue + compare, the ATen way          8n
//
// Prints one table row per operation; exits 2 on a bad flag and 1 when no
// CUDA device or no CUDA kernels are there (saying which).

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>

#include "bench_support.h"
#include "lithe/kernels/fake_quant_ops.h"
#include "lithe/kernels/masking.h"
#include "lithe/kernels/selection.h"

namespace {

struct Args {
  int64_t numel = int64_t{64} << 20;
  int repeats = 21;
  int64_t device = 0;
};

Args parse_args(int argc, char** argv) {
  const lithe::bench::FlagParser flags("lithe_bench_cuda_bandwidth",
                                       "[--numel 256*K] [--repeats N>=1] [--device N>=0]");
  Args args;
  flags.parse(argc, argv, [&](const std::string& flag, const char* value) {
    if (flag == "--numel") {
      args.numel = flags.positive(flag, value, int64_t{1} << 31);
      if (args.numel % 256 != 0) {
        flags.fail("--numel must be a multiple of 256 (the per-channel row has 256 channels), "
                   "got " + std::string(value));
      }
    } else if (flag == "--repeats") {
      args.repeats = static_cast<int>(flags.positive(flag, value, 1000));
    } else if (flag == "--device") {
      // positive() accepts [1, max]: shift by one so that device 0 is accepted.
      args.device = flags.positive(flag, std::to_string(std::atoll(value) + 1).c_str(), 1000) - 1;
      if (std::to_string(args.device) != value) {
        flags.fail("--device must be an integer in [0, 999], got '" + std::string(value) + "'");
      }
    } else {
      return false;
    }
    return true;
  });
  return args;
}

struct Row {
  const char* name;
  double bytes_per_element;
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  if (!lithe::kernels::cuda_compiled()) {
    std::cerr << "lithe_bench_cuda_bandwidth: the CUDA kernels are not compiled into this build\n";
    return 1;
  }
  if (!torch::cuda::is_available() ||
      args.device >= static_cast<int64_t>(torch::cuda::device_count())) {
    std::cerr << "lithe_bench_cuda_bandwidth: libtorch sees " << torch::cuda::device_count()
              << " CUDA device(s); device " << args.device << " is not one of them\n";
    return 1;
  }
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(args.device));
  const int64_t n = args.numel;
  const auto gen = at::detail::createCPUGenerator(7);
  const at::Tensor x = (at::randn({n}, gen) * 2).to(device);
  at::Tensor scratch = at::empty_like(x);
  const at::Tensor mask = at::rand({n}, gen).ge(0.5).to(at::kFloat).to(device);
  const int64_t channels = 256;
  const at::Tensor x_channels = x.view({channels, -1});
  const at::Tensor ch_scale = at::full({channels}, 6.0 / 255, x.options());
  const at::Tensor ch_zero = at::full({channels}, 128.0, x.options());

  auto sync = [&] { torch::cuda::synchronize(args.device); };
  auto time = [&](const std::function<void()>& fn) {
    return lithe::bench::median_seconds(
        args.repeats,
        [&] {
          fn();
          sync();
        },
        /*warmups=*/2);
  };

  const double copy_s = time([&] { scratch.copy_(x); });
  const double copy_gbs = 8.0 * static_cast<double>(n) / copy_s / 1e9;

  std::printf("CUDA device %lld, n = %lld float32 elements (%.0f MiB), median of %d calls\n",
              static_cast<long long>(args.device), static_cast<long long>(n), 4.0 * static_cast<double>(n) / (1 << 20), args.repeats);
  std::printf("%-22s %10s %10s %9s\n", "operation", "median ms", "GB/s", "of copy");
  auto report = [&](const Row& row, double seconds) {
    const double gbs = row.bytes_per_element * static_cast<double>(n) / seconds / 1e9;
    std::printf("%-22s %10.3f %10.1f %9.2f\n", row.name, seconds * 1e3, gbs, gbs / copy_gbs);
  };
  report({"copy", 8}, copy_s);
  report({"apply_mask_", 12}, time([&] { lithe::kernels::apply_mask_(scratch, mask); }));
  report({"torch mul_", 12}, time([&] { scratch.mul_(mask); }));
  report({"fake_quant tensor", 9}, time([&] {
           (void)lithe::kernels::fake_quantize_per_tensor(x, 6.0 / 255, 128, 0, 255);
         }));
  report({"fake_quant channel", 9}, time([&] {
           (void)lithe::kernels::fake_quantize_per_channel(x_channels, ch_scale, ch_zero, 0, 0,
                                                           255);
         }));
  report({"aten fake_quant", 8},
         time([&] { (void)at::fake_quantize_per_tensor_affine(x, 6.0 / 255, 128, 0, 255); }));
  report({"exact_k_keep_mask", 8},
         time([&] { (void)lithe::kernels::exact_k_keep_mask(x, n / 2, /*by_magnitude=*/true); }));
  report({"torch kthvalue+ge", 8}, time([&] {
           const at::Tensor a = x.abs();
           const at::Tensor kth = std::get<0>(a.kthvalue(n / 2));
           (void)a.gt(kth);
         }));
  return 0;
}
