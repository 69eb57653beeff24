// QAT: fake quantization of weights, inputs and outputs, with activation ranges tracked by an
// exponential moving average, and a straight-through gradient that is zeroed where the value
// falls outside the grid (QATGrad). By default asymmetric, per tensor, on the unsigned grid
// [0, 2^bits − 1] (NNI v2.0); NNI v2.5's quant_scheme / quant_dtype choose symmetric grids,
// the signed grid [−(2^(bits−1)) + 1, 2^(bits−1) − 1] and, for the weight, one grid per output
// channel (quant_scheme.h).
//
// Per-layer state (tensor attributes, float32 [1], created in attach, updated in place):
//   steps                               1 + optimizer steps so far (NNI's `steps` buffer)
//   <type>_scale, <type>_zero_point     per quant type: for the weight, those of the current
//                                       weight ([C], one per output channel, for a
//                                       per_channel scheme); for activations, those of the
//                                       tracked range
//   <type>_tracked_min, _tracked_max    input/output only: the EMA range; (+inf, −inf) = none
//   <type>_quant_min, _quant_max        the SDK's linear grid (read by the QDQ export): qmin and
//                                       qmax once the type quantizes, 0 and 0 before
//
// Lithe departures from NNI v2.0 (conformance departure 3): separate parameters per quant type
// (NNI shares one pair, so it holds the output's after a forward); weight parameters come from
// the current weight on every forward, in evaluation too (NNI reuses the last training
// weight); no 32-bit fake quantization of the bias (removed by NNI v2.4); input quantization;
// the EMA starts from the first training batch (NNI starts from 0) and runs on every training
// forward, also before quant_start_step (NNI v2.10); a degenerate range gives scale kMinScale
// instead of NaN; QATGrad masks out of place.
#include "qat.h"

#include <lithe/kernels/fake_quant_ops.h>
#include <lithe/sdk.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "quant_params.h"
#include "quant_scheme.h"
#include "tracked_range.h"

namespace lithe::plugins::qat {
namespace {

using sdk::QuantType;

constexpr const char* kStepsKey = "steps";
constexpr const char* kStartStepKey = "quant_start_step";

// Every key qat reads: the SDK's quant_types/quant_bits and the warm-up step count.
const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::quantizer_keys())
          .add(sdk::entry_key(kStartStepKey, sdk::OptionType::kInteger,
                              "training steps before quantization starts (activation ranges "
                              "are still observed)")
                   .defaults_to("0")
                   .at_least(0));
  return schema;
}

/// The float values of single-element tensors on one device, with one copy to the host (one
/// synchronisation on a GPU instead of one per value).
std::vector<float> host_values(const std::vector<at::Tensor>& tensors) {
  bool on_cpu = true;
  for (const at::Tensor& t : tensors) {
    on_cpu = on_cpu && t.device().is_cpu() && t.scalar_type() == at::kFloat;
  }
  if (on_cpu) {  // the common case: read them directly, no tensor ops on the hot path
    std::vector<float> out;
    out.reserve(tensors.size());
    for (const at::Tensor& t : tensors) {
      out.push_back(*t.data_ptr<float>());
    }
    return out;
  }
  std::vector<at::Tensor> parts;
  parts.reserve(tensors.size());
  for (const at::Tensor& t : tensors) {
    parts.push_back(t.detach().reshape({1}).to(at::kFloat));
  }
  const at::Tensor host = at::cat(parts).to(at::kCPU).contiguous();
  const float* data = host.data_ptr<float>();
  return {data, data + host.numel()};
}

/// min(x) and max(x) as floats (x not empty).
std::pair<float, float> min_max(const at::Tensor& x) {
  const auto [lo, hi] = at::aminmax(x);
  const std::vector<float> v = host_values({lo, hi});
  return {v[0], v[1]};
}

/// The min and max of each slice x[c] along dim 0 (NNI v2.5 get_min_max_value for a per-channel
/// weight), as floats on the host: C minima, then C maxima (x has dim >= 1 and no zero size).
std::vector<float> channel_min_max(const at::Tensor& x) {
  const auto [lo, hi] = at::aminmax(x.reshape({x.size(0), -1}), 1);
  const at::Tensor host = at::cat({lo, hi}).to(at::kCPU).to(at::kFloat).contiguous();
  const float* data = host.data_ptr<float>();
  return {data, data + host.numel()};
}

