#pragma once
/// \file
/// StagedFile: the atomic-output primitive. Content is written to a temporary file next to the
/// target (same file system, so the final rename is atomic); commit() moves it into place. An
/// uncommitted StagedFile removes its temporary file, so a failed run leaves the target as it
/// was. Stage several files, write them all, then commit them all.

#include <filesystem>

namespace lithe::host {

class StagedFile {
 public:
  /// Checks that the target's directory exists (sdk::Error(kIo) naming the target otherwise).
  explicit StagedFile(std::filesystem::path target);
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;

  /// Where to write the content.
  const std::filesystem::path& temp_path() const { return temp_; }
  const std::filesystem::path& target() const { return target_; }
  /// Renames the temporary file onto the target (sdk::Error(kIo) on failure, target untouched).
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  bool committed_ = false;
};

}  // namespace lithe::host
