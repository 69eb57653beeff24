#include "lithe/host/io/number_text.h"

#include <cctype>
#include <cmath>
#include <stdexcept>

namespace lithe::host {

std::optional<double> parse_finite_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front())) != 0) {
    return std::nullopt;  // std::stod skips leading space: "  3" is not what was meant
  }
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {  // no number, or out of range
    return std::nullopt;
  }
  if (used != text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

}  // namespace lithe::host
