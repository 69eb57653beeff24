// Exact-k selection of the smallest scores by radix select over order-preserving uint32 keys.
// Each float maps to a key whose unsigned order is the score order (|x| or x; -0 == +0; NaN after
// +inf). A 16-bit histogram of the high half finds the bucket holding the k-th smallest key; the
// low half is resolved among that bucket only. Elements are ordered by (key, flat index), so
// exactly k are selected and ties at the threshold go to the lower index. The result is unique,
// hence byte-identical for every thread count and chunking.

#include "lithe/kernels/selection.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

namespace lithe::kernels {
namespace {

constexpr uint32_t kNanKey = 0xffffffffu;
constexpr int kDigitBits = 16;
constexpr std::size_t kBins = std::size_t{1} << kDigitBits;
constexpr uint32_t kLowMask = static_cast<uint32_t>(kBins - 1);
// Below this size a plain nth_element over packed (key, index) pairs is faster than histograms.
constexpr int64_t kSmallN = int64_t{1} << 13;
// Each thread gets at least this many elements; smaller inputs use fewer threads.
constexpr int64_t kMinPerThread = int64_t{1} << 18;
// Sub-blocks of the mask pass; only sub-blocks holding bucket members are rescanned.
constexpr int64_t kScanBlock = 64;
// Granularity of the tie-fixing pass (elements).
constexpr int64_t kTieBlock = int64_t{1} << 16;
// Longest part of the input counted with 32-bit histogram counters.
constexpr int64_t kMaxPart = int64_t{1} << 31;

inline uint32_t float_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

/// Key ordering like |x|: the IEEE pattern without the sign bit is monotone in magnitude and
/// maps -0 and +0 to the same key. NaN (any payload) becomes the largest key.
inline uint32_t magnitude_key(float v) {
  const uint32_t a = float_bits(v) & 0x7fffffffu;
  return a > 0x7f800000u ? kNanKey : a;
}

/// Key ordering like x: negatives have all bits flipped, non-negatives get the sign bit set.
/// -0 is canonicalised to +0 (they compare equal); NaN becomes the largest key (above +inf,
/// whose key is 0xff800000).
inline uint32_t signed_key(float v) {
  const uint32_t bits = float_bits(v);
  const uint32_t a = bits & 0x7fffffffu;
  const uint32_t flip = (bits >> 31) != 0u ? 0xffffffffu : 0x80000000u;
  const uint32_t key = a == 0u ? 0x80000000u : (bits ^ flip);
  return a > 0x7f800000u ? kNanKey : key;
}

template <bool kByMagnitude>
inline uint32_t key_of(float v) {
  if constexpr (kByMagnitude) {
    return magnitude_key(v);
  } else {
    return signed_key(v);
  }
}

/// Smallest bin b whose cumulative count reaches `rank` (1-based). Returns b and the count of
/// all bins below it.
struct BinHit {
  uint32_t bin;
  uint64_t below;
};
BinHit find_bin(const uint64_t* hist, uint64_t rank) {
  // Two levels: vectorisable group sums, then a scan inside the one group that holds the rank.
  constexpr std::size_t kGroup = 256;
  uint64_t below = 0;
  for (std::size_t g = 0; g < kBins; g += kGroup) {
    uint64_t group_sum = 0;
    for (std::size_t b = g; b < g + kGroup; ++b) {
      group_sum += hist[b];
    }
    if (below + group_sum >= rank) {
      for (std::size_t b = g; b < g + kGroup; ++b) {
        if (below + hist[b] >= rank) {
          return {static_cast<uint32_t>(b), below};
        }
        below += hist[b];
      }
    }
    below += group_sum;
  }
  return {static_cast<uint32_t>(kBins - 1), below};  // unreachable when rank <= total
}

/// Small inputs: nth_element over packed (key << 32 | index), which orders exactly like
/// (score, index) because the index is unique and fits in 32 bits here.
template <bool kByMagnitude>
void select_small(const float* x, int64_t n, int64_t k, float* keep) {
  std::vector<uint64_t> packed(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    packed[static_cast<std::size_t>(i)] =
        (static_cast<uint64_t>(key_of<kByMagnitude>(x[i])) << 32) | static_cast<uint64_t>(i);
  }
  std::nth_element(packed.begin(), packed.begin() + (k - 1), packed.end());
  const uint64_t kth = packed[static_cast<std::size_t>(k - 1)];
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t p =
        (static_cast<uint64_t>(key_of<kByMagnitude>(x[i])) << 32) | static_cast<uint64_t>(i);
    keep[i] = p <= kth ? 0.0f : 1.0f;
  }
}

/// Histogram of the high 16 bits of the keys in [begin, end) into `hist` (zeroed here).
template <bool kByMagnitude>
void high_histogram(const float* x, int64_t begin, int64_t end, uint32_t* hist) {
  std::fill(hist, hist + kBins, 0u);
  for (int64_t i = begin; i < end; ++i) {
    ++hist[key_of<kByMagnitude>(x[i]) >> kDigitBits];
  }
}

/// Histogram of the low 16 bits of the keys in [begin, end) whose high half equals `bucket`.
template <bool kByMagnitude>
void low_histogram(const float* x, int64_t begin, int64_t end, uint32_t bucket, uint32_t* hist) {
  std::fill(hist, hist + kBins, 0u);
  for (int64_t i = begin; i < end; ++i) {
    const uint32_t key = key_of<kByMagnitude>(x[i]);
    if ((key >> kDigitBits) == bucket) {
      ++hist[key & kLowMask];
    }
  }
}

/// hist[b] = sum over parts of part_hist[part][b]. Called inside a parallel region; bins are
/// split into slices so that the inner loop runs over contiguous bins and vectorises.
void merge_histograms(const uint32_t* part_hist, int64_t parts, uint64_t* hist) {
  constexpr int64_t kSlice = 4096;
#pragma omp for schedule(static)
  for (int64_t s = 0; s < static_cast<int64_t>(kBins); s += kSlice) {
    uint64_t* out = hist + s;
    const uint32_t* first = part_hist + s;
    for (int64_t b = 0; b < kSlice; ++b) {
      out[b] = first[b];
    }
    for (int64_t u = 1; u < parts; ++u) {
      const uint32_t* in = part_hist + kBins * static_cast<std::size_t>(u) + s;
      for (int64_t b = 0; b < kSlice; ++b) {
        out[b] += in[b];
      }
    }
  }
}

/// keep[i] = 0 below the bucket, 1 from it up (bucket members are fixed later); returns whether
/// any element of [x, x + len) falls in the bucket. Vectorises; `len` is a runtime value so that
/// GCC vectorises this loop rather than unrolling it.
template <bool kByMagnitude>
inline bool write_outside_bucket(const float* __restrict x, int64_t len, uint32_t bucket,
                                 float* __restrict keep) {
  uint32_t hit = 0;
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t hi = key_of<kByMagnitude>(x[j]) >> kDigitBits;
    keep[j] = hi < bucket ? 0.0f : 1.0f;
    hit |= hi == bucket ? 1u : 0u;
  }
  return hit != 0u;
}

