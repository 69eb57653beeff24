#include "observers.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace lithe::plugins::ptq {

float moving_average(float average, float value, float c) {
  const float step = c * (value - average);  // torch.ao: min_val + c * (min_now - min_val)
  return average + step;
}

namespace {

// Rounds a covering [start, start + kBins·width) to float32 (the saved state) so that it still
// covers [lo, hi]: a batch seen twice must not grow the histogram.
void round_covering(Histogram& h, double start, double width, double lo, double hi) {
  auto s = static_cast<float>(start);
  auto w = static_cast<float>(width);
  while (static_cast<double>(s) > lo) {
    s = std::nextafter(s, -std::numeric_limits<float>::infinity());
  }
  while (static_cast<double>(s) + static_cast<double>(kBins) * static_cast<double>(w) < hi) {
    w = std::nextafter(w, std::numeric_limits<float>::infinity());
  }
  h.start = s;
  h.width = w;
}

}  // namespace

void cover(Histogram& h, double lo, double hi) {
  const auto bins = static_cast<double>(kBins);
  if (h.empty()) {
    const double point = std::max(std::fabs(lo), 1.0) * 1e-6 / bins;  // a single value
    round_covering(h, lo, std::max((hi - lo) / bins, point), lo, hi);
    return;
  }
  const double end = h.end();
  if (lo >= h.start && hi <= end) {
    return;
  }
  const double new_lo = std::min(lo, h.start);
  const double new_hi = std::max(hi, end);
  if ((new_hi - new_lo) / (bins * h.width) > 0x1p40) {
    // The old histogram would fall into one new bin anyway: start over around its mass.
    double total = 0.0;
    for (double c : h.counts) {
      total += c;
    }
    const double centre = h.start + (end - h.start) / 2;
    h = Histogram();
    cover(h, new_lo, new_hi);
    const auto bin = static_cast<int64_t>((centre - h.start) / h.width);
    h.counts[static_cast<size_t>(std::clamp<int64_t>(bin, 0, kBins - 1))] = total;
    return;
  }
  const auto shift =
      lo < h.start ? static_cast<int64_t>(std::ceil((h.start - lo) / h.width)) : int64_t{0};
  const double start = h.start - static_cast<double>(shift) * h.width;
  int doublings = 1;
  while (start + bins * std::ldexp(h.width, doublings) < new_hi) {
    ++doublings;
  }
  std::vector<double> merged(static_cast<size_t>(kBins), 0.0);
  for (int64_t i = 0; i < kBins; ++i) {
    const int64_t bin = std::min((i + shift) >> doublings, kBins - 1);  // < kBins but for rounding
    merged[static_cast<size_t>(bin)] += h.counts[static_cast<size_t>(i)];
  }
  h.counts = std::move(merged);
  round_covering(h, start, std::ldexp(h.width, doublings), new_lo, new_hi);
}

double quantile(const Histogram& h, double q) {
  double total = 0.0;
  for (double c : h.counts) {
    total += c;
  }
  const double target = q * total;
  double below = 0.0;
  for (int64_t b = 0; b < kBins; ++b) {
    const double c = h.counts[static_cast<size_t>(b)];
    if (c > 0.0 && below + c >= target) {
      return h.start + h.width * (static_cast<double>(b) + std::max(target - below, 0.0) / c);
    }
    below += c;
  }
  return total > 0.0 ? h.end() : h.start;
}

double kl_threshold(const Histogram& h, int64_t levels) {
  if (levels >= kBins || h.empty()) {
    return h.end();
  }
  std::vector<double> counts = h.counts;
  counts[0] = counts[1];
  // Prefix sums over bins: mass, non-empty bins, Σ c·log c.
  std::vector<double> mass(kBins + 1, 0.0);
  std::vector<double> entropy(kBins + 1, 0.0);
  std::vector<int64_t> filled(kBins + 1, 0);
  for (size_t k = 0; k < static_cast<size_t>(kBins); ++k) {
    const double c = counts[k];
    mass[k + 1] = mass[k] + c;
    entropy[k + 1] = entropy[k] + (c > 0.0 ? c * std::log(c) : 0.0);
    filled[k + 1] = filled[k] + (c > 0.0 ? 1 : 0);
  }
  const double total = mass[kBins];
  if (!(total > 0.0)) {
    return h.end();
  }
  double best = std::numeric_limits<double>::infinity();
  int64_t best_bins = kBins;
  for (int64_t i = levels; i <= kBins; ++i) {
    const double outliers = total - mass[i];
    const double kept = mass[i];  // Q's total
    // Σ_k p_k log q_k: q is constant within a group (its mass over its non-empty bins), and
    // p sums to the group's mass, plus the outliers in the last group (bin i − 1).
    double p_log_q = 0.0;
    double last_q = 0.0;
    for (int64_t j = 0; j < levels; ++j) {
      const int64_t begin = (j * i + levels - 1) / levels;  // ceil(j·i / levels)
      const int64_t end = ((j + 1) * i + levels - 1) / levels;
      const double group = mass[end] - mass[begin];
      const int64_t nonzero = filled[end] - filled[begin];
      if (nonzero > 0) {
        const double q = group / static_cast<double>(nonzero);
        p_log_q += group * std::log(q);
        last_q = q;  // the last group holds bin i − 1
      }
    }
    const double last = counts[static_cast<size_t>(i - 1)];
    double p_log_p = entropy[i - 1];
    if (outliers > 0.0) {
      if (last == 0.0) {
        continue;  // P has mass where Q has none: an infinite divergence
      }
      p_log_q += outliers * std::log(last_q);
      p_log_p += (last + outliers) * std::log(last + outliers);
    } else {
      p_log_p += last > 0.0 ? last * std::log(last) : 0.0;
    }
    if (!(kept > 0.0)) {
      continue;
    }
    // KL(P‖Q) with P = p / total, Q = q / kept.
    const double divergence = (p_log_p - p_log_q) / total - std::log(total) + std::log(kept);
    if (divergence <= best) {
      best = divergence;
      best_bins = i;
    }
  }
  return static_cast<double>(best_bins) * h.width;
}