/// One layer's state for one quant type; tracked_* are undefined for the weight.
struct TypeState {
  at::Tensor steps;
  at::Tensor scale;
  at::Tensor zero_point;
  at::Tensor tracked_min;
  at::Tensor tracked_max;

  static TypeState of(const sdk::LayerView& layer, QuantType type) {
    TypeState s;
    s.steps = sdk::tensor_attribute(layer, kStepsKey);
    s.scale = sdk::tensor_attribute(layer, sdk::quant_state_key(type, "scale"));
    s.zero_point = sdk::tensor_attribute(layer, sdk::quant_state_key(type, "zero_point"));
    if (type != QuantType::kWeight) {
      s.tracked_min = sdk::tensor_attribute(layer, sdk::quant_state_key(type, "tracked_min"));
      s.tracked_max = sdk::tensor_attribute(layer, sdk::quant_state_key(type, "tracked_max"));
    }
    return s;
  }
  void store(const QuantParams& params) const {
    scale.fill_(params.scale);
    zero_point.fill_(params.zero_point);
  }
  void store(const TrackedRange& range) const {
    tracked_min.fill_(range.min);
    tracked_max.fill_(range.max);
  }
};

/// How one quant type of a layer is quantized, from quant_bits, quant_scheme and quant_dtype.
struct TypeConfig {
  int64_t bits = 0;          ///< 0 = type not quantized
  QuantGrid grid;            ///< NNI v2.5 calculate_qmin_qmax(bits, quant_dtype)
  bool symmetric = false;    ///< a *_symmetric scheme
  bool per_channel = false;  ///< a per_channel_* scheme (the weight only): one grid per dim-0 slice
  /// NNI v2.5 update_quantization_param for this type's grid and scheme.
  QuantParams params(float rmin, float rmax) const {
    return quantization_param(grid, symmetric, rmin, rmax);
  }
};

/// Quantization runs on forwards with steps >= quant_start_step (NNI: 0 and 1 are the same).
/// A layer's config as numbers, read once at attach (the hot path never parses JSON).
struct LayerConfig {
  int64_t start_step = 0;
  TypeConfig types[3];  ///< by QuantType value
  bool quantizing(float steps) const {
    return static_cast<double>(steps) >= static_cast<double>(start_step);
  }
  const TypeConfig& of(QuantType type) const { return types[static_cast<int>(type)]; }
};

/// The STE mask the forward's fused kernel produced, reused by the backward of the same
/// tensor (same TensorImpl, unchanged version) instead of a second quantization pass.
struct ForwardMask {
  const void* tensor = nullptr;
  int64_t version = -1;
  at::Tensor mask;  ///< undefined: the forward did not quantize, every gradient passes
};

/// State the quantizer and its QuantGrad share.
struct Shared {
  std::map<const sdk::LayerView*, LayerConfig> configs;
  std::map<std::pair<const sdk::LayerView*, int>, ForwardMask> masks;

  const LayerConfig& config(const sdk::LayerView& layer) const {
    const auto it = configs.find(&layer);
    LITHE_CHECK(it != configs.end(), sdk::Errc::kInternal, "layer '", layer.name(),
                "': qat quantizes before attach()");
    return it->second;
  }
  /// Keeps the mask for the backward of `x`, only when one can follow (x requires grad):
  /// evaluation forwards under no_grad keep nothing, so no activation-sized mask stays alive.
  void remember(const sdk::LayerView& layer, QuantType type, const at::Tensor& x,
                at::Tensor mask) {
    const std::pair<const sdk::LayerView*, int> key{&layer, static_cast<int>(type)};
    if (!x.requires_grad()) {
      masks.erase(key);
      return;
    }
    masks[key] = {x.unsafeGetTensorImpl(), x._version(), std::move(mask)};
  }
  /// The forward's mask for `x` (removed: a backward uses it once), or nullopt.
  std::optional<ForwardMask> take(const sdk::LayerView& layer, QuantType type,
                                  const at::Tensor& x) {
    const auto it = masks.find({&layer, static_cast<int>(type)});
    if (it == masks.end() || it->second.tensor != x.unsafeGetTensorImpl() ||
        it->second.version != x._version()) {
      return std::nullopt;
    }
    ForwardMask found = std::move(it->second);
    masks.erase(it);
    return found;
  }
};

/// NNI's fake quantization x̂ = scale · (round(clamp(x / scale + zp, qmin, qmax)) − zp), fused.
kernels::FakeQuantResult fake_quantize(const at::Tensor& x, const QuantParams& params,
                                       const TypeConfig& config) {
  return kernels::fake_quantize_per_tensor(x, params.scale, params.zero_point, config.grid.qmin,
                                           config.grid.qmax, kernels::QuantFormula::kNni);
}

