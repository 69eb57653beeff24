// Activations and identities in eval: one output channel per input channel. Most keep 0 at 0,
// so a removed (all-zero) channel stays removable after them; sigmoid-like ones do not.
#include <torch/csrc/jit/ir/constants.h>

#include <cmath>

#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

double number(OnnxWriter& w, const jit::Node* n, size_t index) {
  return w.constant(n, index).toScalar().toDouble();
}

void unary(OnnxWriter& w, const jit::Node* n, const char* type) { w.emit(n, type, {w.input(n, 0)}); }

void emit_relu(OnnxWriter& w, const jit::Node* n) { unary(w, n, "Relu"); }
void emit_sigmoid(OnnxWriter& w, const jit::Node* n) { unary(w, n, "Sigmoid"); }
void emit_tanh(OnnxWriter& w, const jit::Node* n) { unary(w, n, "Tanh"); }
void emit_exp(OnnxWriter& w, const jit::Node* n) { unary(w, n, "Exp"); }
void emit_identity(OnnxWriter& w, const jit::Node* n) { unary(w, n, "Identity"); }

void emit_leaky_relu(OnnxWriter& w, const jit::Node* n) {
  w.emit(n, "LeakyRelu", {w.input(n, 0)}, {{"alpha", number(w, n, 1)}});
}

void emit_clip(OnnxWriter& w, const jit::Node* n) {
  const std::string name = n->kind().toQualString();
  const bool six = name.rfind("aten::relu6", 0) == 0;
  const double lo = six ? 0.0 : number(w, n, 1);
  const double hi = six ? 6.0 : number(w, n, 2);
  w.emit(n, "Clip",
         {w.input(n, 0), w.initializer("clip_min", at::scalar_tensor(lo, at::kFloat)),
          w.initializer("clip_max", at::scalar_tensor(hi, at::kFloat))});
}

// aten::clamp(x, min, max) / clamp_min(x, min) / clamp_max(x, max) with number bounds: Clip,
// an absent bound left out.
void emit_clamp(OnnxWriter& w, const jit::Node* n) {
  const std::string name = n->kind().toQualString();
  const bool only_max = name.rfind("aten::clamp_max", 0) == 0;
  const bool only_min = name.rfind("aten::clamp_min", 0) == 0;
  const auto bound = [&](size_t index, const char* stem) -> std::string {
    if (n->inputs().size() <= index) {
      return "";
    }
    const c10::IValue v = w.constant(n, index);
    if (v.isNone()) {
      return "";
    }
    if (!v.isScalar()) {
      w.unsupported(n, "only number bounds are written");
    }
    return w.initializer(stem, at::scalar_tensor(v.toScalar().toDouble(), at::kFloat));
  };
  const std::string lo = only_max ? "" : bound(1, "clip_min");
  const std::string hi = only_min ? "" : bound(only_max ? 1 : 2, "clip_max");
  w.emit(n, "Clip", {w.input(n, 0), lo, hi});
}

void emit_elu(OnnxWriter& w, const jit::Node* n) {
  // aten::elu(x, alpha, scale, input_scale): ONNX's Elu has alpha only.
  if (n->inputs().size() > 3 && (number(w, n, 2) != 1.0 || number(w, n, 3) != 1.0)) {
    w.unsupported(n, "elu with scale or input_scale other than 1 is not supported");
  }
  w.emit(n, "Elu", {w.input(n, 0)}, {{"alpha", number(w, n, 1)}});
}

// x * sigmoid(x): ONNX has no SiLU before opset 22 (Swish).
void emit_silu(OnnxWriter& w, const jit::Node* n) {
  const std::string x = w.input(n, 0);
  w.emit(n, "Mul", {x, w.step(n, "Sigmoid", {x})});
}

// x * relu6(x + 3) / 6: HardSwish from opset 14, x * HardSigmoid(x) before.
void emit_hardswish(OnnxWriter& w, const jit::Node* n) {
  const std::string x = w.input(n, 0);
  if (w.opset() >= 14) {
    w.emit(n, "HardSwish", {x});
    return;
  }
  const std::string gate = w.step(n, "HardSigmoid", {x}, {{"alpha", 1.0 / 6.0}, {"beta", 0.5}});
  w.emit(n, "Mul", {x, gate});
}

void emit_hardsigmoid(OnnxWriter& w, const jit::Node* n) {
  w.emit(n, "HardSigmoid", {w.input(n, 0)}, {{"alpha", 1.0 / 6.0}, {"beta", 0.5}});
}

