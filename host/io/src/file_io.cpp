// Whole-file reads and writes (file_io.h).

#include "lithe/host/io/file_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "lithe/host/io/staged_file.h"
#include "lithe/sdk/error.h"
#include "posix_write.h"

namespace lithe::host {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& bytes) {
  const int error = write_whole_file(path.c_str(), bytes, 0, /*sync=*/false);
  LITHE_CHECK(error == 0, sdk::Errc::kIo, "cannot write '", path.string(), "': ",
              std::strerror(error));
}

void write_file_atomic(const fs::path& path, const std::string& bytes) {
  StagedFile staged(path);
  staged.write(bytes);
  staged.commit();
}

std::string read_file(const fs::path& path) {
  std::error_code ec;
  LITHE_CHECK(fs::is_regular_file(path, ec), sdk::Errc::kIo, "file '", path.string(),
              "' does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  LITHE_CHECK(in.good(), sdk::Errc::kIo, "cannot read '", path.string(), "': ",
              std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace lithe::host
