// Fused fake quantization + STE mask (see lithe/kernels/fake_quant.h for the rules).
//
// Bit-exactness: every element goes through the same float32 operations in the same order as the
// code it reproduces (NNI: x / scale + zp, one IEEE division; ATen: x * (1.0f / scale), then
// + zp), with round-half-even from nearbyint / ROUNDPS in the default rounding mode. No FMA is
// used anywhere (an FMA would round once where the reference rounds twice), and this file must
// never be built with -ffast-math.
//
// Speed: the loop is memory bound only when it is vectorised with a rounding instruction, which
// the x86-64 baseline (SSE2) lacks; GCC then calls nearbyintf per element (~2 GB/s). So on x86-64
// an AVX2 body is compiled with a target attribute and picked at run time when the CPU has AVX2;
// the portable scalar body is the fallback and the reference for the tails.
//
// Threading: the input is cut into fixed chunks of kChunk elements (per-channel: rows cut the
// same way) handed out by a static OpenMP schedule. Elements are independent, so the output does
// not depend on the chunking or the thread count at all; the fixed chunking only keeps the work
// split reproducible.

#include "lithe/kernels/fake_quant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LITHE_FQ_X86 1
#include <immintrin.h>
#else
#define LITHE_FQ_X86 0
#endif

namespace lithe::kernels {
namespace {

constexpr int64_t kChunk = int64_t{1} << 16;          // elements per scheduling unit
constexpr int64_t kMinPerThread = int64_t{1} << 18;   // smaller inputs use fewer threads
constexpr float kTwo63 = 9223372036854775808.0f;      // 2^63, exactly representable

/// The integer grid an element lands on, and what happens off it. QuantFormula::kAten is
/// ATen's per-tensor kernel with per-tensor parameters and its per-channel kernel with
/// per-channel ones, and libtorch 2.x's two kernels differ off the grid.
enum class Grid : uint8_t {
  kNni,             ///< QuantFormula::kNni
  kAtenSaturating,  ///< ATen's per-tensor kernel: q = fmin(fmax(r, qmin), qmax), so NaN and
                    ///< -inf go to qmin and +inf (or anything above) to qmax; mask 0 off the grid
  kAtenInt64,       ///< ATen's per-channel kernel: r converted to int64 first, so NaN, +-inf and
                    ///< |r| >= 2^63 become INT64_MIN (q = qmin, mask 0)
};

/// Per-call constants of one (scale, zero_point) pair, converted once.
struct Params {
  float scale;
  float inv_scale;  // 1.0f / scale in float32, as ATen computes it (only ATen's grids use it)
  float zero_point;
  float qmin;
  float qmax;
};

Params make_params(float scale, float zero_point, int64_t qmin, int64_t qmax) {
  return {scale, 1.0f / scale, zero_point, static_cast<float>(qmin), static_cast<float>(qmax)};
}

/// ATen's integer-grid value r of one element, before clamping:
/// static_cast<int64_t>(z_point + std::nearbyint(x * inv_scale)). The int64 conversion of NaN,
/// inf or anything outside [-2^63, 2^63) yields INT64_MIN on x86 (cvttss2si's "integer
/// indefinite"); -inf reproduces what that value does downstream (q = qmin, mask 0) without
/// undefined behaviour.
inline float aten_grid_value(float v, const Params& p) {
  const float r = std::nearbyint(v * p.inv_scale) + p.zero_point;
  return (r >= -kTwo63 && r < kTwo63) ? r : -std::numeric_limits<float>::infinity();
}

/// Scalar body over [0, len): the reference semantics. Grid::kNni clamps v = x / scale + zp before
/// rounding, as NNI's QAT_Quantizer does (round(clamp(v))); this differs from clamp(round(v)) only
/// in the sign of a zero result (v in [-0.5, 0) with qmin = 0 gives +0, not -0). The mask always
/// comes from the unclamped r. NaN (Grid::kNni) fails every comparison, so q stays NaN
/// (torch.clamp propagates NaN) and the mask is 1 (QATGrad zeroes only where r < qmin or
/// r > qmax).
template <Grid G>
void span_scalar(const float* x, int64_t len, const Params& p, float* y, uint8_t* mask) {
  for (int64_t i = 0; i < len; ++i) {
    float r;
    float q;
    bool inside;
    if constexpr (G == Grid::kNni) {
      const float v = x[i] / p.scale + p.zero_point;
      r = std::nearbyint(v);
      q = std::nearbyint(v < p.qmin ? p.qmin : (v > p.qmax ? p.qmax : v));
      inside = !(r < p.qmin || r > p.qmax);
    } else if constexpr (G == Grid::kAtenSaturating) {
      r = std::nearbyint(x[i] * p.inv_scale) + p.zero_point;
      q = std::fmin(std::fmax(r, p.qmin), p.qmax);  // fmax(NaN, qmin) is qmin
      inside = p.qmin <= r && r <= p.qmax;
    } else {
      r = aten_grid_value(x[i], p);
      q = r < p.qmin ? p.qmin : (r > p.qmax ? p.qmax : r);
      inside = !(r < p.qmin || r > p.qmax);
    }
    y[i] = (q - p.zero_point) * p.scale;
    if (mask != nullptr) {
      mask[i] = inside ? 1 : 0;
    }
  }
}

#if LITHE_FQ_X86

/// Eight mask bytes (0/1) for every 8-bit lane pattern of _mm256_movemask_ps.
struct MaskBytes {
  uint64_t bytes[256];
  constexpr MaskBytes() : bytes() {
    for (int m = 0; m < 256; ++m) {
      uint64_t b = 0;
      for (int lane = 0; lane < 8; ++lane) {
        if ((m >> lane) & 1) {
          b |= uint64_t{1} << (8 * lane);  // little-endian: lane k is byte k
        }
      }
      bytes[m] = b;
    }
  }
};
constexpr MaskBytes kMaskBytes{};

/// AVX2 body (no FMA: the target list deliberately omits it so nothing can be contracted).
template <Grid G>
__attribute__((target("avx2"))) void span_avx2(const float* x, int64_t len, const Params& p,
                                               float* y, uint8_t* mask) {
  const __m256 scale = _mm256_set1_ps(p.scale);
  const __m256 inv_scale = _mm256_set1_ps(p.inv_scale);
  const __m256 zp = _mm256_set1_ps(p.zero_point);
  const __m256 qmin = _mm256_set1_ps(p.qmin);
  const __m256 qmax = _mm256_set1_ps(p.qmax);
  const __m256 lo_valid = _mm256_set1_ps(-kTwo63);
  const __m256 hi_valid = _mm256_set1_ps(kTwo63);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // half to even
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 q;
    __m256 inside;
    if constexpr (G == Grid::kNni) {
      const __m256 t = _mm256_add_ps(_mm256_div_ps(v, scale), zp);
      const __m256 r = _mm256_round_ps(t, kRound);
      // !(r < qmin) && !(r > qmax): unordered (NaN) counts as inside, like the scalar body.
      inside = _mm256_and_ps(_mm256_cmp_ps(r, qmin, _CMP_NLT_UQ),
                             _mm256_cmp_ps(r, qmax, _CMP_NGT_UQ));
      // Clamp, then round (NNI's order). MAXPS/MINPS return the second operand when one is NaN:
      // t second keeps NaN.
      q = _mm256_round_ps(_mm256_min_ps(qmax, _mm256_max_ps(qmin, t)), kRound);
    } else if constexpr (G == Grid::kAtenSaturating) {
      const __m256 r = _mm256_add_ps(_mm256_round_ps(_mm256_mul_ps(v, inv_scale), kRound), zp);
      // Ordered comparisons: NaN is outside. MAXPS returns its second operand for NaN: qmin.
      inside = _mm256_and_ps(_mm256_cmp_ps(r, qmin, _CMP_GE_OQ),
                             _mm256_cmp_ps(r, qmax, _CMP_LE_OQ));
      q = _mm256_min_ps(_mm256_max_ps(r, qmin), qmax);
    } else {
      __m256 r;
      r = _mm256_add_ps(_mm256_round_ps(_mm256_mul_ps(v, inv_scale), kRound), zp);
      const __m256 valid = _mm256_and_ps(_mm256_cmp_ps(r, lo_valid, _CMP_GE_OQ),
                                         _mm256_cmp_ps(r, hi_valid, _CMP_LT_OQ));
      r = _mm256_blendv_ps(neg_inf, r, valid);
      inside = _mm256_and_ps(_mm256_cmp_ps(r, qmin, _CMP_GE_OQ),
                             _mm256_cmp_ps(r, qmax, _CMP_LE_OQ));
      q = _mm256_min_ps(qmax, _mm256_max_ps(qmin, r));  // r is never NaN here
    }
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_sub_ps(q, zp), scale));
    if (mask != nullptr) {
      const uint64_t bytes = kMaskBytes.bytes[_mm256_movemask_ps(inside)];
      std::memcpy(mask + i, &bytes, sizeof bytes);
    }
  }
  span_scalar<G>(x + i, len - i, p, y + i, mask == nullptr ? nullptr : mask + i);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") != 0;
  return yes;
}