/// keep[i] = key < threshold ? 0 : 1 (ties kept for now); returns the number of ties.
template <bool kByMagnitude>
inline uint32_t write_below_threshold(const float* __restrict x, int64_t len, uint32_t threshold,
                                      float* __restrict keep) {
  uint32_t ties = 0;
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t key = key_of<kByMagnitude>(x[j]);
    keep[j] = key < threshold ? 0.0f : 1.0f;
    ties += key == threshold ? 1u : 0u;
  }
  return ties;
}

struct Range {
  int64_t begin;
  int64_t end;
};
/// The contiguous range of part t out of `parts`; ranges are in part order.
Range part_range(int64_t n, int64_t t, int64_t parts) {
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  const int64_t begin = t * base + std::min(t, extra);
  return {begin, begin + base + (t < extra ? 1 : 0)};
}

/// Histogram buffers reused across calls by the calling thread: fresh 256 KiB+ allocations are
/// mmap'ed and page-faulted on every call, which dominated the time of mid-sized layers.
struct Scratch {
  std::vector<uint32_t> part_hist;  // kBins per part
  std::vector<uint64_t> hist;       // kBins, merged counts
};
Scratch& thread_scratch() {
  static thread_local Scratch scratch;
  return scratch;
}

template <bool kByMagnitude>
void select_radix(const float* x, int64_t n, int64_t k, float* keep, int nt) {
  // The input is split into `parts` contiguous, ordered ranges, at least one per thread and each
  // short enough for 32-bit counters. Parts are distributed by `parallel for`, so the partition
  // is the same in every phase whatever number of threads the runtime actually provides.
  const int64_t parts = std::max<int64_t>(nt, (n + kMaxPart - 1) / kMaxPart);
  // Every allocation happens outside the parallel regions (nothing may throw inside them).
  Scratch& scratch = thread_scratch();
  scratch.part_hist.resize(kBins * static_cast<std::size_t>(parts));
  scratch.hist.resize(kBins);
  uint32_t* const part_hist = scratch.part_hist.data();
  uint64_t* const hist = scratch.hist.data();

  // Phase 1: high-digit histogram per part, merged.
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < parts; ++t) {
      const Range r = part_range(n, t, parts);
      high_histogram<kByMagnitude>(x, r.begin, r.end,
                                   part_hist + kBins * static_cast<std::size_t>(t));
    }
    merge_histograms(part_hist, parts, hist);
  }
  const BinHit high = find_bin(hist, static_cast<uint64_t>(k));
  const uint32_t bucket = high.bin;
  const uint64_t need = static_cast<uint64_t>(k) - high.below;  // 1..bucket size
  const uint64_t bucket_size = hist[bucket];

  // Resolve the bucket from a list of its indices when it is small (the usual case for weights:
  // a 16-bit prefix leaves well under 1% of the elements); otherwise scan the input twice more.
  if (bucket_size <= static_cast<uint64_t>(std::max<int64_t>(n / 8, kSmallN))) {
    std::vector<int64_t> cand_offset(static_cast<std::size_t>(parts) + 1, 0);
    for (int64_t u = 0; u < parts; ++u) {
      cand_offset[static_cast<std::size_t>(u) + 1] =
          cand_offset[static_cast<std::size_t>(u)] +
          part_hist[kBins * static_cast<std::size_t>(u) + bucket];
    }
    std::unique_ptr<int64_t[]> candidates(new int64_t[bucket_size]);
    // Phase 2: one pass writes every mask value outside the bucket and lists the bucket's
    // indices in index order (parts are contiguous and ordered).
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < parts; ++t) {
      const Range r = part_range(n, t, parts);
      int64_t* out = candidates.get() + cand_offset[static_cast<std::size_t>(t)];
      for (int64_t p = r.begin; p < r.end; p += kScanBlock) {
        const int64_t len = std::min(kScanBlock, r.end - p);
        if (write_outside_bucket<kByMagnitude>(x + p, len, bucket, keep + p)) {
          for (int64_t i = p; i < p + len; ++i) {
            if ((key_of<kByMagnitude>(x[i]) >> kDigitBits) == bucket) {
              *out++ = i;
            }
          }
        }
      }
    }
    // Phase 3 (sequential, small): low-digit histogram of the bucket, then select in index
    // order, including the first `ties` elements equal to the threshold key.
    std::fill(hist, hist + kBins, uint64_t{0});
    for (uint64_t c = 0; c < bucket_size; ++c) {
      ++hist[key_of<kByMagnitude>(x[candidates[c]]) & kLowMask];
    }
    const BinHit lo = find_bin(hist, need);
    uint64_t ties = need - lo.below;
    for (uint64_t c = 0; c < bucket_size; ++c) {
      const int64_t i = candidates[c];
      const uint32_t l = key_of<kByMagnitude>(x[i]) & kLowMask;
      if (l < lo.bin) {
        keep[i] = 0.0f;
      } else if (l == lo.bin && ties > 0) {
        keep[i] = 0.0f;
        --ties;
      }
    }
    return;
  }

  // Heavy bucket (many ties or a narrow distribution): low-digit histogram over the input.
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < parts; ++t) {
      const Range r = part_range(n, t, parts);
      low_histogram<kByMagnitude>(x, r.begin, r.end, bucket,
                                  part_hist + kBins * static_cast<std::size_t>(t));
    }
    merge_histograms(part_hist, parts, hist);
  }
  const BinHit lo = find_bin(hist, need);
  const uint32_t threshold = (bucket << kDigitBits) | lo.bin;
  const uint64_t ties_to_select = need - lo.below;

  // Write the mask with ties kept, counting ties per block; then select the first ties in
  // index order using the per-block prefix (independent of the thread count).
  const int64_t num_blocks = (n + kTieBlock - 1) / kTieBlock;
  std::vector<int64_t> tie_count(static_cast<std::size_t>(num_blocks), 0);
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const int64_t begin = blk * kTieBlock;
      const int64_t end = std::min(n, begin + kTieBlock);
      tie_count[static_cast<std::size_t>(blk)] =
          write_below_threshold<kByMagnitude>(x + begin, end - begin, threshold, keep + begin);
    }
