// Replays of NNI's QAT_Quantizer cases (reference §3.2; README departure 3, behaviours 14–15).
//
// NNI v2.0's QAT is wrong in ways Lithe corrects: its output EMA starts from 0 (or restarts
// from the last batch before quant_start_step), one scale/zero-point buffer is shared by bias,
// weight and output, biases are fake-quantized in place to 32 bits, and the clipped outputs
// give all-zero weight gradients. Its per-forward arithmetic for a given range is
// deterministic, and there Lithe must match it bit for bit. So the replay, step by step:
//  * compares with NNI exactly: `steps`, the quantized weights (step0 tensor and the
//    weight_identical_to_step0 flags), and the weight scale/zero point wherever NNI's shared
//    buffer holds them (layers that quantize no output);
//  * checks Lithe's own rule with NNI's arithmetic (written below as NNI's torch code, not
//    the plugin's): weight parameters from min/max of the float weight; output range = the
//    first training batch's min/max, then EMA 0.99, on the raw outputs the session recorded;
//    output parameters and fake quantization from that range. The arithmetic is itself
//    checked first against every (range -> scale, zero point) pair NNI recorded;
//  * explains each difference from NNI by the departure its data shows, verified where the
//    data allows: NNI's range follows NNI's rule on the same raw outputs (the first layer, and
//    every layer while nothing is quantized yet), NNI's biases are the 32-bit fake
//    quantization of the previous ones, NNI's weight gradients are zero where Lithe's are not;
//  * finally loads NNI's final output parameters and biases into Lithe: the eval forward must
//    then reproduce NNI's eval output.
// Any other difference fails the case.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "conformance_case.h"

