#include "lithe/host/io/staged_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "lithe/host/io/output_paths.h"
#include "lithe/sdk/error.h"
#include "posix_write.h"

namespace lithe::host {

namespace fs = std::filesystem;

namespace {

std::string os_reason(int error) { return std::strerror(error); }

}  // namespace

StagedFile::StagedFile(fs::path target, std::string role) : target_(std::move(target)) {
  static std::atomic<int> counter{0};
  LITHE_CHECK(!target_.empty(), sdk::Errc::kIo, role, ": an empty path cannot be written");
  check_output_kind(role, target_);
  resolved_ = resolve_output_target(target_);
  temp_ = resolved_.string() + ".tmp." + std::to_string(::getpid()) + "." +
          std::to_string(counter++);
  // A probe: a directory that cannot take the file (read-only, /proc, no permission) fails
  // now, before any work, naming the option. Removed at once, so that a process killed during
  // a long run leaves nothing behind; write() creates the file again.
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    throw sdk::Error(sdk::Errc::kIo, role + " '" + target_.string() + "' cannot be written: " +
                                         os_reason(error) + " (creating a file in '" +
                                         temp_.parent_path().string() + "'; nothing was written)");
  }
  ::close(fd);
  ::unlink(temp_.c_str());
}

StagedFile::~StagedFile() {
  if (!committed_) {
    ::unlink(temp_.c_str());
  }
}

void StagedFile::write(const std::string& bytes) {
  const auto fail = [&](int error) {
    ::unlink(temp_.c_str());
    throw sdk::Error(sdk::Errc::kIo, "cannot write '" + target_.string() + "': " +
                                         os_reason(error) + " (nothing was written; an existing '" +
                                         target_.string() + "' is unchanged)");
  };
  if (written_) {
    ::unlink(temp_.c_str());  // new content replaces what an earlier write() staged
    written_ = false;
  }
  // Exclusively and never through a link: nobody can have planted the name in the meantime.
  if (const int error =
          write_whole_file(temp_.c_str(), bytes, O_EXCL | O_NOFOLLOW, /*sync=*/true)) {
    fail(error);
  }
  written_ = true;
}

void StagedFile::commit() {
  LITHE_CHECK(written_, sdk::Errc::kIo, "cannot write '", target_.string(),
              "': nothing was written");
  if (::rename(temp_.c_str(), resolved_.c_str()) != 0) {
    const int error = errno;
    throw sdk::Error(sdk::Errc::kIo, "cannot write '" + target_.string() + "': " +
                                         os_reason(error));
  }
  committed_ = true;
}

}  // namespace lithe::host
