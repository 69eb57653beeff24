#include "lithe/sdk/error.h"

namespace lithe::sdk {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kInvalidConfig: return "invalid_config";
    case Errc::kUnsupportedLayer: return "unsupported_layer";
    case Errc::kShapeMismatch: return "shape_mismatch";
    case Errc::kDeviceMismatch: return "device_mismatch";
    case Errc::kPluginLoad: return "plugin_load";
    case Errc::kVersionMismatch: return "version_mismatch";
    case Errc::kIo: return "io";
    case Errc::kInvalidModel: return "invalid_model";
    case Errc::kUnsupported: return "unsupported";
    case Errc::kInternal: return "internal";
  }
  return "unknown";
}

Error::Error(Errc code, const std::string& message) : std::runtime_error(message), code_(code) {}

Error::~Error() = default;

}  // namespace lithe::sdk