/// The same per output channel: slice x[c] with scale[c] and zero_point[c] (state tensors of
/// x.size(0) elements on x's device).
kernels::FakeQuantResult fake_quantize_per_channel(const at::Tensor& x, const at::Tensor& scale,
                                                   const at::Tensor& zero_point,
                                                   const TypeConfig& config) {
  return kernels::fake_quantize_per_channel(x, scale, zero_point, /*axis=*/0, config.grid.qmin,
                                            config.grid.qmax, kernels::QuantFormula::kNni);
}

/// Computes the parameters of `weight` (not empty) by `config` and stores them in `state`:
/// one pair per tensor, or one per output channel. Returns the per-tensor pair (unused for a
/// per-channel weight).
QuantParams compute_weight_params(const at::Tensor& weight, const TypeConfig& config,
                                  const TypeState& state) {
  if (!config.per_channel) {
    const auto [rmin, rmax] = min_max(weight);
    const QuantParams params = config.params(rmin, rmax);
    state.store(params);
    return params;
  }
  const std::vector<float> ranges = channel_min_max(weight);
  const int64_t channels = weight.size(0);
  const at::Tensor scale = at::empty({channels}, at::kFloat);
  const at::Tensor zero_point = at::empty({channels}, at::kFloat);
  float* s = scale.data_ptr<float>();
  float* z = zero_point.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const QuantParams params = config.params(ranges[c], ranges[channels + c]);
    s[c] = params.scale;
    z[c] = params.zero_point;
  }
  state.scale.copy_(scale);
  state.zero_point.copy_(zero_point);
  return {};
}

/// NNI's QATGrad, out of place: the gradient is zeroed where round(x / scale + zp), the
/// unclamped grid value under the parameters the layer holds for `type` (those of its last
/// forward), falls outside [0, qmax]. Passes the gradient unchanged wherever the forward did
/// not quantize (before quant_start_step; an activation with no tracked range).
class QatGrad final : public sdk::QuantGrad {
 public:
  explicit QatGrad(Shared& shared) : shared_(shared) {}
  at::Tensor backward(const at::Tensor& x, const at::Tensor& grad_output, QuantType type,
                      const sdk::LayerView& layer) const override {
    // New tensors either way: an expanded (stride-0) grad_output is only read.
    if (const std::optional<ForwardMask> forward = shared_.take(layer, type, x)) {
      return forward->mask.defined()
                 ? at::where(forward->mask, grad_output, at::zeros({}, grad_output.options()))
                 : grad_output;
    }
    // Not the tensor of the latest forward (a module called twice): recompute with the
    // layer's current parameters.
    const LayerConfig& config = shared_.config(layer);
    const TypeConfig& type_config = config.of(type);
    const TypeState state = TypeState::of(layer, type);
    if (type_config.per_channel) {  // the weight, with one grid per output channel
      if (!config.quantizing(host_values({state.steps})[0]) || x.numel() == 0) {
        return grad_output;
      }
      const at::Tensor passes =
          fake_quantize_per_channel(x, state.scale, state.zero_point, type_config).mask;
      return at::where(passes, grad_output, at::zeros({}, grad_output.options()));
    }
    std::vector<at::Tensor> read{state.steps, state.scale, state.zero_point};
    if (type != QuantType::kWeight) {
      read.insert(read.end(), {state.tracked_min, state.tracked_max});
    }
    const std::vector<float> v = host_values(read);
    const bool quantized = config.quantizing(v[0]) &&
                           (type == QuantType::kWeight || TrackedRange{v[3], v[4]}.observed());
    if (!quantized || x.numel() == 0) {
      return grad_output;
    }
    const at::Tensor passes = fake_quantize(x, QuantParams{v[1], v[2]}, type_config).mask;
    return at::where(passes, grad_output, at::zeros({}, grad_output.options()));
  }

 private:
  Shared& shared_;  // the quantizer's; the backward takes the masks its forward left
};

