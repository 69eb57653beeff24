// Replays of NNI's weight-quantizer cases whose every forward is deterministic (Naive, DoReFa,
// BNN): after compress() the model runs eval-mode forwards without gradients on the recorded
// inputs, and each forward's quantized weights (`fwd<i>/<layer>.weight`, the tensor the layer
// computed with) and Naive's running scale (`fwd<i>/layer_scale.<layer>`) must equal NNI's bit
// for bit, the output within the usual BLAS tolerance (or, where cancellation amplifies float32
// summation order, as close to the exact float64 result as NNI's own). QAT, whose ranges
// depend on training, has its own replay (conformance_qat.cpp).
#include <torch/script.h>

#include <algorithm>
#include <map>
#include <string>

#include "conformance_case.h"

namespace lithe::host::conformance_detail {
namespace {

// NNI's name of a recorded per-layer quantizer state -> the Lithe plugin's attribute.
const std::map<std::string, std::string>& state_names() {
  static const std::map<std::string, std::string> names = {
      {"layer_scale", "weight_scale"},  // NaiveQuantizer.layer_scale[name] -> naive's state
  };
  return names;
}

// The case model's forward in float64 with the weights NNI recorded for one forward
// (`fwd<i>/<layer>.weight`): the exact result both float32 forwards approximate. Valid only
// where nothing but weights is quantized.
at::Tensor exact_reference_output(const CaseContext& c, const std::string& prefix,
                                  const at::Tensor& input) {
  torch::jit::Module reference = load_case_model(c);
  reference.to(at::kDouble);
  std::map<std::string, at::Tensor> weights;
  for (const auto& [key, value] : c.tensors) {
    if (key.rfind(prefix, 0) == 0 && key.size() > 7 &&
        key.compare(key.size() - 7, 7, ".weight") == 0) {
      weights[key] = value;
    }
  }
  load_state(reference, weights, prefix);
  at::NoGradGuard no_grad;
  return reference.forward({input.to(at::kDouble)}).toTensor();
}

// Lithe's output against NNI's: within the usual tolerance, or, where large intermediate
// values cancel (DoReFa's ±1-scale weights: outputs of ~100 summed from terms of ~10^4) and
// float32 summation order alone moves the result by more, no further from the exact result
// than twice NNI's own distance. `errors` collects the largest distances (Lithe's, NNI's) when
// the second rule decided.
struct RoundingErrors {
  double ours = 0;
  double nnis = 0;
};

void compare_output(const CaseContext& c, const std::string& i, const at::Tensor& output,
                    bool weights_only, RoundingErrors* errors) {
  const at::Tensor& expected = tensor(c, "output." + i);
  std::string detail;
  if (close_enough(output, expected, &detail)) {
    return;
  }
  if (!weights_only) {
    fail("forward " + i + ": output differs from NNI's: " + detail);
  }
  const at::Tensor exact = exact_reference_output(c, "fwd" + i + "/", tensor(c, "input." + i));
  const double ours = (output.to(at::kDouble) - exact).abs().max().item<double>();
  const double nnis = (expected.to(at::kDouble) - exact).abs().max().item<double>();
  if (!(ours <= 2 * nnis)) {
    fail("forward " + i + ": output differs from NNI's: " + detail + "; its distance from the " +
         "exact (float64) result is " + c10::str(ours) + ", NNI's " + c10::str(nnis));
  }
  errors->ours = std::max(errors->ours, ours);
  errors->nnis = std::max(errors->nnis, nnis);
}

// Compares one golden `fwd<i>/...` tensor with what Lithe used in that forward.
void compare_forward_tensor(QuantizationSession& session, const std::string& key,
                            const std::string& entry, const at::Tensor& expected, int* weights,
                            int* states) {
  // Two shapes: "<state>.<layer>" (a state name has no dot) and "<layer>.weight", where the
  // layer's module path may itself hold dots ("features.0", "classifier.2").
  const size_t dot = entry.find('.');
  const std::string head = entry.substr(0, dot);
  const std::string tail = dot == std::string::npos ? "" : entry.substr(dot + 1);
  const std::string weight_suffix = ".weight";
  const bool names_state = state_names().count(head) != 0;
  if (!names_state && entry.size() > weight_suffix.size() &&
      entry.compare(entry.size() - weight_suffix.size(), weight_suffix.size(), weight_suffix) == 0) {
    // "<layer>.weight": the quantized weight buffer the layer used
    const std::string layer = entry.substr(0, entry.size() - weight_suffix.size());
    const at::Tensor& used = record_of(session, layer, sdk::QuantType::kWeight).output;
    if (!used.equal(expected.to(used.dtype()))) {
      fail(key + ": Lithe's quantized weight differs from NNI's: " +
           bitwise_difference(used, expected));
    }
    ++*weights;
    return;
  }
  const auto state = state_names().find(head);  // "<state>.<layer>"
  if (state == state_names().end()) {
    unsupported("golden tensor '" + key + "' has no Lithe counterpart in this replay");
  }
  const at::Tensor ours = layer_state(session, tail, state->second);
  if (ours.numel() != expected.numel() ||
      !ours.reshape(expected.sizes()).equal(expected.to(ours.dtype()))) {
    fail(key + ": Lithe's " + state->second + " differs from NNI's: " +
         bitwise_difference(ours.reshape({-1}), expected.reshape({-1})));
  }
  ++*states;
}

}  // namespace

Verdict replay_eval_forwards(const CaseContext& c, const PluginRegistry& registry,
                             const std::string& algorithm) {
  if (!procedure_mentions(c.config, "model.eval()") || c.tensors.count("input.0") == 0) {
    unsupported("no replay for this procedure: " +
                c.config.value("procedure", json::array()).dump().substr(0, 160));
  }
  QuantizedCase q = start_quantized_case(c, registry, algorithm);
  q.model->train(false);  // procedure: compress(); model.eval()
  bool weights_only = true;
  for (const QuantLayerReport& layer : q.session->report()) {
    for (const QuantTypeReport& type : layer.types) {
      weights_only = weights_only && type.type == sdk::QuantType::kWeight;
    }
  }
  RoundingErrors rounding;
  int forwards = 0;
  int weights = 0;
  int states = 0;
  for (; c.tensors.count("input." + std::to_string(forwards)) != 0; ++forwards) {
    const std::string i = std::to_string(forwards);
    at::Tensor output;
    {
      at::NoGradGuard no_grad;
      output = q.model->forward(tensor(c, "input." + i));
    }
    const std::string prefix = "fwd" + i + "/";
    for (const auto& [key, expected] : c.tensors) {
      if (key.rfind(prefix, 0) == 0) {
        compare_forward_tensor(*q.session, key, key.substr(prefix.size()), expected, &weights,
                               &states);
      }
    }
    compare_output(c, i, output, weights_only, &rounding);
  }
  const std::string outputs =
      rounding.ours == 0 ? std::string("within tolerance")
                         : "within float32 rounding of the exact (float64) result: max error " +
                               c10::str(rounding.ours) + ", NNI's own " + c10::str(rounding.nnis);
  return {Outcome::kPass,
          std::to_string(forwards) + " eval forwards: " + std::to_string(weights) +
              " quantized weights" +
              (states > 0 ? " and " + std::to_string(states) + " layer scales" : "") +
              " bit-identical to NNI, outputs " + outputs};
}

}  // namespace lithe::host::conformance_detail
