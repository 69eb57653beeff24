#include "lithe/host/jobs/job_output.h"

#include <utility>

#include "lithe/sdk/error.h"

namespace lithe::host {

StagedOutput::StagedOutput(const Output& output, const std::string& field) : output_(output) {
  if (!output_.file.empty()) {
    file_ = std::make_unique<StagedFile>(output_.file, field);
  }
}

StagedOutput::StagedOutput(StagedOutput&&) noexcept = default;
StagedOutput& StagedOutput::operator=(StagedOutput&&) noexcept = default;
StagedOutput::~StagedOutput() = default;

void StagedOutput::write(std::string bytes) {
  if (!wanted()) {
    return;
  }
  if (file_) {
    file_->write(bytes);
  }
  if (output_.bytes != nullptr) {
    staged_ = std::move(bytes);  // kept only for a caller who asked for the bytes
  }
  written_ = true;
}

void StagedOutput::commit() {
  if (!wanted()) {
    return;
  }
  LITHE_INTERNAL_ASSERT(written_);
  if (file_) {
    file_->commit();
  }
  if (output_.bytes != nullptr) {
    *output_.bytes = staged_;
  }
}

}  // namespace lithe::host