namespace lithe::host::conformance_detail {
namespace {

using sdk::QuantType;

// ---- NNI v2.0's QAT arithmetic as NNI's torch code computes it: float32 tensors, NNI's order.

at::Tensor f32(double value) { return at::full({1}, value, at::kFloat); }

struct NniParams {
  at::Tensor scale;       // float32 [1]
  at::Tensor zero_point;  // float32 [1]
};

// update_quantization_param(bits, rmin, rmax).
NniParams nni_quant_params(int64_t bits, const at::Tensor& rmin, const at::Tensor& rmax) {
  const at::Tensor lo = at::minimum(rmin.reshape({1}).to(at::kFloat), f32(0));
  const at::Tensor hi = at::maximum(rmax.reshape({1}).to(at::kFloat), f32(0));
  const at::Tensor qmin = f32(0);
  const at::Tensor qmax = f32(static_cast<double>((int64_t{1} << bits) - 1));  // 2^32 at 32 bits
  const at::Tensor scale = (hi - lo) / (qmax - qmin);
  const at::Tensor initial = qmin - lo / scale;
  if (initial.lt(qmin).item<bool>()) {
    return {scale, qmin};
  }
  if (initial.gt(qmax).item<bool>()) {
    return {scale, qmax};
  }
  return {scale, at::round(initial)};
}

// _quantize, then _dequantize: scale * (round(clamp(zp + x / scale, 0, qmax)) - zp).
at::Tensor nni_fake_quantize(const at::Tensor& x, const NniParams& p, int64_t bits) {
  const at::Tensor q =
      at::round(at::clamp(p.zero_point + x / p.scale, 0, (int64_t{1} << bits) - 1));
  return p.scale * (q - p.zero_point);
}

// update_ema's biased average with the float32 ema_decay buffer [0.99].
at::Tensor nni_ema(const at::Tensor& average, const at::Tensor& value) {
  const at::Tensor decay = f32(0.99);
  return average * decay + (1 - decay) * value;
}

// ---- The replay.

struct Range {
  at::Tensor min;  // float32 [1]
  at::Tensor max;
};

// The (first) value of `t`; 9 digits identify a float32 exactly.
std::string value_of(const at::Tensor& t, int digits = 9) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*g", digits, t.reshape({-1})[0].item<double>());
  return buffer;
}

std::string describe(const Range& r, int digits = 9) {
  return "[" + value_of(r.min, digits) + ", " + value_of(r.max, digits) + "]";
}

bool close(const Range& a, const Range& b) {
  std::string ignored;
  return close_enough(a.min, b.min, &ignored) && close_enough(a.max, b.max, &ignored);
}

// One quantized layer as the replay follows it.
struct LayerReplay {
  std::string name;
  bool first = false;  // first quantized layer (reads the model input in the golden models):
                       // the same input and weight, so its raw outputs are NNI's too
  bool weight = false;
  bool output = false;
  int64_t weight_bits = 0;
  int64_t output_bits = 0;
  int64_t start_step = 0;
  at::Tensor original_bias;         // undefined without bias; Lithe never changes it
  at::Tensor nni_bias;              // NNI's bias before the current step
  Range lithe_range;                // Lithe's rule on the recorded raw outputs
  Range nni_rule_range;             // NNI's rule on the same raw outputs
  bool nni_rule_restarted = false;  // NNI's average restarted from a batch before start step
  at::Tensor last_weight;           // the weight Lithe used in the last training forward
};

// What NNI's data shows of its defects (empty / 0: not shown).
struct Findings {
  std::string range;
  std::string shared_buffer;
  float bias_drift = 0;
  std::vector<std::string> zero_gradients;
  int nni_ranges_checked = 0;
};

class QatReplay {
 public:
  QatReplay(const CaseContext& c, const PluginRegistry& registry, const std::string& algorithm)
      : c_(c), q_(start_quantized_case(c, registry, algorithm)) {
    const json& wrappers = c.summary.at("results").at("wrappers");
    for (const QuantLayerReport& report : q_.session->report()) {
      LayerReplay l;
      l.name = report.name;
      l.first = layers_.empty();
      const json& config = wrappers.at(l.name).at("config");
      l.start_step = config.value("quant_start_step", int64_t{0});
      for (const QuantTypeReport& t : report.types) {
        l.weight = l.weight || t.type == QuantType::kWeight;
        l.output = l.output || t.type == QuantType::kOutput;
        if (t.type == QuantType::kInput) {
          unsupported("NNI v2.0's QAT cannot quantize inputs; no replay for '" + l.name + "'");
        }
      }
      l.weight_bits = l.weight ? nni_quant_bits(config, QuantType::kWeight) : 0;
      l.output_bits = l.output ? nni_quant_bits(config, QuantType::kOutput) : 0;
      const ModuleRecord* record = q_.model->find_module(l.name);
      if (record != nullptr && record->bias.has_value() && record->bias->defined()) {
        l.original_bias = record->bias->detach().clone();
        l.nni_bias = l.original_bias;
      }
      layers_.push_back(std::move(l));
    }
    const json optimizer = c.config.value("kwargs", json::object()).value("optimizer", json());
    if (!optimizer.is_null()) {
      // NNI's optimizer only advances `steps` here (lr 0); any other one would train.
      const std::string text =
          optimizer.is_string() ? optimizer.get<std::string>() : optimizer.dump();
      if (text.find("SGD(") == std::string::npos || text.find("lr=0.0") == std::string::npos) {
        unsupported("optimizer '" + text + "' is not replayed (only SGD with lr=0.0)");
      }
      optimizer_ = std::make_unique<torch::optim::SGD>(q_.model->parameters(),
                                                       torch::optim::SGDOptions(0.0));
    }
    backward_ = procedure_mentions(c.config, "backward()");
  }

