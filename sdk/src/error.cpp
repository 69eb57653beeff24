#include "lithe/sdk/error.h"

#include <algorithm>

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

namespace {

// Messages quote user input (keys, names, file contents). They must stay one readable line whose
// C string is the whole text: control characters (a NUL would cut what() short, a newline would
// split the line) are escaped, and a message is capped so a 10 MB value cannot flood a terminal.
constexpr size_t kMaxMessageBytes = 2000;

std::string one_line(const std::string& message) {
  std::string out;
  out.reserve(std::min(message.size(), kMaxMessageBytes) + 16);
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (u == '\n') {
      out += "\\n";
    } else if (u == '\t') {
      out += ' ';
    } else if (u < 0x20 || u == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  if (out.size() > kMaxMessageBytes) {
    const size_t removed = out.size() - kMaxMessageBytes;
    out = out.substr(0, kMaxMessageBytes - 200) + " [... " + std::to_string(removed) +
          " bytes cut ...] " + out.substr(out.size() - 200);
  }
  return out;
}

}  // namespace

std::string printable(const std::string& text, size_t max_bytes) {
  std::string escaped = one_line(text);
  if (escaped.size() > max_bytes) {
    escaped = escaped.substr(0, max_bytes) + "... (" + std::to_string(text.size()) + " bytes)";
  }
  return escaped;
}

Error::Error(Errc code, const std::string& message)
    : std::runtime_error(one_line(message)), code_(code) {}

Error::~Error() = default;

}  // namespace lithe::sdk
