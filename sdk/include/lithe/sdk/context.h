#pragma once
/// \file
/// CompressionContext: what the host offers an algorithm during a compression session.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "lithe/sdk/export.h"
#include "lithe/sdk/layer.h"

namespace lithe::sdk {

class Registry;

/// Called with a compressed layer and that layer's forward output, after every forward of it,
/// in training and in evaluation (NNI's forward hook `(module, input, output)`, output only).
/// The tensor is the real output: do not modify it in place.
using ActivationCollector = std::function<void(const LayerView& layer, const at::Tensor& output)>;

/// Owned by the host; valid for the whole session.
class LITHE_SDK_API CompressionContext {
 public:
  virtual ~CompressionContext();
  /// The compressed layers, in named_modules order (index() == position).
  virtual std::vector<LayerView*> layers() = 0;
  /// Registers `collector` on every compressed layer; returns its id (ids start at 1).
  /// Throws sdk::Error(kUnsupported) for models whose layers cannot be observed.
  virtual int64_t add_activation_collector(ActivationCollector collector) = 0;
  /// Removes a collector; throws sdk::Error(kInvalidConfig) for an unknown id.
  virtual void remove_activation_collector(int64_t id) = 0;
  /// All registered algorithms, e.g. to build a masker by name.
  virtual const Registry& registry() const = 0;
};

}  // namespace lithe::sdk
