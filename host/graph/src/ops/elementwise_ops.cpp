// Element-wise binary ops over broadcast tensors (and scalars): a residual add, a gate's
// multiplication (squeeze-and-excitation), layer scale; and products of two activations.
#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

bool is(const jit::Node* n, const char* a, const char* b) {
  return n->kind() == c10::Symbol::fromQualString(a) || n->kind() == c10::Symbol::fromQualString(b);
}

void emit_binary(OnnxWriter& w, const jit::Node* n) {
  const bool additive = is(n, "aten::add", "aten::add_") || is(n, "aten::sub", "aten::sub_");
  if (additive && n->inputs().size() > 2) {
    const c10::IValue alpha = w.constant(n, 2);
    if (!alpha.isScalar() || alpha.toScalar().toDouble() != 1.0) {
      w.unsupported(n, "add/sub with alpha != 1 is not supported");
    }
  }
  if (is(n, "aten::div", "aten::div_") && n->inputs().size() > 2 && !w.constant(n, 2).isNone()) {
    w.unsupported(n, "div with a rounding mode is not supported");
  }
  const char* type = is(n, "aten::add", "aten::add_")   ? "Add"
                     : is(n, "aten::sub", "aten::sub_") ? "Sub"
                     : is(n, "aten::mul", "aten::mul_") ? "Mul"
                     : is(n, "aten::div", "aten::div_") ? "Div"
                     : is(n, "aten::maximum", "aten::maximum") ? "Max"
                                                               : "Min";
  w.emit(n, type, {w.input(n, 0), w.input(n, 1)});
}

// Matrix products of activations (attention scores, values): MatMul broadcasts like them.
// aten::einsum(equation, [a, b, ...], path): ONNX's Einsum takes the same equation (MaxViT's
// relative attention).
void emit_einsum(OnnxWriter& w, const jit::Node* n) {
  const c10::IValue equation = w.constant(n, 0);
  const std::optional<std::vector<const jit::Value*>> operands = list_items(n->input(1), n);
  if (!equation.isString() || !operands) {
    w.unsupported(n, "its equation or operand list is not known before running");
  }
  std::vector<std::string> inputs;
  for (const jit::Value* operand : *operands) {
    inputs.push_back(w.value(operand, n));
  }
  w.emit(n, "Einsum", inputs, {{"equation", equation.toStringRef()}});
}

void emit_matmul(OnnxWriter& w, const jit::Node* n) {
  w.emit(n, "MatMul", {w.input(n, 0), w.input(n, 1)});
}

}  // namespace

std::vector<OpSpec> elementwise_ops() {
  using C = Channels;
  return {
      {{"aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::maximum", "aten::minimum"},
       C::kBroadcast, emit_binary, -1, -1, nullptr, ZeroRule::kBoth},
      {{"aten::mul", "aten::mul_"}, C::kBroadcast, emit_binary, -1, -1, nullptr,
       ZeroRule::kEither},
      {{"aten::div", "aten::div_"}, C::kBroadcast, emit_binary, -1, -1, nullptr,
       ZeroRule::kFirst},
      // Mix channels (features) with another tensor's: channel flow keeps them.
      {{"aten::matmul", "aten::bmm"}, C::kUnknown, emit_matmul},
      {{"aten::einsum"}, C::kUnknown, emit_einsum},
  };
}

}  // namespace lithe::host::ops
