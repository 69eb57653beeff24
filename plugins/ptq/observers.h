#pragma once
// The observers' arithmetic: how a range [rmin, rmax] comes from what was observed. Histograms
// are searched on the host (2048 bins); the weight's percentile and MSE searches run over the
// weight itself in ATen. Declared for unit tests.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "ptq_config.h"

namespace lithe::plugins::ptq {

/// Bins of every histogram.
inline constexpr int64_t kBins = 2048;
/// The MSE observer's candidate ranges: [α·rmin, α·rmax] for α = i / kShrinkSteps, i = 1..100.
inline constexpr int kShrinkSteps = 100;

/// torch.ao's MovingAverageMinMaxObserver update, in float32: average + c · (value − average).
float moving_average(float average, float value, float c);

/// A histogram over [start, start + kBins · width): bin b counts the values in
/// [start + b·width, start + (b+1)·width) (the ends clamped into the first and last bin).
/// start and width are float32 values (they are saved as float32 state).
struct Histogram {
  std::vector<double> counts = std::vector<double>(kBins, 0.0);
  double start = 0.0;
  double width = 0.0;  ///< 0: nothing observed yet
  bool empty() const { return !(width > 0.0); }
  double end() const { return start + static_cast<double>(kBins) * width; }
};

/// Makes `h` cover [lo, hi] as well as what it covered. An empty histogram takes [lo, hi] (a
/// single point: a width of max(|lo|, 1)·1e−6 / kBins). A range outside it doubles the bin
/// width as often as needed and moves the start down by whole old bins, so each old bin falls
/// into exactly one new bin: counts are merged, never split or estimated.
void cover(Histogram& h, double lo, double hi);

/// The value with a fraction `q` (in [0, 1]) of the histogram's mass below it, the mass spread
/// uniformly within each bin. An empty histogram gives its start.
double quantile(const Histogram& h, double q);

/// TensorRT's entropy calibration (NVIDIA pytorch-quantization's _compute_amax_entropy) on a
/// histogram of |x| (start 0) for a grid of `levels` codes on [0, threshold]: for every
/// candidate i = levels..kBins bins, P = the first i bins with the mass beyond added to bin
/// i − 1, Q = those i bins merged into `levels` groups and spread back uniformly over each
/// group's non-empty bins; returns i·width for the i with the least KL(P ‖ Q) (the largest i
/// among equal divergences). Bin 0's count is replaced by bin 1's first (a spike of exact
/// zeros, e.g. after ReLU, would otherwise dominate). levels >= kBins, or no finite
/// divergence, gives the histogram's end (no clipping).
double kl_threshold(const Histogram& h, int64_t levels);

/// Ranges per row of a [rows, n] tensor.
struct Ranges {
  std::vector<float> min;
  std::vector<float> max;
};

/// The MSE search: for each row r of `values` ([rows, n], float32), the range
/// [α·rmin[r], α·rmax[r]] (each product rounded to float32; rmin ≤ 0 ≤ rmax) among
/// α = 1/100 … 100/100 whose grid (config.params) gives the least Σ w · (x − x̂)², x̂ the fake
/// quantization of x, w = `weights` (same shape; undefined: 1 each). Ties keep the wider range.
Ranges mse_ranges(const at::Tensor& values, const at::Tensor& weights, const Ranges& full,
                  const TypeConfig& config);

/// The q-quantile of each row of `values` ([rows, n], float32), linear between the sorted
/// values (torch.quantile's default).
std::vector<float> row_quantiles(const at::Tensor& values, double q);

}  // namespace lithe::plugins::ptq
