// BNN (Hubara et al. 2016) as NNI v2.0's BNNQuantizer computes it (reference §3.4): weights and
// outputs become ±1 on every forward; `quant_bits` is required by the common config rules but
// unused. Lithe departure: ClipGrad masks the gradient out of place, where NNI writes into the
// incoming gradient and so zeroes all of an expanded (stride-0) gradient at the first clipped
// element (reference §6.11).
#include "bnn.h"

#include <lithe/sdk.h>

namespace lithe::plugins::bnn {
namespace {

// Every key this quantizer reads: the SDK's quant_types/quant_bits, narrowed to what it supports.
const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::quantizer_keys())
          .replace(sdk::OptionSpec(*sdk::quantizer_keys().find("quant_types"))
                       .one_of({"weight", "output"}));
  return schema;
}

class BnnQuantizer final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {sdk::QuantType::kWeight, sdk::QuantType::kOutput}, "bnn");
  }

  void attach(sdk::CompressionContext& context) override {
    for (sdk::LayerView* layer : context.layers()) {
      for (sdk::QuantType type : sdk::quant_types(layer->config())) {
        LITHE_CHECK(type != sdk::QuantType::kWeight || layer->weight().defined(),
                    sdk::Errc::kUnsupportedLayer, "layer '", layer->name(),
                    "': bnn is configured to quantize its weight, but this ", layer->op_type(),
                    " has none");
      }
    }
  }

  at::Tensor quantize_weight(const at::Tensor& weight, sdk::LayerView&, bool) override {
    return binarize(weight);
  }
  at::Tensor quantize_output(const at::Tensor& output, sdk::LayerView&, bool) override {
    return binarize(output);
  }
  const sdk::QuantGrad& quant_grad() const override { return grad_; }

 private:
  ClipGrad grad_;
};

}  // namespace

at::Tensor binarize(const at::Tensor& x) {
  at::NoGradGuard no_grad;
  // NNI: sign, then [sign == 0] = 1, so ±0 (and NaN, whose sign is 0) become +1.
  at::Tensor sign = at::sign(x);
  return sign.masked_fill_(sign.eq(0), 1);
}

at::Tensor ClipGrad::backward(const at::Tensor& x, const at::Tensor& grad_output,
                              sdk::QuantType type, const sdk::LayerView&) const {
  if (type != sdk::QuantType::kOutput) {
    return grad_output;
  }
  // at::where builds a new tensor of the broadcast shape, so an expanded grad_output is read,
  // never written.
  return at::where(x.abs() > 1, at::zeros({}, grad_output.options()), grad_output);
}

void register_algorithms(sdk::Registry& registry) {
  registry.add_quantizer({"bnn", "binarized weights and outputs (sign, 0 -> +1)"},
                         [](const sdk::Options&, const sdk::Registry&) {
                           return std::make_unique<BnnQuantizer>();
                         });
  registry.add_nni_counterpart({"bnn", "BNNQuantizer", "eval_forwards"});
  registry.describe_options("bnn", option_keys());
}

}  // namespace lithe::plugins::bnn

LITHE_PLUGIN("bnn", "1.1.0", lithe::plugins::bnn::register_algorithms)
