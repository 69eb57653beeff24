#include "lithe/host/jobs/model_source.h"

#include <sstream>
#include <system_error>
#include <utility>

#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "job_support.h"

namespace lithe::host {

ModelSource ModelSource::file(std::filesystem::path path) {
  ModelSource source;
  source.path_ = std::move(path);
  return source;
}

ModelSource ModelSource::in_memory(const torch::jit::Module& module, std::string label) {
  ModelSource source;
  source.module_ = module;
  source.label_ = std::move(label);
  return source;
}

std::string ModelSource::label() const { return module_ ? label_ : path_.string(); }

torch::jit::Module ModelSource::load(const std::string& field) const {
  LITHE_CHECK(!empty(), sdk::Errc::kInvalidConfig, field, ": no model given");
  if (!module_) {
    return load_torchscript_module(path_);
  }
  // A copy through the archive bytes, as if the module were saved and loaded: the job's module
  // then has the classes and the bytes a file would give (a clone() may rename classes).
  try {
    std::istringstream in(job_support::module_bytes(*module_), std::ios::binary);
    return torch::jit::load(in);
  } catch (const std::exception& e) {
    const std::string message = e.what();
    throw sdk::Error(sdk::Errc::kInvalidModel, field + ": " + label_ + " cannot be copied: " +
                                                   message.substr(0, message.find('\n')));
  }
}

uintmax_t ModelSource::size_bytes() const {
  if (!module_) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path_, ec);
    return ec ? 0 : size;
  }
  return job_support::module_bytes(*module_).size();
}

torch::jit::Module module_from_bytes(const std::string& bytes) {
  std::istringstream in(bytes, std::ios::binary);
  try {
    return torch::jit::load(in, c10::Device(c10::kCPU));  // wherever the model computed
  } catch (const std::exception& e) {
    const std::string message = e.what();
    throw sdk::Error(sdk::Errc::kInternal, "the model just written does not load back: " +
                                               message.substr(0, message.find('\n')));
  }
}

}  // namespace lithe::host
