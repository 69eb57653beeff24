#include "tracked_range.h"

#include <limits>

namespace lithe::plugins::qat {
namespace {

// NNI: biased_ema * decay + (1 - decay) * value, three float32 tensor operations.
float ema(float biased, float value) {
  const float kept = biased * kEmaDecay;
  const float added = (1.0f - kEmaDecay) * value;
  return kept + added;
}

}  // namespace

TrackedRange TrackedRange::none() {
  return {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
}

TrackedRange track(const TrackedRange& range, float batch_min, float batch_max) {
  if (!range.observed()) {
    return {batch_min, batch_max};
  }
  return {ema(range.min, batch_min), ema(range.max, batch_max)};
}

}  // namespace lithe::plugins::qat
