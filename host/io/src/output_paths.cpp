#include "lithe/host/io/output_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "lithe/sdk/error.h"

namespace lithe::host {

namespace fs = std::filesystem;

namespace {

const char* kind_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

struct Identity {
  dev_t device;
  ino_t inode;
};

// Device and inode of an existing file (links followed), or nothing.
std::optional<Identity> identity(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return std::nullopt;
  }
  return Identity{st.st_dev, st.st_ino};
}

bool same(const fs::path& a, const fs::path& b) {
  const auto ia = identity(a);
  const auto ib = identity(b);
  if (ia && ib) {
    return ia->device == ib->device && ia->inode == ib->inode;
  }
  if (ia || ib) {
    return false;
  }
  std::error_code ec;
  return fs::weakly_canonical(resolve_output_target(a), ec) ==
         fs::weakly_canonical(resolve_output_target(b), ec);
}

}  // namespace

fs::path resolve_output_target(const fs::path& path) {
  fs::path current = path;
  for (int hop = 0; hop < 40; ++hop) {
    std::error_code ec;
    const fs::file_status status = fs::symlink_status(current, ec);
    if (ec || status.type() != fs::file_type::symlink) {
      return current;
    }
    const fs::path target = fs::read_symlink(current, ec);
    if (ec) {
      return current;
    }
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
  throw sdk::Error(sdk::Errc::kIo, "cannot write '" + path.string() +
                                       "': too many levels of symbolic links");
}

void check_output_kind(const std::string& role, const fs::path& path) {
  const fs::path target = resolve_output_target(path);
  const std::string through =
      target == path ? "" : " (a symbolic link to '" + target.string() + "')";
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    LITHE_CHECK(S_ISREG(st.st_mode), sdk::Errc::kIo, role, " '", path.string(), "'", through,
                " is ", kind_name(st.st_mode),
                "; an output must be a regular file or a new name (nothing was written)");
  } else if (errno != ENOENT) {
    throw sdk::Error(sdk::Errc::kIo, role + " '" + path.string() + "'" + through +
                                         " cannot be examined: " + std::strerror(errno));
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  LITHE_CHECK(fs::is_directory(dir, ec), sdk::Errc::kIo, role, " '", path.string(), "'",
              through, ": directory '", dir.string(), "' does not exist");
}

void check_output_paths(const std::vector<NamedPath>& inputs,
                        const std::vector<NamedPath>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) {
      continue;
    }
    check_output_kind(out.role, out.path);
    for (const NamedPath& in : inputs) {
      LITHE_CHECK(in.path.empty() || !same(out.path, in.path), sdk::Errc::kInvalidConfig,
                  out.role, " '", out.path.string(), "' is the same file as ", in.role, " '",
                  in.path.string(), "'; writing it would destroy an input (nothing was written)");
    }
    for (size_t j = 0; j < i; ++j) {
      LITHE_CHECK(outputs[j].path.empty() || !same(out.path, outputs[j].path),
                  sdk::Errc::kInvalidConfig, out.role, " '", out.path.string(),
                  "' is the same file as ", outputs[j].role, " '", outputs[j].path.string(),
                  "'; two outputs cannot share a file (nothing was written)");
    }
  }
}

}  // namespace lithe::host
