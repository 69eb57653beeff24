// PTQ: post-training quantization. Observers record the range of each activation on the
// forwards the host runs with training = true (`lithe compress --calibration-batches N`, or
// training); after every such forward the grid (scale, zero point, [qmin, qmax]) is that of the
// range observed so far, so the state saved after calibration is complete. Evaluation forwards
// quantize with the stored grid and change nothing. Weights are quantized from the current
// weight (min_max, percentile or mse over the weight itself), per tensor or per output channel.
// The fake quantization is the kernels' fused one (QuantFormula::kNni); the gradient is the
// SDK's straight-through estimator.
//
// Per-layer state (tensor attributes, float32, created in attach with fixed shapes, updated in
// place; <t> is input, weight or output):
//   <t>_scale, <t>_zero_point        [1], or [C] for a per-channel weight
//   <t>_quant_min, <t>_quant_max     [1]: the SDK's linear grid; 0 and 0 (empty) while an
//                                    activation passes through (nothing observed yet)
// activations only:
//   <t>_observer                     [1]: the observer's code (0 min_max ... 4 kl)
//   <t>_batches                      [1]: observing forwards so far
//   <t>_observed_min, _observed_max  [1]: min and max seen (moving_average: their EMAs);
//                                    +inf / −inf before the first
//   <t>_histogram                    [2048]: percentile, mse (values), kl (|values|)
//   <t>_histogram_start, _histogram_bin_width  [1]: where the bins lie; width 0 = empty
#include "ptq.h"

#include <lithe/kernels/fake_quant_ops.h>
#include <lithe/sdk.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "observers.h"
#include "ptq_config.h"

namespace lithe::plugins::ptq {
namespace {

using sdk::QuantType;

std::string key(QuantType type, const char* field) { return sdk::quant_state_key(type, field); }

/// The values of one-element float tensors of one device, with one copy to the host.
std::vector<float> host_values(const std::vector<at::Tensor>& tensors) {
  std::vector<float> out;
  bool on_cpu = true;
  for (const at::Tensor& t : tensors) {
    on_cpu = on_cpu && t.device().is_cpu() && t.scalar_type() == at::kFloat;
  }
  if (on_cpu) {  // the common case: no tensor ops on the hot path
    for (const at::Tensor& t : tensors) {
      out.push_back(*t.data_ptr<float>());
    }
    return out;
  }
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : tensors) {
    parts.push_back(t.detach().reshape({-1}).to(at::kFloat));
  }
  const at::Tensor all = at::cat(parts).cpu().contiguous();
  return {all.data_ptr<float>(), all.data_ptr<float>() + all.numel()};
}

std::vector<float> to_vector(const at::Tensor& t) {
  const at::Tensor host = t.detach().to(at::kFloat).cpu().contiguous();
  return {host.data_ptr<float>(), host.data_ptr<float>() + host.numel()};
}

/// The fused fake quantization of the kernels (float32; other floating types converted).
at::Tensor fake_quantize(const at::Tensor& x, const Params& p, const TypeConfig& config) {
  const at::Tensor y =
      kernels::fake_quantize_per_tensor(x.to(at::kFloat), p.scale, p.zero_point, config.qmin,
                                        config.qmax, kernels::QuantFormula::kNni)
          .output;
  return y.to(x.scalar_type());
}

at::Tensor fake_quantize_per_channel(const at::Tensor& x, const at::Tensor& scale,
                                     const at::Tensor& zero_point, const TypeConfig& config) {
  const at::Tensor y =
      kernels::fake_quantize_per_channel(x.to(at::kFloat), scale, zero_point, /*axis=*/0,
                                         config.qmin, config.qmax, kernels::QuantFormula::kNni)
          .output;
  return y.to(x.scalar_type());
}

/// ensure_tensor_attribute, refusing a saved state of another shape with a message that says
/// which configuration change caused it.
at::Tensor ensure(sdk::LayerView& layer, const std::string& name, const at::Tensor& initial) {
  const sdk::AttributeValue* saved = layer.attribute(name);
  const auto* tensor = saved != nullptr ? std::get_if<at::Tensor>(saved) : nullptr;
  LITHE_CHECK(tensor == nullptr || !tensor->defined() || tensor->sizes() == initial.sizes(),
              sdk::Errc::kInvalidModel, "layer '", layer.name(), "': its saved ptq state '", name,
              "' has shape ", tensor->sizes(), ", but this entry needs ", initial.sizes(),
              " (another quant_scheme or observer); keep the saved model's configuration, or "
              "quantize the float model");
  return sdk::ensure_tensor_attribute(layer, name, initial);
}

/// One activation's state tensors (the histogram ones undefined unless its observer keeps one).
struct ActivationState {
  at::Tensor scale, zero_point, quant_min, quant_max, observer, batches, observed_min, observed_max,
      histogram, histogram_start, histogram_bin_width;

