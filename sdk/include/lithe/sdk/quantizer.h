#pragma once
/// \file
/// Quantizer and QuantGrad: NNI's quantization framework (declared in SDK API 1; the host side
/// that drives them arrives with the quantization work). A Quantizer decides *what* to quantize
/// and keeps per-layer state (scales, ranges) in layer attributes; a QuantGrad supplies the
/// quantize math and, optionally, its backward.

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "lithe/sdk/context.h"
#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/options.h"

namespace lithe::sdk {

/// Which tensor a quantization applies to. Values equal NNI's QuantType.
enum class QuantType : int { kInput = 0, kWeight = 1, kOutput = 2 };

/// Quantize math with a custom gradient. The SDK owns the single autograd adapter that calls
/// these, so plugins never write autograd code.
class LITHE_SDK_API QuantGrad {
 public:
  virtual ~QuantGrad();
  /// Fake-quantizes `x` (same shape, dtype and device). Runs without autograd recording.
  virtual at::Tensor quantize(const at::Tensor& x, QuantType type, LayerView& layer) = 0;
  /// (optional) Gradient w.r.t. `x` given `grad_output`; `x` is the tensor quantize() saw.
  /// Must not modify `grad_output` in place. Defaults to the straight-through estimator
  /// (returns `grad_output` unchanged).
  virtual at::Tensor backward(const at::Tensor& x, const at::Tensor& grad_output, QuantType type,
                              LayerView& layer);
};

/// A quantization algorithm. Config entries carry `quant_types` (subset of "weight", "input",
/// "output"), `quant_bits` (int, or an object per quant type) and algorithm keys such as
/// `quant_start_step`.
class LITHE_SDK_API Quantizer {
 public:
  virtual ~Quantizer();
  /// Same contract as Pruner::validate_config.
  virtual void validate_config(const Options& entry) const = 0;
  /// (optional) Called once before the first forward. Defaults to doing nothing.
  virtual void attach(CompressionContext& context);
  /// The math used for every quantized tensor of this algorithm. Lives as long as the Quantizer.
  virtual QuantGrad& quant_grad() = 0;
  /// (optional) Start of epoch `epoch`. Defaults to doing nothing.
  virtual void update_epoch(int64_t epoch);
  /// (optional) After each optimizer step (NNI's step_with_optimizer). Defaults to nothing.
  virtual void step();
};

}  // namespace lithe::sdk
