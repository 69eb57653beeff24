#pragma once
// Comma-separated option values (--op-types Conv2d,Linear, --layers a,b) shared by the verbs
// that take them.

#include <sstream>
#include <string>
#include <vector>

namespace lithe::cli {

/// "a,,b" -> {"a", "b"}: the items between commas, empty ones dropped.
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) {
      out.push_back(item);
    }
  }
  return out;
}

}  // namespace lithe::cli
