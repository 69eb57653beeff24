#pragma once
/// \file
/// The output-path rule shared by every verb and every C++ writer:
///  - an output that exists must be a regular file: a directory, a device, a FIFO or a socket
///    is refused (writing "to /dev/null" would otherwise replace the device node);
///  - a symbolic link is written through: the new content replaces the file the link points to
///    (in that file's directory, atomically) and the link keeps pointing at it;
///  - no output may be the same file as an input or another output (device and inode for files
///    that exist, the resolved path for those that do not), checked before any work.

#include <filesystem>
#include <string>
#include <vector>

namespace lithe::host {

/// A path and the option or role that named it ("--model", "--masks"), for messages.
struct NamedPath {
  std::string role;
  std::filesystem::path path;
};

/// The file a write to `path` replaces: symbolic links followed (also dangling ones, at most 40
/// hops; more is sdk::Error(kIo)), relative link targets taken from the link's directory.
std::filesystem::path resolve_output_target(const std::filesystem::path& path);

/// Throws sdk::Error(kIo) naming `role` and `path` unless the file `path` resolves to is absent
/// or a regular file, and its directory exists.
void check_output_kind(const std::string& role, const std::filesystem::path& path);

/// check_output_kind for every output, then sdk::Error(kInvalidConfig) when an output is the
/// same file as an input or as another output, naming both roles and the path. Empty paths
/// (options not given) are skipped.
void check_output_paths(const std::vector<NamedPath>& inputs,
                        const std::vector<NamedPath>& outputs);

}  // namespace lithe::host