#pragma omp single
    {
      uint64_t remaining = ties_to_select;
      for (int64_t blk = 0; blk < num_blocks; ++blk) {
        const uint64_t here = static_cast<uint64_t>(tie_count[static_cast<std::size_t>(blk)]);
        const uint64_t take = std::min(remaining, here);
        tie_count[static_cast<std::size_t>(blk)] = static_cast<int64_t>(take);
        remaining -= take;
      }
    }
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      int64_t quota = tie_count[static_cast<std::size_t>(blk)];
      const int64_t end = std::min(n, (blk + 1) * kTieBlock);
      for (int64_t i = blk * kTieBlock; quota > 0 && i < end; ++i) {
        if (key_of<kByMagnitude>(x[i]) == threshold) {
          keep[i] = 0.0f;
          --quota;
        }
      }
    }
  }
}

int resolve_threads(int num_threads, int64_t n) {
  const int requested = num_threads > 0 ? num_threads : omp_get_max_threads();
  const int64_t useful = std::max<int64_t>(1, n / kMinPerThread);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(requested, useful)));
}

}  // namespace

void select_smallest_cpu(const float* x, int64_t n, int64_t k, bool by_magnitude, float* keep,
                         int num_threads) {
  if (n <= 0) {
    return;
  }
  if (k <= 0 || k >= n) {
    std::fill(keep, keep + n, k <= 0 ? 1.0f : 0.0f);
    return;
  }
  if (n < kSmallN) {
    by_magnitude ? select_small<true>(x, n, k, keep) : select_small<false>(x, n, k, keep);
    return;
  }
  const int nt = resolve_threads(num_threads, n);
  by_magnitude ? select_radix<true>(x, n, k, keep, nt) : select_radix<false>(x, n, k, keep, nt);
}

void apply_mask_cpu(float* x, const float* mask, int64_t n, int num_threads) {
  const int nt = resolve_threads(num_threads, n);
#pragma omp parallel for simd num_threads(nt) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    // Not x * mask: a pruned Inf or NaN weight must become exactly 0 (Inf * 0 is NaN).
    x[i] = mask[i] == 0.0f ? 0.0f : x[i];
  }
}

}  // namespace lithe::kernels
