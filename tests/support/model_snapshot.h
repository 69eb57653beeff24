#pragma once
// Copies of a model's weights, to compare before and after an operation.

#include <ATen/ATen.h>

#include <map>
#include <string>

#include "lithe/host/model/model.h"

namespace lithe::test {

/// Module name -> a detached copy of its weight, for every module that has one.
inline std::map<std::string, at::Tensor> snapshot_weights(const host::Model& model) {
  std::map<std::string, at::Tensor> out;
  for (const host::ModuleRecord& m : model.modules()) {
    if (m.weight.has_value()) {
      out[m.name] = m.weight->detach().clone();
    }
  }
  return out;
}

}  // namespace lithe::test
