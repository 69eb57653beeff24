#pragma once
// A masker that prunes the first k = prune_count(numel, sparsity) weights in row-major order: a
// rule tests can predict exactly and that differs from every real algorithm's choice. Used by
// the SDK 1.3 loader fixture and by the conformance tests as "a pruner that is not NNI's".

#include <ATen/ATen.h>

#include <optional>

#include "lithe/sdk/layer.h"
#include "lithe/sdk/masker.h"

namespace lithe::test {

class FirstWeightsMasker final : public sdk::WeightMasker {
 public:
  std::optional<sdk::Masks> calc_mask(sdk::LayerView& layer, double sparsity) override {
    const at::Tensor& weight = layer.weight();
    const int64_t k = sdk::prune_count(weight.numel(), sparsity);
    at::Tensor flat = at::ones({weight.numel()}, weight.options().dtype(at::kFloat));
    flat.narrow(0, 0, k).zero_();
    sdk::Masks masks;
    masks.weight = flat.reshape(weight.sizes());
    return masks;
  }
};

}  // namespace lithe::test
