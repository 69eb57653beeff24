// LSQ: weights, inputs and outputs fake-quantized to a signed grid whose step sizes are
// learned by the optimizer alongside the model (parameters()). Built from differentiable ATen
// ops, so records_autograd() is true and the host calls quantize_* with autograd recording.
//
// Per-layer state (tensor attributes, float32 [1], created in attach, updated in place):
//   <type>_scale        the learned step size (requires_grad; the optimizer updates it); for a
//                       weight quantized per channel (quant_scheme per_channel_symmetric)
//                       float32 [C], one per output channel
//   <type>_initialized  input/output only: 1 once the step size was initialised from the first
//                       training batch, else 0 (saved with the model, so a restored layer is
//                       not re-initialised)
//   <type>_quant_min, _quant_max  the SDK's linear grid (read by the QDQ export): the signed
//                       grid [−2^(bits−1), 2^(bits−1) − 1] once the type quantizes (the weight
//                       from attach, an activation once initialised), 0 and 0 before
//
// Lithe departures from NNI v2.10: the activation step sizes are initialised once, from the
// first training batch (NNI re-initialises on every forward while its step counter is 1, in
// evaluation too); an evaluation forward before that passes the activation through; the step
// size a forward uses is at least kMinScale (no NaN from an all-zero tensor); the weight branch
// does not read input_scale (NNI's export bug).
#include "lsq.h"

#include <lithe/sdk.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace lithe::plugins::lsq {
namespace {

using sdk::QuantType;

int64_t signed_qmax(int64_t bits) { return (int64_t{1} << (bits - 1)) - 1; }

constexpr const char* kQuantScheme = "quant_scheme";

// The value an SDK conversion error quotes (its messages end "..., got <value>").
std::string value_seen(const sdk::Error& e) {
  const std::string what = e.what();
  const size_t at = what.find(", got ");
  return at == std::string::npos ? what : what.substr(at + 6);
}

// NNI v2.5's quant_scheme key (qat's), narrowed to lsq's grid, which is signed and symmetric
// (zero point 0): "per_tensor_symmetric" (the default) or, for the weight only,
// "per_channel_symmetric". A string sets every quant type of the entry, an object the quant
// types it names. Returns whether the weight is quantized per output channel.
bool weight_per_channel(const sdk::Options& entry) {
  if (!entry.has(kQuantScheme)) {
    return false;
  }
  entry.mark_read(kQuantScheme);
  const std::vector<QuantType> types = sdk::quant_types(entry);
  const std::string path = entry.path() + "/" + kQuantScheme;
  std::vector<std::tuple<QuantType, std::string, std::string>> chosen;  // type, value, where
  std::optional<std::string> text;
  try {
    text = entry.require<std::string>(kQuantScheme);
  } catch (const sdk::Error&) {
    // the object form, or a value of another type (reported below)
  }
  if (text) {
    for (QuantType type : types) {
      chosen.emplace_back(type, *text, path);
    }
  } else {
    sdk::Options object;
    try {
      object = entry.child(kQuantScheme);
    } catch (const sdk::Error& e) {
      throw sdk::Error(sdk::Errc::kInvalidConfig,
                       path + " must be a scheme name, or an object giving one per quant type, "
                              "got " + value_seen(e));
    }
    for (const std::string& name : object.keys()) {
      const std::string where = path + "/" + name;
      std::optional<QuantType> type;
      for (QuantType t : types) {
        type = name == sdk::quant_type_name(t) ? std::optional<QuantType>(t) : type;
      }
      LITHE_CHECK(type.has_value(), sdk::Errc::kInvalidConfig, where,
                  ": the keys of quant_scheme must be quant types of this entry, got \"",
                  sdk::printable(name, 80), "\"");
      std::optional<std::string> value;
      try {
        value = object.require<std::string>(name);
      } catch (const sdk::Error& e) {
        throw sdk::Error(sdk::Errc::kInvalidConfig,
                         where + " must be a scheme name (a string), got " + value_seen(e));
      }
      chosen.emplace_back(*type, *value, where);
    }
  }
  bool per_channel = false;
  for (const auto& [type, value, where] : chosen) {
    const bool channel = value == "per_channel_symmetric";
    LITHE_CHECK(channel || value == "per_tensor_symmetric", sdk::Errc::kInvalidConfig, where,
                " must be \"per_tensor_symmetric\" or \"per_channel_symmetric\" (lsq's grid is "
                "signed and symmetric, zero point 0), got \"",
                sdk::printable(value, 80), "\"");
    LITHE_CHECK(!channel || type == QuantType::kWeight, sdk::Errc::kInvalidConfig, where,
                " must be \"per_tensor_symmetric\" for the ", sdk::quant_type_name(type),
                " (per-channel step sizes are for the weight only, one per output channel), "
                "got \"per_channel_symmetric\"");
    per_channel = per_channel || channel;
  }
  return per_channel;
}

// Every key this quantizer reads: the SDK's quant_types/quant_bits, narrowed to what it supports.
const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::quantizer_keys())
          .replace(sdk::OptionSpec(*sdk::quantizer_keys().find("quant_bits"))
                       .at_least(kMinBits));
  return schema;
}

