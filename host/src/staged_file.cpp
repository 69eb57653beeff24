#include "lithe/host/staged_file.h"

#include <unistd.h>

#include <atomic>

#include "lithe/sdk/error.h"

namespace lithe::host {

namespace fs = std::filesystem;

StagedFile::StagedFile(fs::path target) : target_(std::move(target)) {
  static std::atomic<int> counter{0};
  const fs::path dir = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  std::error_code ec;
  LITHE_CHECK(fs::is_directory(dir, ec), sdk::Errc::kIo, "cannot write '", target_.string(),
              "': directory '", dir.string(), "' does not exist");
  LITHE_CHECK(!fs::is_directory(target_, ec), sdk::Errc::kIo, "cannot write '", target_.string(),
              "': it is a directory");
  temp_ = target_.string() + ".tmp." + std::to_string(::getpid()) + "." +
          std::to_string(counter++);
}

StagedFile::~StagedFile() {
  if (!committed_) {
    std::error_code ignored;
    fs::remove(temp_, ignored);
  }
}

void StagedFile::commit() {
  std::error_code ec;
  LITHE_CHECK(fs::is_regular_file(temp_, ec), sdk::Errc::kIo, "cannot write '", target_.string(),
              "': nothing was written");
  fs::rename(temp_, target_, ec);
  LITHE_CHECK(!ec, sdk::Errc::kIo, "cannot write '", target_.string(), "': ", ec.message());
  committed_ = true;
}

}  // namespace lithe::host
