#pragma once
// Learned step size quantization (Esser et al. 2020; NNI v2.10 LsqQuantizer, reference §5).
// Declared for unit tests, which link this plugin's object library and register it into their
// own registry.

#include <ATen/core/Tensor.h>
#include <lithe/sdk/registry.h>

#include <cstdint>

namespace lithe::plugins::lsq {

/// Fewest bits lsq accepts: the signed grid's qmax = 2^(bits−1) − 1 must be at least 1 (the
/// initial step size and the gradient scale divide by √qmax).
inline constexpr int64_t kMinBits = 2;

/// Smallest step size a forward divides by. A step size initialised from an all-zero tensor
/// (2·mean|x|/√qmax = 0), or pushed to or below 0 by the optimizer, is used as kMinScale
/// instead, so no forward or gradient becomes NaN; the gradient still reaches the stored step
/// size, which can recover. Far below any useful step size, so it never changes a real result.
inline constexpr float kMinScale = 1e-8f;

/// Registers quantizer "lsq".
void register_algorithms(sdk::Registry& registry);

/// NNI's initial step size of `x` at `bits`: 2·mean|x| / √qmax, not below kMinScale; a
/// float32 tensor of shape [1] without autograd history.
at::Tensor initial_scale(const at::Tensor& x, int64_t bits);

/// Per-channel initial step sizes of a weight: initial_scale of each slice of dim 0 (one per
/// output channel), float32 [weight.size(0)], not below kMinScale.
at::Tensor initial_channel_scales(const at::Tensor& weight, int64_t bits);

/// NNI's LSQ fake quantization, differentiable in `x` and `scale` (record autograd around it):
///   s' = gradscale(s, g), g = 1/√(qmax·numel(x)): value s, gradient scaled by g
///   x̂  = round_ste(clamp(x / s', qmin, qmax)) · s', round_ste: value round(·), gradient 1
/// with the signed grid qmin = −2^(bits−1), qmax = 2^(bits−1) − 1, in NNI's ATen operations
/// (so bit-identical to NNI for a step size >= kMinScale). `scale` has one element, or one
/// per slice of x's dim 0 (a weight's output channels: per_channel_symmetric), each slice then
/// using its own step size with g = 1/√(qmax·numel(slice)).
/// `numel` (> 0) replaces numel(x) in g: the whole step's element count in data-parallel
/// training, where x is one rank's share.
at::Tensor lsq_quantize(const at::Tensor& x, const at::Tensor& scale, int64_t bits,
                        int64_t numel = -1);

}  // namespace lithe::plugins::lsq
