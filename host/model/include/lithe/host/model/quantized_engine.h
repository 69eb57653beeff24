#pragma once
/// \file
/// libtorch's quantized CPU engines, for int8 models (lithe/host/export/int8_convert.h). An int8
/// model holds its weights prepacked for one engine, and loading it prepacks them again for the
/// engine active at that moment; so the engine is process-wide state that must be set before
/// such a model loads. Lithe's int8 archives name their engine in the extra file
/// `lithe_quantized_engine`, and load_torchscript_module switches to it before loading.

#include <string>
#include <vector>

namespace lithe::host {

enum class QuantizedEngine {
  kAuto,     ///< chosen from the model (int8 conversion: oneDNN when it can, else QNNPACK)
  kOnednn,   ///< x86 (fast; symmetric weights only: zero point 0)
  kQnnpack,  ///< ARM and mobile (any weight zero point; slow on x86)
};

/// The extra file of an int8 archive that names its engine ("onednn" or "qnnpack").
inline constexpr const char* kQuantizedEngineRecord = "lithe_quantized_engine";

/// "auto", "onednn", "qnnpack".
const char* quantized_engine_name(QuantizedEngine engine);
/// The engine named `name` (one of the names above); sdk::Error(kInvalidConfig) naming
/// `where`, the value and the choices otherwise.
QuantizedEngine parse_quantized_engine(const std::string& name, const std::string& where);
/// The engines this libtorch was built with (among oneDNN and QNNPACK).
std::vector<QuantizedEngine> available_quantized_engines();
/// Makes `engine` libtorch's active quantized engine (process-wide).
/// sdk::Error(kUnsupported) when this libtorch lacks it.
void use_quantized_engine(QuantizedEngine engine);

}  // namespace lithe::host
