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
  kAuto,     ///< chosen from the model (int8 conversion: x86, else oneDNN for symmetric
             ///< weights, else QNNPACK)
  kOnednn,   ///< x86 (fast; symmetric weights only: zero point 0)
  kQnnpack,  ///< ARM and mobile (any weight zero point; several times slower on x86)
  kX86,      ///< libtorch 2.x's x86 engine: oneDNN for symmetric convolutions, FBGEMM for the
             ///< rest (any weight zero point); libtorch's own default on x86
  kFbgemm,   ///< FBGEMM alone (x86; any weight zero point)
};

/// The extra file of an int8 archive that names its engine ("onednn", "x86", ...).
inline constexpr const char* kQuantizedEngineRecord = "lithe_quantized_engine";

/// "auto", "onednn", "qnnpack", "x86", "fbgemm".
const char* quantized_engine_name(QuantizedEngine engine);
/// The engine named `name` (one of the names above); sdk::Error(kInvalidConfig) naming
/// `where`, the value and the choices otherwise.
QuantizedEngine parse_quantized_engine(const std::string& name, const std::string& where);
/// The engines this libtorch was built with (among the four above).
std::vector<QuantizedEngine> available_quantized_engines();
/// Makes `engine` libtorch's active quantized engine (process-wide).
/// sdk::Error(kUnsupported) when this libtorch lacks it.
void use_quantized_engine(QuantizedEngine engine);

}  // namespace lithe::host
