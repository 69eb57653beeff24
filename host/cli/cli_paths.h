#pragma once
// Path comparisons the verbs use to refuse writing over their own inputs.

#include <filesystem>
#include <system_error>

namespace lithe::cli {

/// Whether two paths name the same file (after resolving "..", symlinks of existing parts).
inline bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  return std::filesystem::weakly_canonical(a, ec) == std::filesystem::weakly_canonical(b, ec);
}

}  // namespace lithe::cli