  Verdict run() {
    const json& nni_steps = c_.summary.at("results").at("train_steps");
    q_.model->train(true);
    int64_t steps = 0;
    for (; c_.tensors.count("train_input." + std::to_string(steps)) != 0; ++steps) {
      training_step(steps, nni_steps.at(static_cast<size_t>(steps)));
    }
    if (steps == 0) {
      unsupported("the case records no training forward (train_input.0)");
    }
    const std::string eval = eval_forward();
    bool weights = false;
    bool outputs = false;
    for (const LayerReplay& l : layers_) {
      weights = weights || l.weight;
      outputs = outputs || l.output;
    }
    std::vector<std::string> checks{"steps"};
    if (weights) {
      checks.emplace_back("quantized weights and weight params = NNI's");
    }
    if (outputs) {
      checks.push_back("ranges by Lithe's rule on the recorded outputs, output params and fake "
                       "quantization by NNI's arithmetic (verified on NNI's " +
                       std::to_string(findings_.nni_ranges_checked) + " recorded ranges)");
    }
    if (backward_) {
      checks.emplace_back("non-zero weight gradients");
    }
    checks.push_back(eval);
    const std::string checked = std::to_string(steps) + " steps x " +
                                std::to_string(layers_.size()) + " layers: " + join(checks);

    std::vector<std::string> departures;
    if (!findings_.range.empty()) {
      departures.push_back(findings_.range);
    }
    if (!findings_.shared_buffer.empty()) {
      departures.push_back(findings_.shared_buffer);
    }
    if (findings_.bias_drift > 0) {
      departures.push_back("NNI fake-quantizes biases in place to 32 bits (drift up to " +
                           value_of(f32(findings_.bias_drift), 3) + ", Lithe's stay unchanged)");
    }
    if (!findings_.zero_gradients.empty()) {
      departures.push_back("NNI's weight gradients are all zero, Lithe's are not (|grad| sums "
                           "at step 0: " + join(findings_.zero_gradients) + ")");
    }
    if (departures.empty()) {
      return {Outcome::kPass, checked};
    }
    std::string reason = "departure 3: ";
    for (size_t k = 0; k < departures.size(); ++k) {
      reason += (k == 0 ? "" : "; ") + departures[k];
    }
    return {Outcome::kDeviation, reason + ". Checked " + checked};
  }

 private:
  static bool quantizing(const LayerReplay& l, float steps) {
    return static_cast<double>(steps) >= static_cast<double>(l.start_step);
  }

  at::Tensor nni(int64_t step, const std::string& layer, const std::string& field) const {
    return tensor(c_, "step" + std::to_string(step) + "/" + layer + "." + field);
  }

  // Lithe's state `key` of `l` must equal `expected` exactly.
  void expect_state(const LayerReplay& l, const std::string& key, const at::Tensor& expected,
                    const std::string& where, const std::string& rule) {
    const at::Tensor ours = layer_state(*q_.session, l.name, key);
    if (!ours.reshape({-1}).equal(expected.reshape({-1}).to(ours.dtype()))) {
      fail(where + ": Lithe's " + key + " " + value_of(ours) + " is not " + rule + " (" +
           value_of(expected) + ")");
    }
  }

  void training_step(int64_t i, const json& nni_step) {
    const std::string step = "step " + std::to_string(i);
    // Every layer's `steps` before the forward: 1 + optimizer steps, as NNI's buffer.
    const float steps = layer_state(*q_.session, layers_.front().name, "steps").item<float>();
    const double nni_steps = nni_step.at("steps_buffer_before_forward").get<double>();
    for (const LayerReplay& l : layers_) {
      expect_state(l, "steps", f32(nni_steps), step, "NNI's steps buffer");
    }
    bool any_quantizing = false;
    for (const LayerReplay& l : layers_) {
      any_quantizing = any_quantizing || quantizing(l, steps);
    }

    at::Tensor output;
    const at::Tensor& input = tensor(c_, "train_input." + std::to_string(i));
    if (backward_) {
      output = q_.model->forward(input);
      torch::nn::functional::cross_entropy(output, tensor(c_, "train_labels." + std::to_string(i)))
          .backward();
    } else {
      at::NoGradGuard no_grad;
      output = q_.model->forward(input);
    }

    for (LayerReplay& l : layers_) {
      const std::string where = step + " " + l.name;
      if (l.weight) {
        check_weight(i, l, quantizing(l, steps), nni_step.at(l.name), where);
      }
      if (l.output) {
        check_output(i, l, quantizing(l, steps), l.first || !any_quantizing, where);
      }
      if (l.original_bias.defined() &&
          c_.tensors.count("step" + std::to_string(i) + "/" + l.name + ".bias") != 0) {
        check_bias(i, l, l.weight && quantizing(l, steps), where);
      }
      if (backward_ && l.weight) {
        check_gradient(i, l, nni_step.at(l.name), where);
      }
    }

    std::string detail;
    if (!close_enough(output, tensor(c_, "train_output." + std::to_string(i)), &detail) &&
        findings_.range.empty()) {
      fail(step + ": output differs from NNI's with no range difference to explain it: " + detail);
    }
    if (optimizer_) {
      q_.session->optimizer_step(*optimizer_);  // after recording, where NNI's procedure steps
    }
  }

