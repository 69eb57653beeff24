#pragma once
/// \file
/// The model a job reads: a TorchScript file, or a module the caller holds in memory. A job
/// never changes the caller's module: it works on a copy.

#include <torch/script.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace lithe::host {

class ModelSource {
 public:
  /// No model (a job refuses it, naming the field).
  ModelSource() = default;
  /// A TorchScript file, read with the archive checks of load_torchscript_module.
  static ModelSource file(std::filesystem::path path);
  /// A module in memory; `label` names it in messages and reports.
  static ModelSource in_memory(const torch::jit::Module& module,
                               std::string label = "the model in memory");

  bool empty() const { return path_.empty() && !module_; }
  /// The file, or "" for a model in memory.
  const std::filesystem::path& path() const { return path_; }
  /// The file's path, or the label.
  std::string label() const;
  /// A module of its own for the job: the file loaded, or a copy of the module in memory made
  /// through its archive bytes (the caller's module is never written, and the copy saves to
  /// the bytes the same module read from a file would). `field` names the request field in
  /// errors (field_ref form).
  torch::jit::Module load(const std::string& field) const;
  /// The model's size in bytes: the file's, or the TorchScript archive the module saves as.
  uintmax_t size_bytes() const;

 private:
  std::filesystem::path path_;
  std::optional<torch::jit::Module> module_;
  std::string label_;
};

/// A TorchScript module from the bytes of an archive the job itself wrote (Model::serialize):
/// read from memory, not from the staged file, with its tensors on the CPU.
torch::jit::Module module_from_bytes(const std::string& bytes);

}  // namespace lithe::host
