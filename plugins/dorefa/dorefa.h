#pragma once
// DoReFa weight quantization (NNI v2.0 DoReFaQuantizer, reference §3.3). Declared for unit
// tests, which link this plugin's object library and register it into their own registry.

#include <ATen/core/Tensor.h>
#include <lithe/sdk/registry.h>

#include <cstdint>

namespace lithe::plugins::dorefa {

/// Registers quantizer "dorefa".
void register_algorithms(sdk::Registry& registry);

/// NNI's DoReFa weight transform, with the same ATen ops in the same order (so bit-identical):
/// t = tanh(w); t = t / (2·max|t|) + 0.5; t = round(t·(2^bits − 1)) / (2^bits − 1) (round half
/// to even); result 2t − 1, in [−1, 1]. An all-zero `weight` gives zeros, where NNI divides 0
/// by 0 into NaN. `weight` is not modified.
at::Tensor dorefa_quantize(const at::Tensor& weight, int64_t bits);

}  // namespace lithe::plugins::dorefa