  void check_weight(int64_t i, LayerReplay& l, bool quantizing, const json& nni_layer,
                    const std::string& where) {
    const QuantRecord& record = record_of(*q_.session, l.name, QuantType::kWeight);
    const at::Tensor& w = record.input;  // the float weight the quantizer saw
    const NniParams params = nni_quant_params(l.weight_bits, w.min(), w.max());
    const at::Tensor expected = quantizing ? nni_fake_quantize(w, params, l.weight_bits) : w;
    if (!record.output.equal(expected)) {
      fail(where + ": the weight Lithe used is not NNI's " +
           (quantizing ? "fake quantization with min/max of W"
                       : "float weight (before quant_start_step)") +
           ": " + bitwise_difference(record.output, expected));
    }
    if (quantizing) {
      expect_state(l, "weight_scale", params.scale, where, "NNI's scale from min/max of W");
      expect_state(l, "weight_zero_point", params.zero_point, where,
                   "NNI's zero point from min/max of W");
    }
    const at::Tensor& step0 = tensor(c_, "step0/" + l.name + ".weight");
    if (i == 0 && !record.output.equal(step0)) {
      fail(where + ": quantized weight differs from NNI's step0 weight: " +
           bitwise_difference(record.output, step0));
    }
    if (i > 0 && nni_layer.contains("weight_identical_to_step0") &&
        record.output.equal(step0) != nni_layer["weight_identical_to_step0"].get<bool>()) {
      fail(where + ": NNI's weight is " +
           (nni_layer["weight_identical_to_step0"].get<bool>() ? "" : "not ") +
           "identical to its step0 weight, Lithe's is" +
           (nni_layer["weight_identical_to_step0"].get<bool>() ? " not" : ""));
    }
    // Without an output, NNI's shared buffer ends the forward holding the weight's parameters.
    if (quantizing && !l.output) {
      expect_state(l, "weight_scale", nni(i, l.name, "scale"), where, "NNI's recorded scale");
      expect_state(l, "weight_zero_point", nni(i, l.name, "zero_point"), where,
                   "NNI's recorded zero point");
    }
    l.last_weight = record.output;
  }

