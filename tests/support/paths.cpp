// The roots tests find their inputs under, from the configure step (see paths.h).
#include "tests/support/paths.h"

#include <gtest/gtest.h>

namespace lithe::test {

std::filesystem::path source_dir() { return LITHE_SOURCE_DIR; }
std::filesystem::path binary_dir() { return LITHE_BINARY_DIR; }
std::filesystem::path python_executable() { return LITHE_PYTHON; }
std::filesystem::path onnxruntime_library() { return LITHE_ONNXRUNTIME_LIBRARY; }

std::filesystem::path scratch_path(const std::string& name) {
  std::filesystem::path dir = binary_dir() / "tests/scratch" / name;
  if (const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info()) {
    // Parameterised names hold '/': one path component.
    std::string id = std::string(test->test_suite_name()) + "." + test->name();
    for (char& c : id) {
      if (c == '/') {
        c = '_';
      }
    }
    dir /= id;
  }
  return dir;
}

std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path dir = scratch_path(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace lithe::test