#endif  // LITHE_FQ_X86

template <Grid G>
void span(const float* x, int64_t len, const Params& p, float* y, uint8_t* mask) {
#if LITHE_FQ_X86
  if (has_avx2()) {
    span_avx2<G>(x, len, p, y, mask);
    return;
  }
#endif
  span_scalar<G>(x, len, p, y, mask);
}

int resolve_threads(int num_threads, int64_t n) {
  const int requested = num_threads > 0 ? num_threads : omp_get_max_threads();
  const int64_t useful = std::max<int64_t>(1, n / kMinPerThread);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(requested, useful)));
}

template <Grid G>
void per_tensor(const float* x, int64_t n, const Params& p, float* y, uint8_t* mask, int nt) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    const int64_t len = std::min(kChunk, n - begin);
    span<G>(x + begin, len, p, y + begin, mask == nullptr ? nullptr : mask + begin);
  }
}

template <Grid G>
void per_channel(const float* x, int64_t outer, int64_t channels, int64_t inner,
                 const float* scale, const float* zero_point, int64_t qmin, int64_t qmax,
                 float* y, uint8_t* mask, int nt) {
  const int64_t rows = outer * channels;
  if (inner == 1) {
    // Channel is the innermost axis: parameters change every element, so each outer row is one
    // task walking the channels with their own constants.
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t at = o * channels + c;
        const Params p = make_params(scale[c], zero_point[c], qmin, qmax);
        span_scalar<G>(x + at, 1, p, y + at, mask == nullptr ? nullptr : mask + at);
      }
    }
    return;
  }
  // Tasks are (row, chunk of the row): long rows still split across threads, short rows are
  // one task each.
  const int64_t per_row = (inner + kChunk - 1) / kChunk;
  const int64_t tasks = rows * per_row;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t row = t / per_row;
    const int64_t c = row % channels;
    const int64_t begin = row * inner + (t % per_row) * kChunk;
    const int64_t len = std::min(kChunk, (row + 1) * inner - begin);
    const Params p = make_params(scale[c], zero_point[c], qmin, qmax);
    span<G>(x + begin, len, p, y + begin, mask == nullptr ? nullptr : mask + begin);
  }
}

}  // namespace