class QatQuantizer final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {QuantType::kInput, QuantType::kWeight, QuantType::kOutput},
                             "qat");
    (void)option_keys().read<int64_t>(entry, kStartStepKey);
    (void)read_type_schemes(entry);
  }

  void attach(sdk::CompressionContext& context) override {
    context_ = &context;
    layers_ = context.layers();
    weight_layers_.clear();
    for (sdk::LayerView* layer : layers_) {
      LayerConfig& config = shared_.configs[layer];
      config.start_step = option_keys().read<int64_t>(layer->config(), kStartStepKey);
      const std::array<TypeScheme, 3> schemes = read_type_schemes(layer->config());
      for (QuantType type : sdk::quant_types(layer->config())) {
        const TypeScheme& scheme = schemes[static_cast<size_t>(type)];
        TypeConfig& type_config = config.types[static_cast<int>(type)];
        type_config.bits = sdk::quant_bits(layer->config(), type);
        type_config.grid = quant_grid(type_config.bits, scheme.dtype);
        type_config.symmetric = is_symmetric(scheme.scheme);
        type_config.per_channel = is_per_channel(scheme.scheme);
      }
    }
    for (sdk::LayerView* layer : layers_) {
      const at::Tensor& weight = layer->weight();
      const at::TensorOptions options =
          at::TensorOptions(weight.defined() ? weight.device() : at::Device(at::kCPU))
              .dtype(at::kFloat);
      sdk::ensure_tensor_attribute(*layer, kStepsKey, at::ones({1}, options));
      for (QuantType type : sdk::quant_types(layer->config())) {
        LITHE_CHECK(type != QuantType::kWeight || weight.defined(), sdk::Errc::kUnsupportedLayer,
                    "layer '", layer->name(), "': qat is configured to quantize its weight, but ",
                    "this ", layer->op_type(), " has none");
        // NNI's initial buffers: scale 1, zero point 0 (the weight's are set just below), one
        // per output channel for a per-channel weight.
        const int64_t params = parameter_count(*layer, type);
        sdk::ensure_tensor_attribute(*layer, sdk::quant_state_key(type, "scale"),
                                     at::ones({params}, options));
        sdk::ensure_tensor_attribute(*layer, sdk::quant_state_key(type, "zero_point"),
                                     at::zeros({params}, options));
        sdk::ensure_tensor_attribute(*layer, sdk::quant_state_key(type, "quant_min"),
                                     at::zeros({1}, options));
        sdk::ensure_tensor_attribute(*layer, sdk::quant_state_key(type, "quant_max"),
                                     at::zeros({1}, options));
        if (type == QuantType::kWeight) {
          weight_layers_.push_back(layer);
          store_weight_params(*layer);
        } else {
          const TrackedRange none = TrackedRange::none();
          sdk::ensure_tensor_attribute(*layer, sdk::quant_state_key(type, "tracked_min"),
                                       at::full({1}, none.min, options));
          sdk::ensure_tensor_attribute(*layer, sdk::quant_state_key(type, "tracked_max"),
                                       at::full({1}, none.max, options));
          store_activation_params(*layer, type);
        }
      }
    }
    align_step_counters();
    refresh_grids();
  }

  at::Tensor quantize_weight(const at::Tensor& weight, sdk::LayerView& layer, bool) override {
    at::NoGradGuard no_grad;
    const LayerConfig& config = shared_.config(layer);
    const TypeConfig& type_config = config.of(QuantType::kWeight);
    const TypeState state = TypeState::of(layer, QuantType::kWeight);
    if (!config.quantizing(host_values({state.steps})[0]) || weight.numel() == 0) {
      shared_.remember(layer, QuantType::kWeight, weight, at::Tensor());
      return weight.clone();
    }
    const QuantParams params = compute_weight_params(weight, type_config, state);
    mark_quantizing(layer, QuantType::kWeight, type_config);
    kernels::FakeQuantResult result =
        type_config.per_channel
            ? fake_quantize_per_channel(weight, state.scale, state.zero_point, type_config)
            : fake_quantize(weight, params, type_config);
    shared_.remember(layer, QuantType::kWeight, weight, std::move(result.mask));
    return result.output;
  }

  at::Tensor quantize_input(const at::Tensor& input, sdk::LayerView& layer,
                            bool training) override {
    return quantize_activation(input, layer, QuantType::kInput, training);
  }
  at::Tensor quantize_output(const at::Tensor& output, sdk::LayerView& layer,
                             bool training) override {
    return quantize_activation(output, layer, QuantType::kOutput, training);
  }

  const sdk::QuantGrad& quant_grad() const override { return grad_; }

  void step() override {
    at::NoGradGuard no_grad;
    for (sdk::LayerView* layer : layers_) {
      sdk::tensor_attribute(*layer, kStepsKey).add_(1);
    }
    for (sdk::LayerView* layer : weight_layers_) {
      store_weight_params(*layer);  // the optimizer just changed the weight
    }
    refresh_grids();  // the start step may have been reached
  }

 private:
  /// Training forwards fold the batch into the tracked range and store the parameters of the
  /// new range; every forward then quantizes with the stored parameters once quantization has
  /// started and a range exists (an evaluation before any training passes x through).
  at::Tensor quantize_activation(const at::Tensor& x, sdk::LayerView& layer, QuantType type,
                                 bool training) {
    at::NoGradGuard no_grad;
    const TypeState state = TypeState::of(layer, type);
    const std::vector<float> v = host_values(
        {state.steps, state.scale, state.zero_point, state.tracked_min, state.tracked_max});
    QuantParams params{v[1], v[2]};
    TrackedRange range{v[3], v[4]};
    const LayerConfig& config = shared_.config(layer);
    const TypeConfig& type_config = config.of(type);
    if (training && x.numel() > 0) {
      const auto [batch_min, batch_max] = step_range(x);
      range = track(range, batch_min, batch_max);
      params = type_config.params(range.min, range.max);
      state.store(range);
      state.store(params);
    }
    if (!config.quantizing(v[0]) || !range.observed() || x.numel() == 0) {
      shared_.remember(layer, type, x, at::Tensor());
      return x.clone();
    }
    mark_quantizing(layer, type, type_config);
    kernels::FakeQuantResult result = fake_quantize(x, params, type_config);
    shared_.remember(layer, type, x, std::move(result.mask));
    return result.output;
  }

  /// The stored weight parameters always describe the current weight, so a saved model and its
  /// calibration file agree with its weights: set at attach and after every optimizer step, as
  /// by every quantizing forward.
  /// NNI keeps one model-wide `steps`; Lithe saves it with every layer. A layer added to a
  /// restored model starts at 1 while the others continue: every layer takes the largest
  /// count, so quant_start_step activates all layers at the same step.
  void align_step_counters() const {
    at::NoGradGuard no_grad;
    float steps = 1.0f;
    for (const sdk::LayerView* layer : layers_) {
      steps = std::max(steps, host_values({sdk::tensor_attribute(*layer, kStepsKey)})[0]);
    }
    for (const sdk::LayerView* layer : layers_) {
      sdk::tensor_attribute(*layer, kStepsKey).fill_(steps);
    }
  }

  void store_weight_params(const sdk::LayerView& layer) const {
    at::NoGradGuard no_grad;
    const at::Tensor& weight = layer.weight();
    if (weight.numel() == 0) {
      return;
    }
    compute_weight_params(weight, shared_.config(layer).of(QuantType::kWeight),
                             TypeState::of(layer, QuantType::kWeight));
  }

  /// The parameters of a restored activation range under this entry's quant_scheme and
  /// quant_dtype (a saved model quantized with others continues on this entry's grid). Without
  /// a range, NNI's initial buffers stay. For an unchanged configuration this rewrites the
  /// values the state already holds: they were computed from the same range.
  void store_activation_params(const sdk::LayerView& layer, QuantType type) const {
    at::NoGradGuard no_grad;
    const TypeState state = TypeState::of(layer, type);
    const std::vector<float> v = host_values({state.tracked_min, state.tracked_max});
    const TrackedRange range{v[0], v[1]};
    if (range.observed()) {
      state.store(shared_.config(layer).of(type).params(range.min, range.max));
    }
  }

  /// The number of scales (and zero points) of `type` in `layer`: one per output channel for a
  /// per-channel weight, else one. A state restored from a model quantized with another
  /// quant_scheme has another count: refused here with both, instead of a bare shape mismatch.
  int64_t parameter_count(const sdk::LayerView& layer, QuantType type) const {
    const TypeConfig& config = shared_.config(layer).of(type);
    int64_t count = 1;
    if (config.per_channel) {
      const at::Tensor& weight = layer.weight();
      LITHE_CHECK(weight.dim() >= 1, sdk::Errc::kUnsupportedLayer, "layer '", layer.name(),
                  "': qat's per_channel quant_scheme quantizes the weight per output channel ",
                  "(dim 0), but this ", layer.op_type(), "'s weight is a scalar");
      count = weight.size(0);
    }
    for (const char* field : {"scale", "zero_point"}) {
      const std::string key = sdk::quant_state_key(type, field);
      const sdk::AttributeValue* saved = layer.attribute(key);
      const auto* tensor = saved != nullptr ? std::get_if<at::Tensor>(saved) : nullptr;
      if (tensor == nullptr || !tensor->defined() || tensor->dim() != 1 ||
          tensor->size(0) == count) {
        continue;  // absent, or as expected (anything else: ensure_tensor_attribute refuses)
      }
      LITHE_CHECK(false, sdk::Errc::kInvalidModel, "layer '", layer.name(),
                  "': its saved qat state '", key, "' holds ", tensor->size(0), " value",
                  tensor->size(0) == 1 ? "" : "s",
                  tensor->size(0) == 1 ? " (quantized per tensor)" : " (quantized per channel)",
                  ", but this entry's quant_scheme for the ", sdk::quant_type_name(type),
                  " needs ", count,
                  config.per_channel ? " (one per output channel)" : " (per tensor)",
                  "; keep the saved model's quant_scheme, or quantize the float model");
    }
    return count;
  }

  /// Records in the SDK's linear-grid attributes that `type` now quantizes onto [qmin, qmax],
  /// so the QDQ export emits it (a type that still passes through keeps the empty grid [0, 0]).
  /// Written only when it changes: the hot path reads two floats.
  static void mark_quantizing(const sdk::LayerView& layer, QuantType type,
                              const TypeConfig& config) {
    set_grid(layer, type, static_cast<float>(config.grid.qmin),
             static_cast<float>(config.grid.qmax));
  }
  static void set_grid(const sdk::LayerView& layer, QuantType type, float qmin, float qmax) {
    const at::Tensor quant_min =
        sdk::tensor_attribute(layer, sdk::quant_state_key(type, "quant_min"));
    const at::Tensor quant_max =
        sdk::tensor_attribute(layer, sdk::quant_state_key(type, "quant_max"));
    const std::vector<float> now = host_values({quant_min, quant_max});
    if (now[0] != qmin) {
      quant_min.fill_(qmin);
    }
    if (now[1] != qmax) {
      quant_max.fill_(qmax);
    }
  }

  /// Sets every layer's grids from whether each type quantizes now (the start step reached;
  /// for activations, a range observed): after attach (restored state, a layer new to a
  /// restored model, another start step) and after every step. Forwards only ever switch a
  /// grid on (mark_quantizing), when a first range is observed.
  void refresh_grids() const {
    at::NoGradGuard no_grad;
    for (const sdk::LayerView* layer : layers_) {
      const LayerConfig& config = shared_.config(*layer);
      for (QuantType type : sdk::quant_types(layer->config())) {
        const TypeState state = TypeState::of(*layer, type);
        bool quantizing = config.quantizing(host_values({state.steps})[0]);
        if (quantizing && type != QuantType::kWeight) {
          const std::vector<float> range = host_values({state.tracked_min, state.tracked_max});
          quantizing = TrackedRange{range[0], range[1]}.observed();
        }
        if (quantizing) {
          mark_quantizing(*layer, type, config.of(type));
        } else {
          set_grid(*layer, type, 0.0f, 0.0f);
        }
      }
    }
  }

  /// The range of a training batch; in data-parallel runs that of the whole step (every rank's
  /// share), so every rank tracks what one process would: max(−min) and max(max) in one
  /// exchange (a single process: min_max(x) as it is).
  std::pair<float, float> step_range(const at::Tensor& x) const {
    const auto [lo, hi] = min_max(x);
    std::vector<at::Tensor> bounds = {at::tensor({-lo, hi}, at::kFloat)};
    context_->reduce_over_processes(bounds, sdk::Reduction::kMax);
    const float* v = bounds[0].data_ptr<float>();
    return {-v[0], v[1]};
  }

  sdk::CompressionContext* context_ = nullptr;  // the session's; it outlives the quantizer's use
  std::vector<sdk::LayerView*> layers_;
  std::vector<sdk::LayerView*> weight_layers_;  ///< layers whose weight is quantized
  Shared shared_;
  QatGrad grad_{shared_};
};

}  // namespace

void register_algorithms(sdk::Registry& registry) {
  registry.add_quantizer(
      {"qat", "quantization-aware training: affine or symmetric fake quantization (per tensor, "
              "or per channel for weights), EMA activation ranges"},
      [](const sdk::Options&, const sdk::Registry&) { return std::make_unique<QatQuantizer>(); });
  registry.add_nni_counterpart({"qat", "QAT_Quantizer", "training_steps"});
  registry.describe_options("qat", option_keys());
}

}  // namespace lithe::plugins::qat

LITHE_PLUGIN("qat", "1.2.0", lithe::plugins::qat::register_algorithms)
