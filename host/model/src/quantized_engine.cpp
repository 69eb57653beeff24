// libtorch's quantized engines (quantized_engine.h).
#include "lithe/host/model/quantized_engine.h"

#include <ATen/Context.h>

#include <algorithm>
#include <optional>

#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

constexpr QuantizedEngine kEngines[] = {QuantizedEngine::kAuto, QuantizedEngine::kOnednn,
                                        QuantizedEngine::kQnnpack, QuantizedEngine::kX86,
                                        QuantizedEngine::kFbgemm};

std::optional<at::QEngine> aten_engine(QuantizedEngine engine) {
  switch (engine) {
    case QuantizedEngine::kOnednn:
      return at::QEngine::ONEDNN;
    case QuantizedEngine::kQnnpack:
      return at::QEngine::QNNPACK;
    case QuantizedEngine::kX86:
      return at::QEngine::X86;
    case QuantizedEngine::kFbgemm:
      return at::QEngine::FBGEMM;
    case QuantizedEngine::kAuto:
      break;
  }
  return std::nullopt;
}

}  // namespace

const char* quantized_engine_name(QuantizedEngine engine) {
  switch (engine) {
    case QuantizedEngine::kAuto:
      return "auto";
    case QuantizedEngine::kOnednn:
      return "onednn";
    case QuantizedEngine::kQnnpack:
      return "qnnpack";
    case QuantizedEngine::kX86:
      return "x86";
    case QuantizedEngine::kFbgemm:
      return "fbgemm";
  }
  return "?";
}

QuantizedEngine parse_quantized_engine(const std::string& name, const std::string& where) {
  for (QuantizedEngine engine : kEngines) {
    if (name == quantized_engine_name(engine)) {
      return engine;
    }
  }
  throw sdk::Error(sdk::Errc::kInvalidConfig,
                   where + ": '" + name + "' is not a quantized engine (auto, onednn, qnnpack, x86, fbgemm)");
}

std::vector<QuantizedEngine> available_quantized_engines() {
  std::vector<QuantizedEngine> engines;
  for (const at::QEngine supported : at::globalContext().supportedQEngines()) {
    for (QuantizedEngine engine : kEngines) {
      if (aten_engine(engine) == supported) {
        engines.push_back(engine);
      }
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
  at::globalContext().setQEngine(*aten_engine(engine));
}

}  // namespace lithe::host
