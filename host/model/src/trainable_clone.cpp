#include "lithe/host/model/trainable_clone.h"

#include <map>
#include <string>

namespace lithe::host {

torch::jit::Module trainable_clone(const torch::jit::Module& module) {
  std::map<std::string, bool> requires_grad;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    requires_grad[p.name] = p.value.requires_grad();
  }
  torch::jit::Module copy;
  {
    const at::NoGradGuard no_grad;  // the copies are leaves, with no grad_fn
    copy = module.clone();
  }
  for (const auto& p : copy.named_parameters(/*recurse=*/true)) {
    at::Tensor tensor = p.value;
    tensor.requires_grad_(requires_grad.at(p.name));
  }
  return copy;
}

}  // namespace lithe::host
