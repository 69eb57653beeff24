#pragma once
// The five conformance models (tests/data/nni/models) and masks for them.

#include <torch/script.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "lithe/host/io/mask_file.h"
#include "support/paths.h"

namespace lithe::test {

inline std::filesystem::path conformance_model_file(const std::string& name) {
  return nni_data_dir() / "models" / (name + ".pt");
}

/// The scripted conformance model `name`, in eval mode.
inline torch::jit::Module load_conformance_model(const std::string& name) {
  torch::jit::Module module = torch::jit::load(conformance_model_file(name).string());
  module.eval();
  return module;
}

/// Masks that zero the first half of the filters (weight and bias) of each of `layers`.
inline host::NamedMasks first_half_filter_masks(const torch::jit::Module& model,
                                                const std::vector<std::string>& layers) {
  host::NamedMasks masks;
  for (const std::string& layer : layers) {
    const at::Tensor w = model.attr(layer).toModule().attr("weight").toTensor();
    at::Tensor mask = torch::ones_like(w);
    mask.slice(0, 0, w.size(0) / 2).zero_();
    at::Tensor bias = torch::ones({w.size(0)});
    bias.slice(0, 0, w.size(0) / 2).zero_();
    masks.push_back({layer, {mask, bias}});
  }
  return masks;
}

}  // namespace lithe::test
