#pragma once
// Quantization-aware training (Jacob et al. 2018; NNI v2.0 QAT_Quantizer with Lithe's
// corrections, reference §3.2, §5 and conformance departure 3). Declared for unit tests, which
// link this plugin's object library and register it into their own registry; the float32
// maths is in quant_params.h and tracked_range.h.

#include <lithe/sdk/registry.h>

namespace lithe::plugins::qat {

/// Registers quantizer "qat".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::qat
