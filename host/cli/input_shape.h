#pragma once
// The --input-shape option shared by the verbs that run a model on a made-up input.

#include <cstdint>
#include <string>
#include <vector>

namespace lithe::cli {

/// The most elements an example input may have: 2^28 (1 GiB of float32).
inline constexpr int64_t kMaxInputElements = int64_t{1} << 28;

/// "1,3,32,32" -> {1, 3, 32, 32}: positive integers only, batch first, at most 8 dimensions
/// and kMaxInputElements elements. sdk::Error (kInvalidConfig) naming `option` and the text
/// otherwise.
std::vector<int64_t> parse_input_shape(const std::string& text,
                                       const std::string& option = "--input-shape");

}  // namespace lithe::cli
