#pragma once
/// \file
/// A quantization session over one model (NNI's Quantizer with its module wrappers): resolves
/// config_list, checks every entry (quant_types, quant_bits, the algorithm's keys) before
/// touching the model, then on compress() attaches the quantizer and makes every forward
/// fake-quantize the selected layers' inputs, weights and outputs (Model::set_quantization).
/// Per-layer state (scales, zero points, ranges) lives in the layers' tensor attributes, which
/// are buffers of the model's modules (attribute `key` -> buffer `lithe_q_<key>`): saved with
/// it, and picked up again by a later session with the same algorithm and bits on the saved
/// model (NNI's save/load flow); a session with another algorithm or other bits refuses it.
///
/// Lifetime: autograd graphs built by forwards of a quantized model call back into the session
/// and its quantizer during backward, so run every backward while the session lives.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/session_core.h"
#include "lithe/sdk/quantizer.h"

namespace lithe::host {

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

/// Tensor attribute `key` of a quantized layer is saved as buffer `lithe_q_<key>` of its
/// module; `lithe_q_identity` records the algorithm and bits the state belongs to.
inline constexpr const char* kStateBufferPrefix = "lithe_q_";
inline constexpr const char* kIdentityKey = "identity";
/// A Conv2d or Linear layer of a TorchScript model that quantizes its weight but not its input
/// gets, while the session calibrates (set_calibrating(true)), the range of its input observed:
/// [min, max] over every calibration batch, saved as this float32 buffer of its module. The
/// quantizer never sees that input, the fake-quantized model does not change, and the site
/// that observes it exists only while calibrating (other forwards pay nothing for it);
/// `lithe convert` reads the range to quantize the
/// layer's input where no int8 op makes it (after a residual sum, at the model's input), so the
/// ordinary weight + output config converts to int8 whole.
inline constexpr const char* kObservedInputRangeBuffer = "lithe_int8_input_range";

/// One quantization as it happened: the tensor the quantizer saw and what the model used.
struct QuantRecord {
  at::Tensor input;   ///< detached copy
  at::Tensor output;  ///< detached copy
};

class QuantizationSession final : public SessionCore {
 public:
  /// Validates everything (algorithm, options, config_list, per-entry keys, layers without a
  /// weight selected for weight quantization, layers whose tensors cannot be reached by the
  /// rewrite) before touching the model.
  QuantizationSession(Model& model, const PluginRegistry& registry, const CompressionConfig& config);
  ~QuantizationSession() override;
  QuantizationSession(const QuantizationSession&) = delete;
  QuantizationSession& operator=(const QuantizationSession&) = delete;

  /// NNI's compress(): attaches the quantizer (state restored from the model's buffers where
  /// present; sdk::Error(kInvalidModel) when they belong to another algorithm or other bits),
  /// installs the fake quantization and registers the state as model buffers. Once; on error
  /// the model is unchanged and the session cannot be used any more. update_epoch,
  /// optimizer_step and extra_parameters throw sdk::Error(kInvalidConfig) before it.
  void compress();
  /// Removes the fake quantization from the model's forward (the state buffers stay).
  void detach();
  /// While on, the session keeps a copy of the latest quantization of every (layer, type):
  /// for conformance checks and debugging (costs a copy per quantized tensor and forward).
  void set_recording(bool on);
  /// The latest recorded quantization of `layer`'s `type`, or nullptr.
  const QuantRecord* last_record(const std::string& layer, sdk::QuantType type) const;

  void update_epoch(int64_t epoch) override;
  /// optimizer.step(), then the quantizer's step (and its optimizer-step callbacks).
  void optimizer_step(torch::optim::Optimizer& optimizer) override;
  /// End of a training batch. When no optimizer_step ran since the previous step() (or
  /// compress()) but a selected weight changed, an optimizer stepped outside the session and
  /// the quantizer's step (QAT's step count for quant_start_step, ...) never ran: fails naming
  /// session.optimizer_step(optimizer). Weights changed after an optimizer_step (e.g. pruning
  /// masks re-applied) and batches without a step (gradient accumulation) are fine.
  void step() override;
  /// Tells the session that the weights were changed on purpose outside it, so step() accepts
  /// them as they are now.
  void accept_weight_changes();
  std::vector<at::Tensor> extra_parameters() override;

  /// Points the model's buffers at the layers' current state tensors (done by compress();
  /// call again before saving if a quantizer replaced a state tensor instead of updating it).
  void store_state_in_model();
  /// Per layer: quant types, bits and state.
  std::vector<QuantLayerReport> report() const;
  /// The calibration file: {"algorithm": ..., "layers": {name: {"type": ..., "<quant type>":
  /// {"bits": b, "<state>": value, ...}}}}, pretty-printed JSON.
  std::string calibration_json() const;

  // sdk::CompressionContext, besides what SessionCore provides
  /// Quantizers have no masks: throws sdk::Error(kUnsupported).
  void update_masks_now() override;
  /// TrainingHooks: the quantization state tensors of every layer.
  std::vector<at::Tensor> replicated_state() const override;

 private:
  struct Layer {
    sdk::LayerView* view = nullptr;  // owned by SessionCore
    std::vector<sdk::QuantType> types;
    bool observes_input = false;  // see kObservedInputRangeBuffer
    at::Tensor input_range;       // [min, max] observed so far; undefined before any
  };
  void observe_input(Layer& layer, const at::Tensor& x);
  at::Tensor quantize(const std::string& module, sdk::QuantType type, const at::Tensor& x);
  /// The rewrite's sites; `observing` adds the observe-only input sites (see
  /// kObservedInputRangeBuffer), which are installed only while the session calibrates.
  std::vector<QuantSite> sites(bool observing) const;
  /// The rewrite with or without the observe-only input sites; no-op before compress().
  void install(bool observing);
  void on_calibrating_changed() override;
  /// {"algorithm": ..., "quant_bits": {...}} of a layer, as JSON text.
  std::string identity(const Layer& layer) const;
  void restore_saved_state();
  void check_state_names() const;
  void require_compressed(const char* what) const;

  std::unique_ptr<sdk::Quantizer> quantizer_;
  std::vector<Layer> layers_;
  std::map<std::string, Layer*> by_name_;
  std::string attach_failure_;  // why attach failed; the session is then unusable
  bool installed_ = false;
  bool recording_ = false;
  std::map<std::pair<std::string, sdk::QuantType>, QuantRecord> records_;
  std::vector<double> weight_fingerprints_;  // per layer, at the last step() or compress()
  bool stepped_ = false;                     // optimizer_step ran since then
};

}  // namespace lithe::host
