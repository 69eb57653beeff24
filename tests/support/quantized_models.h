#pragma once
// Conformance models quantized by Lithe's own quantizers (linked directly), with the session
// kept alive so the model's forward is the quantized one, for the ONNX QDQ tests.

#include <torch/script.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/quantization_session.h"
#include "plugins/bnn/bnn.h"
#include "plugins/dorefa/dorefa.h"
#include "plugins/lsq/lsq.h"
#include "plugins/qat/qat.h"

namespace lithe::test {

inline host::PluginRegistry& quantizer_registry() {
  static host::PluginRegistry* registry = [] {
    auto* r = new host::PluginRegistry();
    plugins::qat::register_algorithms(*r);
    plugins::lsq::register_algorithms(*r);
    plugins::dorefa::register_algorithms(*r);
    plugins::bnn::register_algorithms(*r);
    return r;
  }();
  return *registry;
}

struct QuantizedModel {
  torch::jit::Module module;  ///< carries the state buffers (lithe_q_*) after quantize_model
  std::unique_ptr<host::Model> model;
  std::unique_ptr<host::QuantizationSession> session;

  /// Lithe's quantized evaluation forward.
  at::Tensor forward(const at::Tensor& x) {
    torch::NoGradGuard no_grad;
    model->train(false);
    return model->forward(x);
  }
};

/// `module` quantized by `algorithm` with `config_list` (JSON text), its ranges calibrated on
/// `calibration_batches` random batches of `shape` (seeded), and its state stored in the module.
inline QuantizedModel quantize_model(torch::jit::Module module, const std::string& algorithm,
                                     const std::string& config_list,
                                     const std::vector<int64_t>& shape,
                                     int calibration_batches) {
  QuantizedModel q;
  q.module = module;
  q.model = host::make_torchscript_model(module);
  host::CompressionConfig config{algorithm, config_list, "{}", "<test>"};
  q.session = std::make_unique<host::QuantizationSession>(*q.model, quantizer_registry(), config);
  q.session->compress();
  q.session->set_calibrating(true);
  torch::manual_seed(5);
  for (int i = 0; i < calibration_batches; ++i) {
    q.forward(torch::randn(shape));
  }
  q.session->set_calibrating(false);
  q.session->store_state_in_model();
  return q;
}

}  // namespace lithe::test
