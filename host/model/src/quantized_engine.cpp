// libtorch's quantized engines (quantized_engine.h).
#include "lithe/host/model/quantized_engine.h"

#include <ATen/Context.h>

#include <algorithm>

#include "lithe/sdk/error.h"

namespace lithe::host {

const char* quantized_engine_name(QuantizedEngine engine) {
  switch (engine) {
    case QuantizedEngine::kAuto:
      return "auto";
    case QuantizedEngine::kOnednn:
      return "onednn";
    case QuantizedEngine::kQnnpack:
      return "qnnpack";
  }
  return "?";
}

QuantizedEngine parse_quantized_engine(const std::string& name, const std::string& where) {
  for (QuantizedEngine engine :
       {QuantizedEngine::kAuto, QuantizedEngine::kOnednn, QuantizedEngine::kQnnpack}) {
    if (name == quantized_engine_name(engine)) {
      return engine;
    }
  }
  throw sdk::Error(sdk::Errc::kInvalidConfig,
                   where + ": '" + name + "' is not a quantized engine (auto, onednn, qnnpack)");
}

std::vector<QuantizedEngine> available_quantized_engines() {
  std::vector<QuantizedEngine> engines;
  for (const at::QEngine engine : at::globalContext().supportedQEngines()) {
    if (engine == at::QEngine::ONEDNN) {
      engines.push_back(QuantizedEngine::kOnednn);
    } else if (engine == at::QEngine::QNNPACK) {
      engines.push_back(QuantizedEngine::kQnnpack);
    }
  }
  return engines;
}

void use_quantized_engine(QuantizedEngine engine) {
  const std::vector<QuantizedEngine> engines = available_quantized_engines();
  const bool available = std::find(engines.begin(), engines.end(), engine) != engines.end();
  LITHE_CHECK(engine != QuantizedEngine::kAuto && available, sdk::Errc::kUnsupported,
              "the quantized engine '", quantized_engine_name(engine),
              "' is not available in this libtorch");
  at::globalContext().setQEngine(engine == QuantizedEngine::kQnnpack ? at::QEngine::QNNPACK
                                                                     : at::QEngine::ONEDNN);
}

}  // namespace lithe::host
