#pragma once
/// \file
/// Registry: where plugins register their algorithms by name, and where algorithms (and the
/// host) build each other by name, so that e.g. AGP composes with any masker without linking it.

#include <functional>
#include <memory>
#include <string>

#include "lithe/sdk/export.h"
#include "lithe/sdk/masker.h"
#include "lithe/sdk/option_spec.h"
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

/// Names the class of Microsoft NNI v2.0 that an algorithm reproduces, and how a conformance
/// harness replays NNI's recorded cases of that class against it (SDK 1.4). Declaring it lets
/// `lithe conformance` and the test suite cover a new plugin without any table outside the
/// plugin's folder. `replay` is one of the procedures the harness knows:
///   "one_shot"              one compress() call; masks compared layer by layer
///   "one_shot_global"       the same, with one sparsity target ranked across all layers
///   "epoch_schedule"        compress() then update_epoch() per epoch; masks at every epoch
///   "rewind_rounds"         pruning rounds that rewind weights; masks of each stored round
///   "activation_statistics" masks computed from activations collected over training steps
///   "gradient_statistics"   masks computed from weight gradients collected over training steps
///   "eval_forwards"         quantizer: quantized weights and outputs of evaluation forwards
///   "training_steps"        quantizer: weights, scales and outputs over training steps
///   "training_batches"      a pruner that trains while it compresses (fine_tune, SDK 1.7;
///                           ADMM): NNI's trainer over the recorded batches; trained weights
///                           and final masks (since SDK 1.8)
/// A harness reports a case whose replay it does not know as unsupported, never as passed.
struct NniCounterpart {
  std::string algorithm;  ///< a pruner or quantizer this plugin registered, e.g. "agp"
  std::string nni_class;  ///< e.g. "AGPPruner"; unique across loaded plugins
  std::string replay;     ///< see above, e.g. "epoch_schedule"
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

  // ---- SDK 1.4 (appended: plugins built against 1.0-1.3 never call it) ----

  /// Declares the NNI class an algorithm registered above reproduces. Call it after
  /// add_pruner/add_quantizer. Throws sdk::Error(kPluginLoad) when the algorithm is not a pruner
  /// or quantizer of the calling plugin, a field is empty, or another plugin already declared
  /// the same NNI class (Lithe's host does; the default implementation ignores the call, so
  /// registries written for SDK 1.3 keep compiling).
  virtual void add_nni_counterpart(NniCounterpart counterpart);

  /// Declares every key an algorithm registered above accepts, in its "options" object and in
  /// each "config_list" entry (SDK 1.4; see option_spec.h). Call it after add_masker/
  /// add_pruner/add_quantizer; it applies to every kind the calling plugin registered under
  /// `algorithm`. Lithe's host then checks those keys before the factory and validate_config
  /// run, lists them when a key is unknown, and prints them for `lithe plugins --describe`.
  /// Keys every algorithm shares (op_types, op_names, exclude) are the host's and are not
  /// declared. Throws sdk::Error(kPluginLoad) when the calling plugin registered no algorithm
  /// of that name or declared it before (the default implementation ignores the call).
  virtual void describe_options(const std::string& algorithm, const OptionSchema& schema);
};

}  // namespace lithe::sdk
