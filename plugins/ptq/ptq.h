#pragma once
// Post-training quantization with observers (NNI v2.5's ObserverQuantizer, torch.ao's
// observers). Declared for unit tests, which link this plugin's object library and register it
// into their own registry; the observers' arithmetic is in observers.h, the config in
// ptq_config.h.

#include <lithe/sdk/registry.h>

namespace lithe::plugins::ptq {

/// Registers quantizer "ptq".
void register_algorithms(sdk::Registry& registry);

}  // namespace lithe::plugins::ptq