  void check_output(int64_t i, LayerReplay& l, bool quantizing, bool raw_is_nnis,
                    const std::string& where) {
    const QuantRecord& record = record_of(*q_.session, l.name, QuantType::kOutput);
    const at::Tensor& raw = record.input;
    const at::Tensor raw_min = raw.min().reshape({1});
    const at::Tensor raw_max = raw.max().reshape({1});

    // Lithe's rule: the first training batch's min/max, then the EMA, on every training forward.
    l.lithe_range = l.lithe_range.min.defined() ? Range{nni_ema(l.lithe_range.min, raw_min),
                                                        nni_ema(l.lithe_range.max, raw_max)}
                                                : Range{raw_min, raw_max};
    const std::string rule =
        "Lithe's rule (first batch's min/max, then EMA 0.99) on the recorded outputs";
    expect_state(l, "output_tracked_min", l.lithe_range.min, where, rule);
    expect_state(l, "output_tracked_max", l.lithe_range.max, where, rule);
    const NniParams params = nni_quant_params(l.output_bits, l.lithe_range.min, l.lithe_range.max);
    if (quantizing) {
      expect_state(l, "output_scale", params.scale, where, "NNI's scale for Lithe's range");
      expect_state(l, "output_zero_point", params.zero_point, where,
                   "NNI's zero point for Lithe's range");
    }
    const at::Tensor expected = quantizing ? nni_fake_quantize(raw, params, l.output_bits) : raw;
    if (!record.output.equal(expected)) {
      fail(where + ": the output Lithe used is not NNI's " +
           (quantizing ? "fake quantization for its range"
                       : "raw output (before quant_start_step)") +
           ": " + bitwise_difference(record.output, expected));
    }

    // NNI's rule on the same raw outputs: each batch's min/max before quant_start_step, then
    // the EMA from there, or from 0.
    if (!quantizing) {
      l.nni_rule_range = Range{raw_min, raw_max};
      l.nni_rule_restarted = true;
    } else {
      const Range from = l.nni_rule_range.min.defined() ? l.nni_rule_range : Range{f32(0), f32(0)};
      l.nni_rule_range = Range{nni_ema(from.min, raw_min), nni_ema(from.max, raw_max)};
    }
    const Range nni_range{nni(i, l.name, "tracked_min_biased").reshape({1}),
                          nni(i, l.name, "tracked_max_biased").reshape({1})};
    if (quantizing) {
      // NNI's buffer holds the output's parameters: the runner's arithmetic must give them.
      const NniParams from_nni = nni_quant_params(l.output_bits, nni_range.min, nni_range.max);
      const at::Tensor nni_scale = nni(i, l.name, "scale").reshape({1});
      const at::Tensor nni_zero_point = nni(i, l.name, "zero_point").reshape({1});
      if (!from_nni.scale.equal(nni_scale) || !from_nni.zero_point.equal(nni_zero_point)) {
        fail(where + ": NNI's arithmetic as the runner computes it gives scale " +
             value_of(from_nni.scale) + ", zero point " + value_of(from_nni.zero_point) +
             " for NNI's range " + describe(nni_range) + ", NNI recorded " + value_of(nni_scale) +
             ", " + value_of(nni_zero_point));
      }
      ++findings_.nni_ranges_checked;
      if (l.weight && !layer_state(*q_.session, l.name, "weight_scale").equal(nni_scale)) {
        findings_.shared_buffer =
            "NNI shares one scale/zero point per layer (after a forward it holds the output's)";
      }
    }
    if (raw_is_nnis && !close(l.nni_rule_range, nni_range)) {
      fail(where + ": NNI's recorded range " + describe(nni_range) + " is not NNI's rule on " +
           "Lithe's raw outputs " + describe(l.nni_rule_range) +
           ": the layer's raw outputs differ from NNI's");
    }
    if (!close(l.lithe_range, nni_range) && findings_.range.empty()) {
      const std::string why =
          !quantizing ? "before quant_start_step NNI takes each batch's own min/max"
          : l.nni_rule_restarted
              ? "NNI restarts its EMA from the last batch before quant_start_step"
              : "NNI's output EMA starts from 0";
      findings_.range = why + " (" + where + ": NNI " + describe(nni_range, 4) + ", Lithe " +
                        describe(l.lithe_range, 4) + ")";
    }
  }

  void check_bias(int64_t i, LayerReplay& l, bool nni_quantizes_weight, const std::string& where) {
    const at::Tensor lithe_bias = q_.model->find_module(l.name)->bias->detach();
    if (!lithe_bias.equal(l.original_bias)) {
      fail(where + ": Lithe changed the bias: " + bitwise_difference(lithe_bias, l.original_bias));
    }
    const at::Tensor nni_bias = nni(i, l.name, "bias");
    if (!nni_bias.equal(l.nni_bias)) {
      // NNI's quantize_weight fake-quantizes the bias in place, 32 bits, its own min/max.
      const NniParams params = nni_quant_params(32, l.nni_bias.min(), l.nni_bias.max());
      const at::Tensor expected = nni_fake_quantize(l.nni_bias, params, 32);
      if (!nni_quantizes_weight || !nni_bias.equal(expected)) {
        fail(where + ": NNI's bias changed in a way its in-place 32-bit fake quantization " +
             "does not explain: " + bitwise_difference(nni_bias, expected));
      }
      findings_.bias_drift =
          std::max(findings_.bias_drift, (nni_bias - l.original_bias).abs().max().item<float>());
    }
    l.nni_bias = nni_bias;
  }

  void check_gradient(int64_t i, const LayerReplay& l, const json& nni_layer,
                      const std::string& where) {
    const at::Tensor grad = q_.model->find_module(l.name)->weight->grad();
    const double ours = grad.defined() ? grad.abs().sum().item<double>() : 0.0;
    if (!std::isfinite(ours) || ours == 0.0) {
      fail(where + ": Lithe's weight gradient |sum| is " + std::to_string(ours) +
           "; departure 3: gradients reach the float weights from the first step");
    }
    if (nni_layer.value("old_weight_grad_abs_sum", -1.0) == 0.0 && i == 0) {
      findings_.zero_gradients.push_back(l.name + " " + value_of(f32(ours), 4));
    }
  }

