// Dotted-name lookup of TorchScript submodules (see submodule.h).
#include "lithe/host/graph/submodule.h"

#include "lithe/sdk/error.h"

namespace lithe::host {

std::optional<torch::jit::Module> find_submodule(const torch::jit::Module& root,
                                                 const std::string& path) {
  torch::jit::Module current = root;
  size_t start = 0;
  while (start < path.size()) {
    const size_t dot = path.find('.', start);
    const std::string atom =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!current.hasattr(atom) || !current.attr(atom).isModule()) {
      return std::nullopt;
    }
    current = current.attr(atom).toModule();
    start = dot == std::string::npos ? path.size() : dot + 1;
  }
  return current;
}

torch::jit::Module submodule(const torch::jit::Module& root, const std::string& path) {
  std::optional<torch::jit::Module> found = find_submodule(root, path);
  LITHE_CHECK(found.has_value(), sdk::Errc::kInvalidModel, "the model has no submodule '", path,
              "'");
  return *found;
}

}  // namespace lithe::host
