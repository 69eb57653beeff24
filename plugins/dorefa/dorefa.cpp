// DoReFa-Net weight quantization (Zhou et al. 2016) as NNI v2.0's DoReFaQuantizer computes it
// (reference §3.3): weights only, on every forward, gradients to the float weight by the
// straight-through estimator (the SDK's default QuantGrad). Lithe departure: an all-zero weight
// gives zeros instead of NaN.
#include "dorefa.h"

#include <lithe/sdk.h>

#include <cmath>

namespace lithe::plugins::dorefa {
namespace {

// Every key this quantizer reads: the SDK's quant_types/quant_bits, narrowed to what it supports.
const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::quantizer_keys())
          .replace(sdk::OptionSpec(*sdk::quantizer_keys().find("quant_types"))
                       .one_of({"weight"}));
  return schema;
}

class DorefaQuantizer final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {sdk::QuantType::kWeight}, "dorefa");
  }

  void attach(sdk::CompressionContext& context) override {
    for (sdk::LayerView* layer : context.layers()) {
      LITHE_CHECK(layer->weight().defined(), sdk::Errc::kUnsupportedLayer, "layer '",
                  layer->name(), "': dorefa quantizes weights, but this ", layer->op_type(),
                  " has none");
    }
  }

  at::Tensor quantize_weight(const at::Tensor& weight, sdk::LayerView& layer, bool) override {
    return dorefa_quantize(weight, sdk::quant_bits(layer.config(), sdk::QuantType::kWeight));
  }
};

}  // namespace

at::Tensor dorefa_quantize(const at::Tensor& weight, int64_t bits) {
  at::NoGradGuard no_grad;
  // NNI: scale = pow(2, q_bits) - 1, a Python int that ATen converts to float32 exactly as it
  // converts this double (both are the same integer).
  const double levels = std::ldexp(1.0, static_cast<int>(bits)) - 1.0;
  at::Tensor t = weight.tanh();
  const at::Tensor max_abs = t.abs().max();
  t = t / (2 * max_abs) + 0.5;
  t = at::round(t * levels) / levels;
  const at::Tensor quantized = 2 * t - 1;
  // max|tanh(w)| is 0 only for an all-zero weight; NNI's 0/0 there would give NaN everywhere.
  return at::where(max_abs > 0, quantized, at::zeros_like(quantized));
}

void register_algorithms(sdk::Registry& registry) {
  registry.add_quantizer({"dorefa", "DoReFa weight quantization: tanh, rescale to [0, 1], round"},
                         [](const sdk::Options&, const sdk::Registry&) {
                           return std::make_unique<DorefaQuantizer>();
                         });
  registry.add_nni_counterpart({"dorefa", "DoReFaQuantizer", "eval_forwards"});
  registry.describe_options("dorefa", option_keys());
}

}  // namespace lithe::plugins::dorefa

LITHE_PLUGIN("dorefa", "1.1.0", lithe::plugins::dorefa::register_algorithms)