  // The eval forward (no_grad) by Lithe's rule, then against NNI's eval output; returns what
  // was shown.
  std::string eval_forward() {
    q_.model->train(false);
    const auto forward = [&] {
      at::NoGradGuard no_grad;
      return q_.model->forward(tensor(c_, "eval_input"));
    };
    const at::Tensor output = forward();
    const json& same_weight = c_.summary.at("results").value(
        "eval_weight_identical_to_last_train_weight", json::object());
    const float steps = layer_state(*q_.session, layers_.front().name, "steps").item<float>();
    for (const LayerReplay& l : layers_) {
      const std::string where = "eval " + l.name;
      if (l.weight) {
        // Lithe re-quantizes the current weight; NNI reuses its last training one. The weights
        // never train here (no optimizer, or lr 0), so the two must agree as NNI's flag says.
        const QuantRecord& record = record_of(*q_.session, l.name, QuantType::kWeight);
        const bool same = record.output.equal(l.last_weight);
        if (same_weight.contains(l.name) && same != same_weight[l.name].get<bool>()) {
          fail(where + ": the weight used in eval is " + (same ? "" : "not ") +
               "the last training weight; NNI's is" + (same ? " not" : ""));
        }
      }
      if (l.output) {
        // Eval quantizes with the stored parameters and leaves the range alone.
        expect_state(l, "output_tracked_min", l.lithe_range.min, where, "the range after training");
        expect_state(l, "output_tracked_max", l.lithe_range.max, where, "the range after training");
        const QuantRecord& record = record_of(*q_.session, l.name, QuantType::kOutput);
        const NniParams stored{layer_state(*q_.session, l.name, "output_scale").reshape({1}),
                               layer_state(*q_.session, l.name, "output_zero_point").reshape({1})};
        const at::Tensor expected = quantizing(l, steps)
                                        ? nni_fake_quantize(record.input, stored, l.output_bits)
                                        : record.input;
        if (!record.output.equal(expected)) {
          fail(where + ": the output is not NNI's fake quantization with the stored parameters: " +
               bitwise_difference(record.output, expected));
        }
      }
    }
    std::string detail;
    if (close_enough(output, tensor(c_, "eval_output"), &detail)) {
      return "eval output = NNI's";
    }
    if (findings_.range.empty() && findings_.bias_drift == 0) {
      fail("eval output differs from NNI's with no departure to explain it: " + detail);
    }
    // Load NNI's final state (its output parameters, its drifted biases): the per-forward
    // arithmetic must then give NNI's output.
    const int64_t last =
        static_cast<int64_t>(c_.summary.at("results").at("train_steps").size()) - 1;
    {
      at::NoGradGuard no_grad;
      for (const LayerReplay& l : layers_) {
        if (l.output) {
          layer_state(*q_.session, l.name, "output_scale")
              .copy_(nni(last, l.name, "scale").reshape({1}));
          layer_state(*q_.session, l.name, "output_zero_point")
              .copy_(nni(last, l.name, "zero_point").reshape({1}));
        }
        if (l.original_bias.defined()) {
          q_.model->find_module(l.name)->bias->copy_(l.nni_bias);
        }
      }
    }
    if (!close_enough(forward(), tensor(c_, "eval_output"), &detail)) {
      fail("with NNI's final output parameters and biases loaded, Lithe's eval output still " +
           std::string("differs from NNI's: ") + detail);
    }
    return "eval output = NNI's once NNI's final output parameters and biases are loaded";
  }

  const CaseContext& c_;
  QuantizedCase q_;
  std::vector<LayerReplay> layers_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
  bool backward_ = false;
  Findings findings_;
};

}  // namespace

Verdict replay_qat(const CaseContext& c, const PluginRegistry& registry,
                   const std::string& algorithm) {
  if (!procedure_mentions(c.config, "model.train()") || c.tensors.count("eval_input") == 0) {
    unsupported("no QAT replay for this procedure: " +
                c.config.value("procedure", json::array()).dump().substr(0, 160));
  }
  QatReplay replay(c, registry, algorithm);
  return replay.run();
}

}  // namespace lithe::host::conformance_detail
