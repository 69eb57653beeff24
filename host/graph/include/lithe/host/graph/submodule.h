#pragma once
// Internal to the host: finding a TorchScript submodule by its dotted name.

#include <torch/csrc/jit/api/module.h>

#include <optional>
#include <string>

namespace lithe::host {

/// The submodule at dotted `path` ("" = the root itself), or nullopt when an atom is missing or
/// is not a module.
std::optional<torch::jit::Module> find_submodule(const torch::jit::Module& root,
                                                 const std::string& path);

/// find_submodule for a name known to exist; sdk::Error(kInvalidModel) naming it otherwise.
torch::jit::Module submodule(const torch::jit::Module& root, const std::string& path);

}  // namespace lithe::host
