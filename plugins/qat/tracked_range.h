#pragma once
// The activation range QAT tracks per layer and quant type (input, output): an exponential
// moving average of each training batch's min and max. Plain float32 arithmetic, no ATen.

namespace lithe::plugins::qat {

/// NNI's ema_decay.
inline constexpr float kEmaDecay = 0.99f;

/// [min, max] of the activations seen in training. The empty range (+inf, −inf), "no batch
/// observed yet", is what a layer's state starts with (and is saved as) until its first
/// training forward.
struct TrackedRange {
  float min;
  float max;

  /// The empty range.
  static TrackedRange none();
  /// Whether at least one batch was observed (min <= max; the empty range has min > max).
  bool observed() const { return min <= max; }
};

/// The range after a training batch whose min and max are `batch_min`, `batch_max`: the
/// batch's own range for the first batch (Lithe departure 3: NNI v2.0 starts the average from
/// 0, clipping the first outputs to ~1% of their range), then NNI's biased EMA
/// t = t · decay + (1 − decay) · batch, in NNI's float32 operation order.
TrackedRange track(const TrackedRange& range, float batch_min, float batch_max);

}  // namespace lithe::plugins::qat
