#pragma once
/// \file
/// Where a job's outputs go. An Output is a sink: a file (staged when the job starts, so an
/// unwritable directory fails before any work, and replacing the existing file only when the
/// job commits all its outputs), memory (a string the caller owns, filled on commit), both, or
/// nothing. A job writes every output before it commits any, so a failing job changes no file
/// and no string.

#include <filesystem>
#include <memory>
#include <string>

#include "lithe/host/io/staged_file.h"

namespace lithe::host {

/// One output of a job.
struct Output {
  /// The file to write; "" = none.
  std::filesystem::path file;
  /// Not null: the output's bytes are also stored here when the job commits (the caller keeps
  /// the string alive while the job runs).
  std::string* bytes = nullptr;

  /// Whether anything is to be written.
  bool wanted() const { return !file.empty() || bytes != nullptr; }

  static Output to_file(std::filesystem::path file) { return {std::move(file), nullptr}; }
  static Output to_memory(std::string* bytes) { return {{}, bytes}; }
};

/// An Output while its job runs: staged at construction, written by write(), published by
/// commit(). Not wanted: write() and commit() do nothing.
class StagedOutput {
 public:
  /// `field` names the request field in errors (field_ref form, see field_error.h).
  StagedOutput(const Output& output, const std::string& field);
  StagedOutput(StagedOutput&&) noexcept;
  StagedOutput& operator=(StagedOutput&&) noexcept;
  ~StagedOutput();

  bool wanted() const { return output_.wanted(); }
  /// Stages `bytes` (a later write replaces them).
  void write(std::string bytes);
  /// Publishes what write() staged: renames the file into place, then stores the bytes.
  void commit();

 private:
  Output output_;
  std::unique_ptr<StagedFile> file_;
  std::string staged_;  // only for output_.bytes
  bool written_ = false;
};

}  // namespace lithe::host
