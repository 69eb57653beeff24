#pragma once
// ptq's config: the keys of one config_list entry (quant_types, quant_bits, quant_scheme,
// quant_dtype, observer, averaging_constant, percentile), read and checked once, and the
// linear-grid formula that turns an observed range into a scale and zero point.

#include <lithe/sdk/option_spec.h>
#include <lithe/sdk/options.h>
#include <lithe/sdk/quantizer.h>

#include <array>
#include <cstdint>

namespace lithe::plugins::ptq {

/// How a quant type's range is found.
enum class Observer {
  kMinMax,         ///< "min_max": the smallest and largest value seen (the default)
  kMovingAverage,  ///< "moving_average": an EMA of each batch's min and max (activations only)
  kPercentile,     ///< "percentile": the `percentile`-th percentiles of the values seen
  kMse,            ///< "mse": the shrink of [min, max] with the least quantization MSE
  kKl,             ///< "kl": TensorRT's entropy calibration (activations only)
};

/// "min_max", "moving_average", "percentile", "mse", "kl".
const char* observer_name(Observer observer);
/// Whether an activation observed this way keeps a histogram.
inline bool uses_histogram(Observer observer) {
  return observer == Observer::kPercentile || observer == Observer::kMse ||
         observer == Observer::kKl;
}

/// Smallest scale: a range that is a single point (all zeros) gives this instead of 0.
inline constexpr float kMinScale = 1.17549435e-38f;  // the smallest normal float32

/// x̂ = scale · (round_half_even(clamp(x / scale + zero_point, qmin, qmax)) − zero_point).
struct Params {
  float scale = 1.0f;
  float zero_point = 0.0f;
};

/// How one quant type of a layer is quantized and observed.
struct TypeConfig {
  bool enabled = false;  ///< in the entry's quant_types
  int64_t bits = 0;
  int64_t qmin = 0;  ///< quant_dtype "uint": [0, 2^bits − 1]; "int": ±(2^(bits−1) − 1)
  int64_t qmax = 0;
  bool symmetric = false;    ///< a *_symmetric quant_scheme
  bool per_channel = false;  ///< a per_channel_* quant_scheme (the weight only)
  Observer observer = Observer::kMinMax;

  /// The grid parameters of the range [rmin, rmax], in float32 (NNI v2.5 / torch.ao):
  ///   rmin = min(rmin, 0); rmax = max(rmax, 0)
  ///   affine:    scale = (rmax − rmin) / (qmax − qmin)
  ///              zero_point = clamp(qmin − round_half_even(rmin / scale), qmin, qmax)
  ///   symmetric: scale = max(|rmin|, |rmax|) / ((qmax − qmin) / 2)
  ///              zero_point = 0 on the int grid, (qmin + qmax + 1) / 2 on the uint grid
  ///   scale is never below kMinScale.
  Params params(float rmin, float rmax) const;
};

/// One config_list entry, as numbers.
struct EntryConfig {
  std::array<TypeConfig, 3> types;  ///< by QuantType value
  float averaging_constant = 0.01f;
  double percentile = 99.99;
  const TypeConfig& of(sdk::QuantType type) const { return types[static_cast<size_t>(type)]; }
};

/// The keys ptq declares (quant_types, quant_bits, averaging_constant, percentile). quant_scheme,
/// quant_dtype and observer are strings or objects per quant type, a JSON type the SDK's
/// declarations do not have: read_entry reads and checks them itself.
const sdk::OptionSchema& option_keys();

/// Reads and checks every ptq key of `entry` (quant_types and quant_bits already checked by
/// check_quant_config) and marks them read. Throws sdk::Error(kInvalidConfig), one line naming
/// the JSON path, the rule and the value.
EntryConfig read_entry(const sdk::Options& entry);

}  // namespace lithe::plugins::ptq
