#pragma once
/// \file
/// Registry: where plugins register their algorithms by name, and where algorithms (and the
/// host) build each other by name, so that e.g. AGP composes with any masker without linking it.

#include <functional>
#include <memory>
#include <string>

#include "lithe/sdk/export.h"
#include "lithe/sdk/masker.h"
#include "lithe/sdk/options.h"
#include "lithe/sdk/pruner.h"
#include "lithe/sdk/quantizer.h"

namespace lithe::sdk {

class Registry;

/// Name (what users type in JSON, e.g. "level") and a one-line description.
struct AlgorithmInfo {
  std::string name;
  std::string description;
};

/// Factories receive the algorithm's "options" object; they read every key they accept and
/// throw sdk::Error(kInvalidConfig) with options.path() for bad values.
using MaskerFactory =
    std::function<std::unique_ptr<WeightMasker>(const Options& options, const Registry& registry)>;
using PrunerFactory =
    std::function<std::unique_ptr<Pruner>(const Options& options, const Registry& registry)>;
using QuantizerFactory =
    std::function<std::unique_ptr<Quantizer>(const Options& options, const Registry& registry)>;

/// Implemented by the host. Names are unique per kind across all loaded plugins; adding a
/// duplicate throws sdk::Error(kPluginLoad).
class LITHE_SDK_API Registry {
 public:
  virtual ~Registry();
  virtual void add_masker(AlgorithmInfo info, MaskerFactory factory) = 0;
  virtual void add_pruner(AlgorithmInfo info, PrunerFactory factory) = 0;
  virtual void add_quantizer(AlgorithmInfo info, QuantizerFactory factory) = 0;
  /// Builds a registered masker; throws sdk::Error(kInvalidConfig) for an unknown name.
  virtual std::unique_ptr<WeightMasker> make_masker(const std::string& name,
                                                    const Options& options) const = 0;
  /// Builds a registered pruner; throws sdk::Error(kInvalidConfig) for an unknown name.
  virtual std::unique_ptr<Pruner> make_pruner(const std::string& name,
                                              const Options& options) const = 0;
  /// Builds a registered quantizer; throws sdk::Error(kInvalidConfig) for an unknown name.
  virtual std::unique_ptr<Quantizer> make_quantizer(const std::string& name,
                                                    const Options& options) const = 0;
};

}  // namespace lithe::sdk