class LsqQuantizer final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {QuantType::kInput, QuantType::kWeight, QuantType::kOutput},
                             "lsq");
    (void)weight_per_channel(entry);
    for (QuantType type : sdk::quant_types(entry)) {
      const int64_t bits = sdk::quant_bits(entry, type);
      LITHE_CHECK(bits >= kMinBits, sdk::Errc::kInvalidConfig, sdk::quant_bits_path(entry, type),
                  ": lsq needs at least ", kMinBits, " bits for \"",
                  sdk::quant_type_name(type),
                  "\" (signed grid, qmax = 2^(bits-1) - 1 must be >= 1), got ", bits);
    }
  }

  void attach(sdk::CompressionContext& context) override {
    context_ = &context;
    scales_.clear();
    // A layer without a weight (ReLU) keeps its state where the model's weights are: the model's
    // device. quantize_activation moves it in place should the activations come from another.
    at::Device model_device(at::kCPU);
    for (sdk::LayerView* layer : context.layers()) {
      if (layer->weight().defined()) {
        model_device = layer->weight().device();
        break;
      }
    }
    for (sdk::LayerView* layer : context.layers()) {
      const at::Tensor& weight = layer->weight();
      const at::TensorOptions options =
          at::TensorOptions(weight.defined() ? weight.device() : model_device).dtype(at::kFloat);
      for (QuantType type : sdk::quant_types(layer->config())) {
        at::Tensor scale;
        if (type == QuantType::kWeight) {
          LITHE_CHECK(weight.defined(), sdk::Errc::kUnsupportedLayer, "layer '", layer->name(),
                      "': lsq is configured to quantize its weight, but this ",
                      layer->op_type(), " has none");
          const int64_t bits = sdk::quant_bits(layer->config(), type);
          const bool per_channel = weight_per_channel(layer->config());
          LITHE_CHECK(!per_channel || weight.dim() >= 1, sdk::Errc::kUnsupportedLayer, "layer '",
                      layer->name(), "': a per-channel step size needs a weight with an output "
                      "dimension, got a ", weight.dim(), "-dimensional one");
          scale = sdk::ensure_tensor_attribute(
              *layer, sdk::quant_state_key(type, "scale"),
              per_channel ? initial_channel_scales(weight, bits) : initial_scale(weight, bits));
          ensure_grid(*layer, type, /*quantizing=*/true);
        } else {
          // NNI's placeholder 1.0 until the first training batch sets the real value.
          scale = sdk::ensure_tensor_attribute(*layer, sdk::quant_state_key(type, "scale"),
                                               at::ones({1}, options));
          const at::Tensor initialized = sdk::ensure_tensor_attribute(
              *layer, sdk::quant_state_key(type, "initialized"), at::zeros({1}, options));
          ensure_grid(*layer, type, initialized.item<float>() != 0.0f);
        }
        scale.requires_grad_(true);  // also a restored step size: the optimizer learns it
        scales_.push_back(scale);
      }
    }
  }

  at::Tensor quantize_weight(const at::Tensor& weight, sdk::LayerView& layer, bool) override {
    return lsq_quantize(weight, sdk::tensor_attribute(layer, sdk::quant_state_key(QuantType::kWeight, "scale")),
                        sdk::quant_bits(layer.config(), QuantType::kWeight));
  }
  at::Tensor quantize_input(const at::Tensor& input, sdk::LayerView& layer,
                            bool training) override {
    return quantize_activation(input, layer, QuantType::kInput, training);
  }
  at::Tensor quantize_output(const at::Tensor& output, sdk::LayerView& layer,
                             bool training) override {
    return quantize_activation(output, layer, QuantType::kOutput, training);
  }

  bool records_autograd() const override { return true; }
  std::vector<at::Tensor> parameters() override { return scales_; }

 private:
  at::Tensor quantize_activation(const at::Tensor& x, sdk::LayerView& layer, QuantType type,
                                 bool training) {
    const at::Tensor scale = sdk::tensor_attribute(layer, sdk::quant_state_key(type, "scale"));
    const at::Tensor initialized = sdk::tensor_attribute(layer, sdk::quant_state_key(type, "initialized"));
    if (scale.device() != x.device()) {
      // Its state follows the activations, in place (set_data): the optimizer and the model hold
      // these very tensor objects, and gradients must meet the loss on one device.
      at::NoGradGuard no_grad;
      for (const char* name : {"scale", "initialized", "quant_min", "quant_max"}) {
        at::Tensor state = sdk::tensor_attribute(layer, sdk::quant_state_key(type, name));
        state.set_data(state.data().to(x.device()));
      }
    }
    const int64_t bits = sdk::quant_bits(layer.config(), type);
    if (initialized.item<float>() == 0.0f) {
      if (!training) {
        return x.clone();  // no step size yet: nothing sensible to quantize with
      }
      at::NoGradGuard no_grad;  // in-place writes to a leaf that requires grad
      scale.copy_(step_initial_scale(x, bits));
      initialized.fill_(1);
      ensure_grid(layer, type, /*quantizing=*/true);
    }
    // Data-parallel training: g scales by the whole step's activation count, as in one
    // process (a single process: x.numel() as it is).
    int64_t numel = x.numel();
    if (training) {
      std::vector<at::Tensor> count = {at::tensor({static_cast<double>(numel)}, at::kDouble)};
      context_->reduce_over_processes(count, sdk::Reduction::kSum);
      numel = static_cast<int64_t>(count[0].item<double>());
    }
    return lsq_quantize(x, scale, bits, numel);
  }

  /// The SDK's linear-grid attributes: LSQ's signed grid once `type` quantizes, the empty grid
  /// [0, 0] before (an activation without a step size passes through).
  static void ensure_grid(sdk::LayerView& layer, QuantType type, bool quantizing) {
    const at::TensorOptions options =
        sdk::tensor_attribute(layer, sdk::quant_state_key(type, "scale")).options().requires_grad(false);
    const at::Tensor quant_min = sdk::ensure_tensor_attribute(
        layer, sdk::quant_state_key(type, "quant_min"), at::zeros({1}, options));
    const at::Tensor quant_max = sdk::ensure_tensor_attribute(
        layer, sdk::quant_state_key(type, "quant_max"), at::zeros({1}, options));
    if (quantizing) {
      const int64_t qmax = signed_qmax(sdk::quant_bits(layer.config(), type));
      quant_min.fill_(static_cast<double>(-qmax - 1));
      quant_max.fill_(static_cast<double>(qmax));
    }
  }

  /// initial_scale of the first training batch; in data-parallel runs of the whole step:
  /// mean|x| combined over the ranks' shares as Σ mean·n / Σ n in float64 (exactly the local
  /// mean in a single process: a float times an integer below 2^29 is exact in float64).
  at::Tensor step_initial_scale(const at::Tensor& x, int64_t bits) const {
    at::NoGradGuard no_grad;
    const at::Tensor local = x.detach().abs().mean().to(at::kDouble).cpu();
    const auto n = static_cast<double>(x.numel());
    std::vector<at::Tensor> totals = {at::stack({local * n, at::scalar_tensor(n, at::kDouble)})};
    context_->reduce_over_processes(totals, sdk::Reduction::kSum);
    const at::Tensor mean = (totals[0][0] / totals[0][1]).to(at::kFloat).to(x.device());
    const double root_qmax = std::pow(static_cast<double>(signed_qmax(bits)), 0.5);
    return (mean * 2 / root_qmax).clamp_min(kMinScale).reshape({1});
  }

  sdk::CompressionContext* context_ = nullptr;  // the session's; it outlives the quantizer's use
  std::vector<at::Tensor> scales_;
};

}  // namespace