// The exact GELU, x * (1 + erf(x / sqrt(2))) / 2 (ONNX has Gelu only from opset 20).
void emit_gelu(OnnxWriter& w, const jit::Node* n) {
  if (n->inputs().size() > 1) {
    const c10::IValue approximate = w.constant(n, 1);
    if (!approximate.isString() || approximate.toStringRef() != "none") {
      w.unsupported(n, "gelu with approximate='tanh' is not supported");
    }
  }
  gelu_steps(w, n, w.input(n, 0), /*last=*/true);
}

void emit_softplus(OnnxWriter& w, const jit::Node* n) {
  // aten::softplus(x, beta, threshold): above the threshold torch returns x, which Softplus
  // equals to float precision there (threshold 20 by default).
  if (n->inputs().size() > 1 && number(w, n, 1) != 1.0) {
    w.unsupported(n, "softplus with beta other than 1 is not supported");
  }
  unary(w, n, "Softplus");
}

void emit_softmax(OnnxWriter& w, const jit::Node* n) {
  const int64_t rank = w.tensor(n->input(0)).dim();
  const int64_t dim = w.constant(n, 1).toInt();
  const bool log = n->kind() == c10::Symbol::fromQualString("aten::log_softmax");
  w.emit(n, log ? "LogSoftmax" : "Softmax", {w.input(n, 0)}, {{"axis", normalized_axis(dim, rank)}});
}

// hardtanh(x, lo, hi) keeps 0 at 0 only when 0 is inside [lo, hi] (relu6 always does).
bool clip_keeps_zero(const jit::Node* n) {
  if (n->inputs().size() < 3) {
    return true;
  }
  const c10::optional<c10::IValue> lo = jit::toIValue(n->input(1));
  const c10::optional<c10::IValue> hi = jit::toIValue(n->input(2));
  return lo && hi && lo->isScalar() && hi->isScalar() && lo->toScalar().toDouble() <= 0 &&
         hi->toScalar().toDouble() >= 0;
}

}  // namespace

std::vector<OpSpec> activation_ops() {
  using C = Channels;
  return {
      {{"aten::relu", "aten::relu_"}, C::kZeroPreserving, emit_relu},
      {{"aten::relu6", "aten::relu6_"}, C::kZeroPreserving, emit_clip},
      {{"aten::hardtanh", "aten::hardtanh_"}, C::kZeroPreserving, emit_clip, -1, -1,
       clip_keeps_zero},
      {{"aten::leaky_relu", "aten::leaky_relu_"}, C::kZeroPreserving, emit_leaky_relu},
      {{"aten::elu", "aten::elu_"}, C::kZeroPreserving, emit_elu},
      {{"aten::gelu"}, C::kZeroPreserving, emit_gelu},
      {{"aten::silu", "aten::silu_"}, C::kZeroPreserving, emit_silu},
      {{"aten::hardswish", "aten::hardswish_"}, C::kZeroPreserving, emit_hardswish},
      {{"aten::tanh", "aten::tanh_"}, C::kZeroPreserving, emit_tanh},
      {{"aten::sigmoid", "aten::sigmoid_"}, C::kAligned, emit_sigmoid},
      {{"aten::hardsigmoid", "aten::hardsigmoid_"}, C::kAligned, emit_hardsigmoid},
      {{"aten::exp"}, C::kAligned, emit_exp},
      {{"aten::clamp", "aten::clamp_", "aten::clamp_min", "aten::clamp_min_", "aten::clamp_max",
        "aten::clamp_max_"},
       C::kAligned, emit_clamp},
      {{"aten::softplus"}, C::kAligned, emit_softplus},
      {{"aten::softmax", "aten::log_softmax"}, C::kAligned, emit_softmax, /*dim_arg=*/1},
      // Identities in eval (dropout's train flag is folded with self.training): no FLOPs.
      {{"aten::dropout", "aten::dropout_", "aten::feature_dropout", "aten::feature_dropout_",
        "aten::alpha_dropout", "aten::dropout2d", "aten::feature_alpha_dropout", "aten::detach",
        "aten::clone", "aten::contiguous"},
       C::kZeroPreserving, emit_identity, -1, -1, nullptr, ZeroRule::kBoth, nullptr, no_flops},
  };
}

std::string gelu_steps(OnnxWriter& w, const jit::Node* n, const std::string& x, bool last) {
  const auto scalar = [&](const char* stem, double v) {
    return w.initializer(stem, at::scalar_tensor(v, at::kFloat));
  };
  const std::string scaled = w.step(n, "Div", {x, scalar("sqrt2", std::sqrt(2.0))});
  const std::string erf = w.step(n, "Erf", {scaled});
  const std::string shifted = w.step(n, "Add", {erf, scalar("one", 1.0)});
  const std::string product = w.step(n, "Mul", {x, shifted});
  const std::vector<std::string> inputs = {product, scalar("half", 0.5)};
  return last ? w.emit(n, "Mul", inputs) : w.step(n, "Mul", inputs);
}

}  // namespace lithe::host::ops
