#pragma once
// The one place that writes bytes to a file: POSIX calls, so that every failure (ENOSPC, EROFS,
// EIO, EFBIG...) is an errno the caller reports with the file it means, instead of a stream's
// silent bad bit or a writer that terminates the process.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace lithe::host {

/// Writes all of `bytes` to `path` (created with mode 0644 if missing, truncated; plus
/// `extra_flags`, e.g. O_NOFOLLOW), then fsyncs it when `sync`. Returns 0, or the errno of the
/// first failure (the file may then hold part of the bytes).
inline int write_whole_file(const char* path, const std::string& bytes, int extra_flags,
                            bool sync) {
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | extra_flags, 0644);
  if (fd < 0) {
    return errno;
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(fd);
      return error;
    }
    done += static_cast<size_t>(n);
  }
  // EINVAL/EROFS: a file (e.g. on some special file systems) that cannot be synced was written.
  if (sync && ::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int error = errno;
    ::close(fd);
    return error;
  }
  return ::close(fd) == 0 ? 0 : errno;
}

}  // namespace lithe::host