at::Tensor initial_scale(const at::Tensor& x, int64_t bits) {
  at::NoGradGuard no_grad;
  // NNI: x.detach().abs().mean() * 2 / (qmax ** 0.5), with qmax ** 0.5 a Python float.
  const double root_qmax = std::pow(static_cast<double>(signed_qmax(bits)), 0.5);
  const at::Tensor scale = x.detach().abs().mean() * 2 / root_qmax;
  return scale.clamp_min(kMinScale).to(at::kFloat).reshape({1});
}

at::Tensor initial_channel_scales(const at::Tensor& weight, int64_t bits) {
  at::NoGradGuard no_grad;
  const double root_qmax = std::pow(static_cast<double>(signed_qmax(bits)), 0.5);
  const at::Tensor mean = weight.detach().abs().reshape({weight.size(0), -1}).mean(1);
  return (mean * 2 / root_qmax).clamp_min(kMinScale).to(at::kFloat).contiguous();
}

at::Tensor lsq_quantize(const at::Tensor& x, const at::Tensor& scale, int64_t bits,
                        int64_t numel) {
  const int64_t qmax = signed_qmax(bits);
  const int64_t qmin = -qmax - 1;
  const int64_t channels = scale.numel();
  // NNI: 1.0 / ((qmax * x.numel()) ** 0.5). The product is exact in Python; in double it is
  // rounded once, as Python's int-to-float conversion rounds it. A per-channel step size sees
  // one channel's elements, so its count is that of one channel.
  const int64_t count = numel > 0 ? numel : x.numel() / channels;
  const double grad_factor =
      1.0 / std::pow(static_cast<double>(qmax) * static_cast<double>(count), 0.5);
  at::Tensor s;
  if (channels == 1) {
    s = scale.to(x.device()).reshape({});
  } else {  // one step size per slice of dim 0, broadcast over the others
    std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
    shape[0] = channels;
    s = scale.to(x.device()).reshape(shape);
  }
  // Value max(s, kMinScale) exactly (s − s is 0), gradient to s unchanged, so a step size the
  // optimizer drove to or below 0 can grow back. Exactly s whenever s >= kMinScale.
  s = s.clamp_min(kMinScale).detach() + (s - s.detach());
  // NNI's grad_scale: value s, gradient scaled by grad_factor.
  const at::Tensor s_grad = s * grad_factor;
  s = (s - s_grad).detach() + s_grad;
  at::Tensor y = at::clamp(x / s, qmin, qmax);
  // NNI's round_pass: value round(y) (half to even), gradient 1.
  y = (y.round() - y).detach() + y;
  return y * s;
}

void register_algorithms(sdk::Registry& registry) {
  registry.add_quantizer(
      {"lsq", "learned step size quantization: signed grid, step sizes trained with the model"},
      [](const sdk::Options&, const sdk::Registry&) { return std::make_unique<LsqQuantizer>(); });
  registry.describe_options("lsq", option_keys());
}

}  // namespace lithe::plugins::lsq

LITHE_PLUGIN("lsq", "1.2.0", lithe::plugins::lsq::register_algorithms)
