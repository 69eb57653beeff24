#pragma once
/// \file
/// Whole-file reads and writes with errors that name the file and the system's reason. Atomic
/// writes go through StagedFile (temporary file in the target's directory, then rename).

#include <filesystem>
#include <string>

namespace lithe::host {

/// Writes `bytes` to `path` atomically; on failure `path` is untouched and sdk::Error(kIo)
/// names the file and the system error.
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);
/// Writes `bytes` to `path` directly (no temporary; for a StagedFile's temp_path());
/// sdk::Error(kIo) naming the file on failure.
void write_file(const std::filesystem::path& path, const std::string& bytes);
/// Reads a whole file (sdk::Error(kIo) naming it when missing or unreadable).
std::string read_file(const std::filesystem::path& path);

}  // namespace lithe::host