void fake_quant_per_tensor_cpu(const float* x, int64_t n, float scale, float zero_point,
                               int64_t qmin, int64_t qmax, float* y, uint8_t* mask,
                               QuantFormula formula, int num_threads) {
  if (n <= 0) {
    return;
  }
  const Params p = make_params(scale, zero_point, qmin, qmax);
  const int nt = resolve_threads(num_threads, n);
  if (formula == QuantFormula::kNni) {
    per_tensor<Grid::kNni>(x, n, p, y, mask, nt);
  } else {
    per_tensor<Grid::kAtenSaturating>(x, n, p, y, mask, nt);
  }
}

void fake_quant_per_channel_cpu(const float* x, int64_t outer, int64_t channels, int64_t inner,
                                const float* scale, const float* zero_point, int64_t qmin,
                                int64_t qmax, float* y, uint8_t* mask, QuantFormula formula,
                                int num_threads) {
  if (outer <= 0 || channels <= 0 || inner <= 0) {
    return;
  }
  const int nt = resolve_threads(num_threads, outer * channels * inner);
  if (formula == QuantFormula::kNni) {
    per_channel<Grid::kNni>(x, outer, channels, inner, scale, zero_point, qmin, qmax, y, mask,
                            nt);
  } else {
    per_channel<Grid::kAtenInt64>(x, outer, channels, inner, scale, zero_point, qmin, qmax, y,
                                  mask, nt);
  }
}

}  // namespace lithe::kernels