Ranges mse_ranges(const at::Tensor& values, const at::Tensor& weights, const Ranges& full,
                  const TypeConfig& config) {
  const int64_t rows = values.size(0);
  // Every candidate's range and grid, [step][row], on the host.
  std::vector<Ranges> candidates(kShrinkSteps);
  std::vector<float> scale;
  std::vector<float> zero_point;
  for (int step = 0; step < kShrinkSteps; ++step) {
    const double alpha = static_cast<double>(step + 1) / kShrinkSteps;
    for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
      candidates[static_cast<size_t>(step)].min.push_back(static_cast<float>(alpha * full.min[r]));
      candidates[static_cast<size_t>(step)].max.push_back(static_cast<float>(alpha * full.max[r]));
      const Params p = config.params(candidates[static_cast<size_t>(step)].min.back(),
                                     candidates[static_cast<size_t>(step)].max.back());
      scale.push_back(p.scale);
      zero_point.push_back(p.zero_point);
    }
  }
  const at::Tensor s_all =
      at::tensor(scale, at::kFloat).to(values.device()).view({kShrinkSteps, rows, 1});
  const at::Tensor z_all =
      at::tensor(zero_point, at::kFloat).to(values.device()).view({kShrinkSteps, rows, 1});
  // Σ w · (x − x̂)² per candidate and row, as few tensor operations as a budget of 2^24
  // elements per operation allows.
  const int64_t chunk = std::clamp<int64_t>(
      (int64_t{1} << 24) / std::max<int64_t>(values.numel(), 1), 1, kShrinkSteps);
  const at::Tensor v = values.unsqueeze(0);
  std::vector<at::Tensor> errors;
  for (int64_t first = 0; first < kShrinkSteps; first += chunk) {
    const int64_t count = std::min<int64_t>(chunk, kShrinkSteps - first);
    const at::Tensor s = s_all.narrow(0, first, count);
    const at::Tensor z = z_all.narrow(0, first, count);
    const at::Tensor q =
        at::clamp(v / s + z, static_cast<double>(config.qmin), static_cast<double>(config.qmax))
            .round_();
    at::Tensor error = ((q - z) * s - v).square_();
    if (weights.defined()) {
      error.mul_(weights.unsqueeze(0));
    }
    errors.push_back(error.sum(2, /*keepdim=*/false, at::kDouble));
  }
  const at::Tensor table = at::cat(errors).cpu().contiguous();  // [steps, rows]
  const double* e = table.data_ptr<double>();
  Ranges out = candidates.back();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = kShrinkSteps - 1;  // ties keep the wider range
    for (int64_t step = kShrinkSteps - 2; step >= 0; --step) {
      if (e[step * rows + r] < e[best * rows + r]) {
        best = step;
      }
    }
    out.min[static_cast<size_t>(r)] =
        candidates[static_cast<size_t>(best)].min[static_cast<size_t>(r)];
    out.max[static_cast<size_t>(r)] =
        candidates[static_cast<size_t>(best)].max[static_cast<size_t>(r)];
  }
  return out;
}

std::vector<float> row_quantiles(const at::Tensor& values, double q) {
  const at::Tensor sorted = std::get<0>(values.sort(1));
  const int64_t n = values.size(1);
  const double position = q * static_cast<double>(n - 1);
  const auto below = static_cast<int64_t>(std::floor(position));
  const int64_t above = std::min(below + 1, n - 1);
  const at::Tensor lo = sorted.select(1, below);
  const at::Tensor hi = sorted.select(1, above);
  const at::Tensor v =
      (lo + (hi - lo) * (position - static_cast<double>(below))).to(at::kFloat).cpu().contiguous();
  return {v.data_ptr<float>(), v.data_ptr<float>() + v.numel()};
}

}  // namespace lithe::plugins::ptq
