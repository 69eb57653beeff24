#pragma once
/// \file
/// A quantization session over one model (NNI's Quantizer with its module wrappers): resolves
/// config_list, checks every entry (quant_types, quant_bits, the algorithm's keys) before
/// touching the model, then on compress() attaches the quantizer and makes every forward
/// fake-quantize the selected layers' inputs, weights and outputs (Model::set_quantization).
/// Per-layer state (scales, zero points, ranges) lives in the layers' tensor attributes, which
/// are buffers of the model's modules: saved with it, and picked up again by a later session
/// on the saved model (NNI's save/load flow; see sdk/quantizer.h for the naming rule).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/compressor.h"
#include "lithe/host/config_list.h"
#include "lithe/host/model.h"
#include "lithe/host/plugin_registry.h"
#include "lithe/host/training_hooks.h"
#include "lithe/sdk/context.h"
#include "lithe/sdk/quantizer.h"

namespace lithe::host {

namespace detail {
class ActivationCollectors;
class OptimizerStepCallbacks;
class SavedModelStates;
}  // namespace detail

/// One quantized tensor of a layer, for reports and the calibration file.
struct QuantTypeReport {
  sdk::QuantType type;
  int64_t bits = 0;
  /// The layer's state for this type: attribute key without the "<type>_" prefix -> values.
  std::vector<std::pair<std::string, std::vector<double>>> state;
};

struct QuantLayerReport {
  std::string name;
  std::string op_type;
  std::vector<QuantTypeReport> types;  ///< in the config's quant_types order
};

/// Whether a tensor attribute named `key` is quantization state the host saves and restores:
/// "steps", or a name starting with "input_", "weight_" or "output_".
bool is_quant_state_name(const std::string& key);

/// One quantization as it happened: the tensor the quantizer saw and what the model used.
struct QuantRecord {
  at::Tensor input;   ///< detached copy
  at::Tensor output;  ///< detached copy
};

class QuantizationSession final : public sdk::CompressionContext, public TrainingHooks {
 public:
  /// Validates everything (algorithm, options, config_list, per-entry keys, layers without a
  /// weight selected for weight quantization) before touching the model.
  QuantizationSession(Model& model, const PluginRegistry& registry, const CompressionConfig& config);
  ~QuantizationSession() override;
  QuantizationSession(const QuantizationSession&) = delete;
  QuantizationSession& operator=(const QuantizationSession&) = delete;

  /// NNI's compress(): attaches the quantizer (state restored from the model's buffers where
  /// present), registers the state as model buffers and installs the fake quantization. Once.
  void compress();
  /// Removes the fake quantization from the model's forward (the state buffers stay).
  void detach();
  /// While on, quantizers are told `training` on every forward even when the model is in
  /// evaluation mode: post-training range calibration without changing BatchNorm statistics.
  void set_calibrating(bool on) { calibrating_ = on; }
  /// While on, the session keeps a copy of the latest quantization of every (layer, type):
  /// for conformance checks and debugging (costs a copy per quantized tensor and forward).
  void set_recording(bool on);
  /// The latest recorded quantization of `layer`'s `type`, or nullptr.
  const QuantRecord* last_record(const std::string& layer, sdk::QuantType type) const;

  void update_epoch(int64_t epoch) override;
  void optimizer_step(torch::optim::Optimizer& optimizer) override;
  void step() override;
  std::vector<at::Tensor> extra_parameters() override;

  /// Points the model's buffers at the layers' current state tensors (done by compress();
  /// call again before saving if a quantizer replaced a state tensor instead of updating it).
  void store_state_in_model();
  /// Per layer: quant types, bits and state.
  std::vector<QuantLayerReport> report() const;
  /// The calibration file: {"algorithm": ..., "layers": {name: {"type": ..., "<quant type>":
  /// {"bits": b, "<state>": value, ...}}}}, pretty-printed JSON.
  std::string calibration_json() const;

  // sdk::CompressionContext
  std::vector<sdk::LayerView*> layers() override;
  int64_t add_activation_collector(sdk::ActivationCollector collector) override;
  void remove_activation_collector(int64_t id) override;
  const sdk::Registry& registry() const override;
  int64_t add_optimizer_step_callback(std::function<void()> callback) override;
  void remove_optimizer_step_callback(int64_t id) override;
  /// Quantizers have no masks: throws sdk::Error(kUnsupported).
  void update_masks_now() override;
  int64_t save_model_state() override;
  void restore_model_state(int64_t handle) override;
  std::vector<std::vector<std::string>> channel_dependency_sets() override;
  std::map<std::string, int64_t> group_dependencies() override;

 private:
  struct Layer {
    std::unique_ptr<sdk::LayerView> view;
    std::vector<sdk::QuantType> types;
  };
  at::Tensor quantize(const std::string& module, sdk::QuantType type, const at::Tensor& x);

  Model& model_;
  const PluginRegistry& registry_;
  std::string algorithm_;
  std::string owner_;  // "quantizer '<name>'", for messages
  std::unique_ptr<sdk::Quantizer> quantizer_;
  ResolvedConfig resolved_;
  std::vector<Layer> layers_;
  std::map<std::string, Layer*> by_name_;
  std::unique_ptr<detail::ActivationCollectors> collectors_;
  std::unique_ptr<detail::OptimizerStepCallbacks> step_callbacks_;
  std::unique_ptr<detail::SavedModelStates> saved_states_;
  bool reset_optimizer_state_ = false;
  bool attached_ = false;
  bool installed_ = false;
  bool calibrating_ = false;
  bool recording_ = false;
  std::map<std::pair<std::string, sdk::QuantType>, QuantRecord> records_;
};

}  // namespace lithe::host
