// --input-shape parsing (see input_shape.h).
#include "input_shape.h"

#include "lithe/sdk/error.h"

namespace lithe::cli {

std::vector<int64_t> parse_input_shape(const std::string& text, const std::string& option) {
  std::vector<int64_t> shape;
  size_t start = 0;
  bool valid = !text.empty();
  while (valid && start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    valid = !item.empty() && item.size() <= 12 &&
            item.find_first_not_of("0123456789") == std::string::npos && std::stoll(item) > 0;
    if (valid) {
      shape.push_back(std::stoll(item));
    }
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
  }
  LITHE_CHECK(valid, sdk::Errc::kInvalidConfig, option,
              " must be a comma-separated list of positive integers with the batch first "
              "(e.g. 1,3,32,32), got '", sdk::printable(text, 60), "'");
  LITHE_CHECK(shape.size() <= 8, sdk::Errc::kInvalidConfig, option, " has ", shape.size(),
              " dimensions; at most 8 are accepted, got '", sdk::printable(text, 60), "'");
  // The example input is allocated (and run) several times: cap it before the allocator
  // fails with a message that names nothing.
  int64_t elements = 1;
  for (const int64_t d : shape) {
    LITHE_CHECK(d <= kMaxInputElements && elements <= kMaxInputElements / d,
                sdk::Errc::kInvalidConfig, option, " '", text, "' has more than ",
                kMaxInputElements, " elements (", kMaxInputElements * 4 / (1 << 20),
                " MiB of float32), the limit for an example input");
    elements *= d;
  }
  return shape;
}

}  // namespace lithe::cli
