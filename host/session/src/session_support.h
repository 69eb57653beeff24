#pragma once
// What the pruning and the quantization sessions offer plugins alike through
// sdk::CompressionContext: activation collectors (observed through Model::set_taps), optimizer-
// step and end-of-data callbacks, and saved model states. Internal to liblithe_host.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/model/model.h"
#include "lithe/sdk/context.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/option_spec.h"
#include "lithe/sdk/options.h"

namespace lithe::host::detail {

/// Throws sdk::Error(kInvalidConfig) listing the JSON paths of every key of `options` that no
/// algorithm read (misspelled or unknown keys), naming `owner` (e.g. "pruner 'level'"). When
/// `algorithm` declared its keys (`declared`, may be null), the message lists those of `scope`,
/// so the user sees what is accepted.
void reject_unread_options(const sdk::Options& options, const std::string& owner,
                           const std::string& algorithm, const sdk::OptionSchema* declared,
                           sdk::OptionScope scope);

/// An exact fingerprint of every view's weight (its sum in double; 0 for a view without one).
/// libtorch's optimizers update parameters through .data(), which does not bump the version
/// counter, so the weights themselves are compared.
std::vector<double> weight_fingerprints(const std::vector<std::unique_ptr<sdk::LayerView>>& views);

/// Throws sdk::Error(kInvalidConfig) naming `owner`, `call` and the first layer whose weight no
/// longer matches `recorded`: an optimizer stepped outside the session. `what_step_does` says
/// what session.optimizer_step does instead. Nothing when `recorded` is empty.
void check_weights_unchanged(const std::vector<double>& recorded,
                             const std::vector<std::unique_ptr<sdk::LayerView>>& views,
                             const std::string& owner, const char* call,
                             const char* what_step_does);

/// The activation collectors of one session. Taps are installed on the session's layers only
/// while at least one collector exists.
class ActivationCollectors {
 public:
  explicit ActivationCollectors(Model& model) : model_(model) {}
  /// Removes the taps (never throws).
  ~ActivationCollectors();
  ActivationCollectors(const ActivationCollectors&) = delete;
  ActivationCollectors& operator=(const ActivationCollectors&) = delete;

  /// The layers collectors observe; set once, before the first add().
  void set_layers(const std::vector<const sdk::LayerView*>& layers);
  /// Same contract as sdk::CompressionContext::add_activation_collector; on error nothing changes.
  int64_t add(sdk::ActivationCollector collector);
  /// Same contract as sdk::CompressionContext::remove_activation_collector.
  void remove(int64_t id);
  /// Drops every collector and its taps (best effort: a failure to restore the graph is
  /// ignored, the caller is already reporting an error).
  void clear() noexcept;

 private:
  void refresh();

  Model& model_;
  std::map<std::string, const sdk::LayerView*> layers_;
  std::map<int64_t, sdk::ActivationCollector> collectors_;
  int64_t next_id_ = 1;
};

/// Callbacks a plugin registered for one event (after every optimizer step; end of data), run
/// in registration order.
class PluginCallbacks {
 public:
  /// `event` names the callbacks in messages as in the SDK's add_<event>_callback:
  /// "optimizer_step", "end_of_data".
  explicit PluginCallbacks(std::string event);
  /// Same contract as sdk::CompressionContext::add_optimizer_step_callback.
  int64_t add(std::function<void()> callback);
  /// Same contract as sdk::CompressionContext::remove_optimizer_step_callback.
  void remove(int64_t id);
  void clear() { callbacks_.clear(); }
  /// Runs every callback; a callback may add or remove callbacks (removed ones do not run).
  /// Plugin errors are reported as coming from `owner`.
  void run(const std::string& owner);

 private:
  std::string event_;
  std::string label_;  // "optimizer-step", for messages
  std::map<int64_t, std::function<void()>> callbacks_;
  int64_t next_id_ = 1;
};

/// Copies of every parameter and buffer of a model (sdk::CompressionContext::save_model_state
/// and the weights of save_snapshot). `call` names the SDK call in messages.
class SavedModelStates {
 public:
  explicit SavedModelStates(std::string call) : call_(std::move(call)) {}
  /// Copies the model's state; returns its handle (handles start at 1, never reused).
  int64_t save(const Model& model);
  /// Copies saved state `handle` back into the model; sdk::Error(kInvalidConfig) for an
  /// unknown or released handle.
  void restore(Model& model, int64_t handle) const;
  /// Frees saved state `handle`; sdk::Error(kInvalidConfig) for an unknown or released one.
  void release(int64_t handle);

 private:
  std::string call_;  // "restore_model_state", for messages
  std::map<int64_t, std::vector<at::Tensor>> states_;
  int64_t next_handle_ = 1;
};

/// Sets a flag for the length of a scope (a call that must not re-enter itself) and clears it
/// on the way out, also when the scope is left by an exception.
class FlagScope {
 public:
  explicit FlagScope(bool& flag) : flag_(flag) { flag_ = true; }
  ~FlagScope() { flag_ = false; }
  FlagScope(const FlagScope&) = delete;
  FlagScope& operator=(const FlagScope&) = delete;

 private:
  bool& flag_;
};

}  // namespace lithe::host::detail
