#pragma once
// Binarized neural networks (NNI v2.0 BNNQuantizer, reference §3.4). Declared for unit tests,
// which link this plugin's object library and register it into their own registry.

#include <ATen/core/Tensor.h>
#include <lithe/sdk/quantizer.h>
#include <lithe/sdk/registry.h>

namespace lithe::plugins::bnn {

/// Registers quantizer "bnn".
void register_algorithms(sdk::Registry& registry);

/// sign(x) with 0 and −0 mapped to +1 (NNI: torch.sign, then [sign == 0] = 1). Used for weights
/// and outputs alike. `x` is not modified.
at::Tensor binarize(const at::Tensor& x);

/// NNI's ClipGrad, out of place: the output gradient is zeroed where |pre-sign output| > 1
/// (the straight-through estimator of the hard tanh); the weight gradient passes unchanged.
class ClipGrad final : public sdk::QuantGrad {
 public:
  at::Tensor backward(const at::Tensor& x, const at::Tensor& grad_output, sdk::QuantType type,
                      const sdk::LayerView& layer) const override;
};

}  // namespace lithe::plugins::bnn
