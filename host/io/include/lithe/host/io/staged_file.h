#pragma once
/// \file
/// StagedFile: the atomic-output primitive. Content is written to a temporary file next to the
/// file the target resolves to (same file system, so the final rename is atomic); commit()
/// moves it into place. An uncommitted StagedFile removes its temporary file, so a failed run
/// leaves the target as it was. Stage several files, write them all, then commit them all.
/// The output-path rule (output_paths.h) applies: a symbolic link is written through, and a
/// directory, device, FIFO or socket is refused.

#include <filesystem>
#include <string>

namespace lithe::host {

class StagedFile {
 public:
  /// Checks the target (check_output_kind) and that a file can be created beside the file it
  /// resolves to (created and removed at once), so an unwritable directory fails before any
  /// work: sdk::Error(kIo) naming `role`, the target and the OS reason.
  explicit StagedFile(std::filesystem::path target, std::string role = "output");
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;

  /// Writes `bytes` to the temporary file (created exclusively, never through a link; a second
  /// call replaces the first's content) and syncs it. Any failure (ENOSPC, EROFS, EACCES, EIO...) throws sdk::Error(kIo) naming the target and
  /// the OS reason, and removes the temporary file.
  void write(const std::string& bytes);
  /// Where the content goes before commit(), for readers of the staged content (write() is the
  /// only writer: commit() refuses a file write() never completed).
  const std::filesystem::path& temp_path() const { return temp_; }
  /// The path as given.
  const std::filesystem::path& target() const { return target_; }
  /// Renames the temporary file onto the resolved target (sdk::Error(kIo) on failure, target
  /// untouched). An uncommitted StagedFile removes its temporary file.
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path resolved_;
  std::filesystem::path temp_;
  bool written_ = false;
  bool committed_ = false;
};

}  // namespace lithe::host
