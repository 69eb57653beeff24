// Naive quantization: symmetric per-tensor weight quantization with a running-max scale and
// truncation toward zero, on every forward in training and evaluation (NNI v2.0
// NaiveQuantizer, reference §3.1; gradients reach the float weight by the straight-through
// estimator, the SDK's default QuantGrad).
//
// Lithe departures: any bit width from 2 up (NNI fixes 8; 8 bits is bit-identical to NNI), and
// an all-zero weight gives zeros instead of NaN.
#include "naive.h"

#include <lithe/sdk.h>

namespace lithe::plugins::naive {
namespace {

constexpr const char* kScaleKey = "weight_scale";

// Every key this quantizer reads: the SDK's quant_types/quant_bits, narrowed to what it supports.
const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::quantizer_keys())
          .replace(sdk::OptionSpec(*sdk::quantizer_keys().find("quant_types"))
                       .one_of({"weight"}))
          .replace(sdk::OptionSpec(*sdk::quantizer_keys().find("quant_bits"))
                       .at_least(kMinBits));
  return schema;
}

class NaiveQuantizer final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {sdk::QuantType::kWeight}, "naive");
    const int64_t bits = sdk::quant_bits(entry, sdk::QuantType::kWeight);
    LITHE_CHECK(bits >= kMinBits, sdk::Errc::kInvalidConfig,
                sdk::quant_bits_path(entry, sdk::QuantType::kWeight), ": naive needs at least ",
                kMinBits,
                " bits for \"weight\" (signed grid, qmax = 2^(bits-1) - 1 must be >= 1), got ",
                bits);
  }

  void attach(sdk::CompressionContext& context) override {
    for (sdk::LayerView* layer : context.layers()) {
      const at::Tensor& weight = layer->weight();
      LITHE_CHECK(weight.defined(), sdk::Errc::kUnsupportedLayer, "layer '", layer->name(),
                  "': naive quantizes weights, but this ", layer->op_type(), " has none");
      // NNI's layer_scale starts at 0: the first forward sets it to max|W| / qmax.
      sdk::ensure_tensor_attribute(*layer, kScaleKey,
                                   at::zeros({1}, weight.options().dtype(at::kFloat)));
    }
  }

  at::Tensor quantize_weight(const at::Tensor& weight, sdk::LayerView& layer, bool) override {
    return naive_quantize(weight, sdk::tensor_attribute(layer, kScaleKey),
                          sdk::quant_bits(layer.config(), sdk::QuantType::kWeight));
  }
};

}  // namespace

at::Tensor naive_quantize(const at::Tensor& weight, const at::Tensor& scale, int64_t bits) {
  at::NoGradGuard no_grad;
  const auto qmax = static_cast<double>((int64_t{1} << (bits - 1)) - 1);
  // NNI: new_scale = w.abs().max() / 127; scale = max(layer_scale, new_scale), a 0-dim tensor on
  // the weight's device. The same ops on the same operands give the same float32 bits.
  const at::Tensor running = at::maximum(scale.to(weight.device()).reshape({}),
                                         weight.abs().max() / qmax);
  scale.copy_(running.reshape({1}));
  // The scale is 0 only while every weight seen was 0; dividing by 1 then keeps the zeros.
  const at::Tensor divisor = at::where(running > 0, running, at::ones_like(running));
  // NNI: w.div(scale).type(torch.int8).type(float).mul(scale). int64 truncates toward zero like
  // int8 wherever int8 is exact (|w / scale| <= qmax + rounding), and also at wider bit widths;
  // the integer round trip turns -0 into +0 as NNI's does.
  return weight.div(divisor).to(at::kLong).to(weight.scalar_type()).mul(divisor);
}

void register_algorithms(sdk::Registry& registry) {
  registry.add_quantizer(
      {"naive", "symmetric per-tensor weight quantization, running-max scale, truncation"},
      [](const sdk::Options&, const sdk::Registry&) {
        return std::make_unique<NaiveQuantizer>();
      });
  registry.add_nni_counterpart({"naive", "NaiveQuantizer", "eval_forwards"});
  registry.describe_options("naive", option_keys());
}

}  // namespace lithe::plugins::naive

LITHE_PLUGIN("naive", "1.1.0", lithe::plugins::naive::register_algorithms)