  static ActivationState of(const sdk::LayerView& layer, QuantType type, bool histogram) {
    ActivationState s;
    s.scale = sdk::tensor_attribute(layer, key(type, "scale"));
    s.zero_point = sdk::tensor_attribute(layer, key(type, "zero_point"));
    s.quant_min = sdk::tensor_attribute(layer, key(type, "quant_min"));
    s.quant_max = sdk::tensor_attribute(layer, key(type, "quant_max"));
    s.observer = sdk::tensor_attribute(layer, key(type, "observer"));
    s.batches = sdk::tensor_attribute(layer, key(type, "batches"));
    s.observed_min = sdk::tensor_attribute(layer, key(type, "observed_min"));
    s.observed_max = sdk::tensor_attribute(layer, key(type, "observed_max"));
    if (histogram) {
      s.histogram = sdk::tensor_attribute(layer, key(type, "histogram"));
      s.histogram_start = sdk::tensor_attribute(layer, key(type, "histogram_start"));
      s.histogram_bin_width = sdk::tensor_attribute(layer, key(type, "histogram_bin_width"));
    }
    return s;
  }
  Histogram read_histogram() const {
    Histogram h;
    const at::Tensor counts = histogram.detach().to(at::kDouble).cpu().contiguous();
    h.counts.assign(counts.data_ptr<double>(), counts.data_ptr<double>() + kBins);
    const std::vector<float> v = host_values({histogram_start, histogram_bin_width});
    h.start = v[0];
    h.width = v[1];
    return h;
  }
  void write(const Histogram& h) const {
    histogram.copy_(at::tensor(h.counts, at::kDouble));
    histogram_start.fill_(h.start);
    histogram_bin_width.fill_(h.width);
  }
};

/// Writes the SDK's linear grid of `type` (only when it changes).
void set_grid(const sdk::LayerView& layer, QuantType type, float qmin, float qmax) {
  const at::Tensor lo = sdk::tensor_attribute(layer, key(type, "quant_min"));
  const at::Tensor hi = sdk::tensor_attribute(layer, key(type, "quant_max"));
  const std::vector<float> now = host_values({lo, hi});
  if (now[0] != qmin || now[1] != qmax) {
    lo.fill_(qmin);
    hi.fill_(qmax);
  }
}

/// A layer's config as numbers (read once, at attach) and what its weight's grid was computed
/// from.
struct LayerInfo {
  EntryConfig config;
  const void* weight_impl = nullptr;  ///< mse/percentile: the weight (and version) last seen
  int64_t weight_version = -1;
  Params weight_params;  ///< per tensor: the values the state holds
};

class PtqQuantizer final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {QuantType::kInput, QuantType::kWeight, QuantType::kOutput},
                             "ptq");
    (void)read_entry(entry);
  }

  void attach(sdk::CompressionContext& context) override {
    context_ = &context;
    infos_.clear();
    weight_layers_.clear();
    for (sdk::LayerView* layer : context.layers()) {
      infos_[layer].config = read_entry(layer->config());
    }
    for (sdk::LayerView* layer : context.layers()) {
      for (QuantType type : sdk::quant_types(layer->config())) {
        attach_type(*layer, type);
      }
    }
  }

  at::Tensor quantize_weight(const at::Tensor& weight, sdk::LayerView& layer, bool) override {
    at::NoGradGuard no_grad;
    if (weight.numel() == 0) {
      return weight.clone();
    }
    observe_weight(layer, weight);
    const LayerInfo& info = info_of(layer);
    const TypeConfig& config = info.config.of(QuantType::kWeight);
    if (config.per_channel) {
      return fake_quantize_per_channel(
          weight, sdk::tensor_attribute(layer, key(QuantType::kWeight, "scale")),
          sdk::tensor_attribute(layer, key(QuantType::kWeight, "zero_point")), config);
    }
    return fake_quantize(weight, info.weight_params, config);
  }

  at::Tensor quantize_input(const at::Tensor& input, sdk::LayerView& layer,
                            bool training) override {
    return quantize_activation(input, layer, QuantType::kInput, training);
  }
  at::Tensor quantize_output(const at::Tensor& output, sdk::LayerView& layer,
                             bool training) override {
    return quantize_activation(output, layer, QuantType::kOutput, training);
  }

  /// Fine-tuning moved the weights: their grids follow (the saved state matches the weights).
  void step() override {
    at::NoGradGuard no_grad;
    for (sdk::LayerView* layer : weight_layers_) {
      info_of(*layer).weight_impl = nullptr;
      observe_weight(*layer, layer->weight());
    }
  }

 private:
  LayerInfo& info_of(const sdk::LayerView& layer) {
    const auto it = infos_.find(&layer);
    LITHE_CHECK(it != infos_.end(), sdk::Errc::kInternal, "layer '", layer.name(),
                "': ptq quantizes before attach()");
    return it->second;
  }

  /// Creates (or keeps, when restored) the state of one quant type of a layer.
  void attach_type(sdk::LayerView& layer, QuantType type) {
    at::NoGradGuard no_grad;
    const TypeConfig& config = info_of(layer).config.of(type);
    const at::Tensor& weight = layer.weight();
    const at::TensorOptions options =
        at::TensorOptions(weight.defined() ? weight.device() : at::Device(at::kCPU))
            .dtype(at::kFloat);
    ensure(layer, key(type, "quant_min"), at::zeros({1}, options));
    ensure(layer, key(type, "quant_max"), at::zeros({1}, options));
    if (type == QuantType::kWeight) {
      LITHE_CHECK(weight.defined(), sdk::Errc::kUnsupportedLayer, "layer '", layer.name(),
                  "': ptq is configured to quantize its weight, but this ", layer.op_type(),
                  " has none");
      LITHE_CHECK(!config.per_channel || weight.dim() >= 1, sdk::Errc::kUnsupportedLayer, "layer '",
                  layer.name(), "': ptq's per_channel quant_scheme quantizes the ",
                  "weight per output channel (dim 0), but this ", layer.op_type(),
                  "'s weight is a scalar");
      const int64_t count = config.per_channel ? weight.size(0) : 1;
      ensure(layer, key(type, "scale"), at::ones({count}, options));
      ensure(layer, key(type, "zero_point"), at::zeros({count}, options));
      weight_layers_.push_back(&layer);
      if (weight.numel() > 0) {
        observe_weight(layer, weight);
        set_grid(layer, type, static_cast<float>(config.qmin), static_cast<float>(config.qmax));
      }
      return;
    }
    const auto code = static_cast<float>(static_cast<int>(config.observer));
    ensure(layer, key(type, "scale"), at::ones({1}, options));
    ensure(layer, key(type, "zero_point"), at::zeros({1}, options));
    const at::Tensor observer = ensure(layer, key(type, "observer"), at::full({1}, code, options));
    const at::Tensor batches = ensure(layer, key(type, "batches"), at::zeros({1}, options));
    const float inf = std::numeric_limits<float>::infinity();
    ensure(layer, key(type, "observed_min"), at::full({1}, inf, options));
    ensure(layer, key(type, "observed_max"), at::full({1}, -inf, options));
    const std::vector<float> saved = host_values({observer, batches});
    if (saved[1] > 0.0f) {  // restored from a calibrated model
      const float s = saved[0];
      LITHE_CHECK(
          s == code, sdk::Errc::kInvalidModel, "layer '", layer.name(),
          "': its saved ptq state for the ", sdk::quant_type_name(type), " was observed by ",
          s >= 0.0f && s <= 4.0f && s == std::floor(s)
              ? std::string("\"") + observer_name(static_cast<Observer>(static_cast<int>(s))) + "\""
              : "an unknown observer",
          ", but this entry's observer is \"", observer_name(config.observer),
          "\"; keep the saved model's observer, or quantize the float model");
    }
    observer.fill_(code);
    if (uses_histogram(config.observer)) {
      ensure(layer, key(type, "histogram"), at::zeros({kBins}, options));
      ensure(layer, key(type, "histogram_start"), at::zeros({1}, options));
      ensure(layer, key(type, "histogram_bin_width"), at::zeros({1}, options));
    }
    const ActivationState state = ActivationState::of(layer, type, uses_histogram(config.observer));
    if (saved[1] > 0.0f) {  // the saved observations, on this entry's grid
      const std::vector<float> range = host_values({state.observed_min, state.observed_max});
      std::optional<Histogram> h;
      if (uses_histogram(config.observer)) {
        h = state.read_histogram();
      }
      store_params(layer, type, state, range[0], range[1], h ? &*h : nullptr);
    } else {
      set_grid(layer, type, 0.0f, 0.0f);
    }
  }

  /// The weight's grid from the weight itself; mse and percentile only when the weight changed
  /// (their searches cost a sort or 100 passes).
  void observe_weight(sdk::LayerView& layer, const at::Tensor& weight) {
    LayerInfo& info = info_of(layer);
    const TypeConfig& config = info.config.of(QuantType::kWeight);
    if (weight.numel() == 0 ||
        (config.observer != Observer::kMinMax && info.weight_impl == weight.unsafeGetTensorImpl() &&
         info.weight_version == weight._version())) {
      return;
    }
    const at::Tensor rows =
        weight.detach().to(at::kFloat).reshape({config.per_channel ? weight.size(0) : 1, -1});
    Ranges ranges;
    if (config.observer == Observer::kPercentile) {
      const double p = info.config.percentile / 100.0;
      ranges.min = row_quantiles(rows, 1.0 - p);
      ranges.max = row_quantiles(rows, p);
    } else {
      const auto [lo, hi] = at::aminmax(rows, 1);
      ranges.min = to_vector(lo);
      ranges.max = to_vector(hi);
      if (config.observer == Observer::kMse) {
        for (size_t c = 0; c < ranges.min.size(); ++c) {
          ranges.min[c] = std::min(ranges.min[c], 0.0f);
          ranges.max[c] = std::max(ranges.max[c], 0.0f);
        }
        ranges = mse_ranges(rows, at::Tensor(), ranges, config);
      }
    }
    std::vector<float> scale;
    std::vector<float> zero_point;
    for (size_t c = 0; c < ranges.min.size(); ++c) {
      const Params p = config.params(ranges.min[c], ranges.max[c]);
      scale.push_back(p.scale);
      zero_point.push_back(p.zero_point);
    }
    const at::Tensor s = sdk::tensor_attribute(layer, key(QuantType::kWeight, "scale"));
    const at::Tensor z = sdk::tensor_attribute(layer, key(QuantType::kWeight, "zero_point"));
    if (config.per_channel) {
      s.copy_(at::tensor(scale, at::kFloat));
      z.copy_(at::tensor(zero_point, at::kFloat));
    } else {
      s.fill_(scale[0]);
      z.fill_(zero_point[0]);
    }
    info.weight_params = {scale[0], zero_point[0]};
    info.weight_impl = weight.unsafeGetTensorImpl();
    info.weight_version = weight._version();
  }

  at::Tensor quantize_activation(const at::Tensor& x, sdk::LayerView& layer, QuantType type,
                                 bool training) {
    at::NoGradGuard no_grad;
    const TypeConfig& config = info_of(layer).config.of(type);
    const ActivationState state = ActivationState::of(layer, type, uses_histogram(config.observer));
    if (training && x.numel() > 0) {
      observe(layer, type, x, state);
    }
    const std::vector<float> v =
        host_values({state.scale, state.zero_point, state.quant_min, state.quant_max});
    if (!(v[3] > v[2]) || x.numel() == 0) {
      return x.clone();  // nothing observed yet: passes through
    }
    return fake_quantize(x, Params{v[0], v[1]}, config);
  }

  /// Folds one batch into the observer's state and stores the grid of what was observed.
  void observe(const sdk::LayerView& layer, QuantType type, const at::Tensor& x,
               const ActivationState& state) {
    const LayerInfo& info = info_of(layer);
    const TypeConfig& config = info.config.of(type);
    const at::Tensor xf = x.detach().to(at::kFloat);
    // The step's range over every rank of a data-parallel run (one process: x's own).
    const auto [lo_t, hi_t] = at::aminmax(xf);
    std::vector<at::Tensor> bounds = {at::stack({-lo_t, hi_t}).cpu().contiguous()};
    context_->reduce_over_processes(bounds, sdk::Reduction::kMax);
    const float lo = -bounds[0].data_ptr<float>()[0];
    const float hi = bounds[0].data_ptr<float>()[1];
    LITHE_CHECK(std::isfinite(lo) && std::isfinite(hi), sdk::Errc::kInvalidModel, "layer '",
                layer.name(), "': ptq observed a non-finite ", sdk::quant_type_name(type), " (min ",
                lo, ", max ", hi, "); calibration needs finite activations");
    const std::vector<float> v =
        host_values({state.batches, state.observed_min, state.observed_max});
    float omin = std::min(v[1], lo);
    float omax = std::max(v[2], hi);
    if (config.observer == Observer::kMovingAverage) {  // the first batch initialises
      omin = v[0] > 0.0f ? moving_average(v[1], lo, info.config.averaging_constant) : lo;
      omax = v[0] > 0.0f ? moving_average(v[2], hi, info.config.averaging_constant) : hi;
    }
    state.batches.add_(1);
    state.observed_min.fill_(omin);
    state.observed_max.fill_(omax);
    std::optional<Histogram> h;
    if (uses_histogram(config.observer)) {
      h = state.read_histogram();
      const bool magnitude = config.observer == Observer::kKl;
      const at::Tensor values = magnitude ? xf.abs() : xf;
      cover(*h, magnitude ? 0.0 : lo, magnitude ? std::max(-lo, hi) : hi);
      const at::Tensor bins = ((values - h->start) / h->width)
                                  .floor_()
                                  .clamp_(0, static_cast<double>(kBins - 1))
                                  .to(at::kLong)
                                  .flatten();
      std::vector<at::Tensor> batch = {
          at::bincount(bins, {}, kBins).to(at::kDouble).cpu().contiguous()};
      context_->reduce_over_processes(batch, sdk::Reduction::kSum);
      const double* counts = batch[0].data_ptr<double>();
      for (size_t b = 0; b < static_cast<size_t>(kBins); ++b) {
        h->counts[b] += counts[b];
      }
      state.write(*h);
    }
    store_params(layer, type, state, omin, omax, h ? &*h : nullptr);
  }

  /// The observer's range from the state (min/max and histogram), as the grid of `type`.
  void store_params(const sdk::LayerView& layer, QuantType type, const ActivationState& state,
                    float omin, float omax, const Histogram* h) {
    const LayerInfo& info = info_of(layer);
    const TypeConfig& config = info.config.of(type);
    float rmin = omin;
    float rmax = omax;
    if (config.observer == Observer::kPercentile) {
      const double p = info.config.percentile / 100.0;
      rmin = static_cast<float>(std::clamp<double>(quantile(*h, 1.0 - p), omin, omax));
      rmax = static_cast<float>(std::clamp<double>(quantile(*h, p), omin, omax));
    } else if (config.observer == Observer::kMse) {
      const at::Tensor centres =
          ((at::arange(kBins, at::kDouble) + 0.5) * h->width + h->start).to(at::kFloat);
      const at::Tensor counts = at::tensor(h->counts, at::kDouble).to(at::kFloat);
      const Ranges chosen =
          mse_ranges(centres.unsqueeze(0), counts.unsqueeze(0),
                     Ranges{{std::min(omin, 0.0f)}, {std::max(omax, 0.0f)}}, config);
      rmin = chosen.min[0];
      rmax = chosen.max[0];
    } else if (config.observer == Observer::kKl) {
      // The codes that [0, threshold] gets: the whole grid for non-negative values on an
      // affine grid, half of it otherwise (TensorRT: 128 of int8, 256 unsigned).
      const int64_t levels = int64_t{1}
                             << (config.symmetric || omin < 0.0f ? config.bits - 1 : config.bits);
      const double threshold = kl_threshold(*h, levels);
      rmin = static_cast<float>(std::max<double>(-threshold, omin));
      rmax = static_cast<float>(std::min<double>(threshold, omax));
    }
    const Params p = config.params(rmin, rmax);
    state.scale.fill_(p.scale);
    state.zero_point.fill_(p.zero_point);
    set_grid(layer, type, static_cast<float>(config.qmin), static_cast<float>(config.qmax));
  }

  sdk::CompressionContext* context_ = nullptr;  // the session's; it outlives the quantizer's use
  std::map<const sdk::LayerView*, LayerInfo> infos_;
  std::vector<sdk::LayerView*> weight_layers_;
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_quantizer(
      {"ptq",
       "post-training quantization: min_max, moving_average, percentile, mse or kl "
       "observers calibrate affine or symmetric grids (per channel for weights)"},
      [](const sdk::Options&, const sdk::Registry&) { return std::make_unique<PtqQuantizer>(); });
  registry.describe_options("ptq", option_keys());
}

}  // namespace lithe::plugins::ptq

LITHE_PLUGIN("ptq", "1.0.0", lithe::plugins::ptq::register_algorithms)
