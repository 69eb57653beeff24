// The roots tests find their inputs under, from the configure step (see paths.h).
#include "tests/support/paths.h"

namespace lithe::test {

std::filesystem::path source_dir() { return LITHE_SOURCE_DIR; }
std::filesystem::path binary_dir() { return LITHE_BINARY_DIR; }

}  // namespace lithe::test
