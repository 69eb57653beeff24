#pragma once
// NNI v2.5's quant_scheme and quant_dtype config keys: how each quant type of a config_list
// entry is quantized (symmetric or affine, per tensor or per output channel, on an unsigned or
// a signed grid). Read and checked here; the arithmetic is in quant_params.h.

#include <lithe/sdk/options.h>
#include <lithe/sdk/quantizer.h>

#include <array>
#include <string>

#include "quant_params.h"

namespace lithe::plugins::qat {

/// NNI v2.5's QuantScheme.
enum class QuantScheme {
  kPerTensorAffine,      ///< "per_tensor_affine" (the default; NNI v2.0's only scheme)
  kPerTensorSymmetric,   ///< "per_tensor_symmetric"
  kPerChannelAffine,     ///< "per_channel_affine": the weight only, one grid per output channel
  kPerChannelSymmetric,  ///< "per_channel_symmetric": the same, symmetric
};

/// The config names, e.g. "per_channel_symmetric"; "uint" / "int".
const char* quant_scheme_name(QuantScheme scheme);
const char* quant_dtype_name(QuantDtype dtype);
bool is_symmetric(QuantScheme scheme);
bool is_per_channel(QuantScheme scheme);

/// How one quant type of an entry is quantized.
struct TypeScheme {
  QuantScheme scheme = QuantScheme::kPerTensorAffine;
  QuantDtype dtype = QuantDtype::kUint;
};

/// The config keys (not declared in qat's OptionSchema: the SDK has no "string or object of
/// strings" option type, so qat reads and checks them itself; see the README).
inline constexpr const char* kQuantSchemeKey = "quant_scheme";
inline constexpr const char* kQuantDtypeKey = "quant_dtype";

/// `quant_scheme` and `quant_dtype` of `entry` (quant_types and quant_bits already checked),
/// indexed by QuantType value; types the entry does not quantize keep the defaults. Each key is
/// absent (every type: per_tensor_affine / uint), a string (every quant type of the entry) or
/// an object whose keys are quant types of the entry (those not named keep the default), as in
/// NNI v2.5. Marks both keys read. Throws sdk::Error(kInvalidConfig), one line naming the JSON
/// path, the rule and the value seen, for: a value of another JSON type, an unknown scheme or
/// dtype, an object key that is not one of the entry's quant_types, a per_channel scheme for
/// the input or output (the weight only is quantized per channel), and "int" with 1 bit (whose
/// grid [0, 0] holds only 0).
std::array<TypeScheme, 3> read_type_schemes(const sdk::Options& entry);

}  // namespace lithe::plugins::qat
