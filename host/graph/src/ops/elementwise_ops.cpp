// Element-wise binary ops over broadcast tensors (and scalars): a residual add, a gate's
// multiplication (squeeze-and-excitation), layer scale; and products of two activations.
#include "families.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

bool is(const jit::Node* n, const char* a, const char* b) {
  return n->kind() == c10::Symbol::fromQualString(a) || n->kind() == c10::Symbol::fromQualString(b);
}

// Operand `i` of an element-wise op in the result's type. ONNX's Add, Mul, ... take one type
// where torch promotes (MViT's int64 torch.arange(q_h) times a float ratio is float): a scalar
// is written in the result's type and a tensor of another type is cast to it.
std::string operand(OnnxWriter& w, const jit::Node* n, size_t i) {
  const at::ScalarType result = w.tensor(n->output()).scalar_type();
  const c10::optional<c10::IValue> constant = jit::toIValue(n->input(i));
  if (constant && (constant->isDouble() || constant->isInt() || constant->isBool())) {
    return w.initializer("scalar", at::scalar_tensor(constant->toScalar(), result));
  }
  const std::string name = w.input(n, i);
  const at::ScalarType type = w.tensor(n->input(i)).scalar_type();
  if (type == result) {
    return name;
  }
  const int64_t to = onnx_data_type(result);
  if (to == 0) {
    w.unsupported(n, std::string("its result is ") + c10::toString(result) +
                         ", a type the ONNX export does not write");
  }
  return w.step(n, "Cast", {name}, {{"to", to}});
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
  w.emit(n, type, {operand(w, n, 0), operand(w, n, 1)});
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

// One multiply-accumulate per output value and element of the contracted axis (the first
// operand's last).
int64_t matmul_flops(const OpCall& call) {
  const at::Tensor* a = call.input(0);
  const at::Tensor* y = call.output(0);
  return a == nullptr || y == nullptr || a->dim() == 0 ? 0 : y->numel() * a->size(-1);
}

// One multiply-accumulate per combination of the equation's index values: the product of the
// sizes of its distinct letters (and of the axes an ellipsis stands for).
int64_t einsum_flops(const OpCall& call) {
  const c10::optional<c10::IValue> equation = jit::toIValue(call.node->input(0));
  const std::optional<std::vector<const jit::Value*>> operands =
      list_items(call.node->input(1), call.node);
  if (!equation || !equation->isString() || !operands) {
    return 0;
  }
  const std::string& text = equation->toStringRef();
  const std::string inputs = text.substr(0, text.find("->"));
  std::map<char, int64_t> sizes;
  int64_t ellipsis = 1;
  size_t start = 0;
  for (const jit::Value* operand : *operands) {
    const size_t end = std::min(inputs.find(',', start), inputs.size());
    const std::string subscripts = inputs.substr(start, end - start);
    start = end + 1;
    const at::Tensor* t = call.tensor(operand);
    if (t == nullptr) {
      return 0;
    }
    const size_t dots = subscripts.find("...");
    int64_t letters = 0;
    for (const char c : subscripts) {
      letters += std::isalpha(static_cast<unsigned char>(c)) ? 1 : 0;
    }
    const int64_t covered = t->dim() - letters;  // axes the ellipsis stands for
    int64_t axis = 0;
    for (size_t i = 0; i < subscripts.size(); ++i) {
      if (dots != std::string::npos && i == dots) {
        int64_t product = 1;
        for (int64_t k = 0; k < covered; ++k) {
          product *= t->size(axis + k);
        }
        ellipsis = std::max(ellipsis, product);
        axis += covered;
        i += 2;
      } else if (std::isalpha(static_cast<unsigned char>(subscripts[i])) && axis < t->dim()) {
        sizes[subscripts[i]] = std::max(sizes[subscripts[i]], t->size(axis++));
      }
    }
  }
  int64_t flops = ellipsis;
  for (const auto& [letter, size] : sizes) {
    flops *= size;
  }
  return flops;
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
      {{"aten::matmul", "aten::bmm"}, C::kUnknown, emit_matmul, -1, -1, nullptr,
       ZeroRule::kBoth, nullptr, matmul_flops},
      {{"aten::einsum"}, C::kUnknown, emit_einsum, -1, -1, nullptr, ZeroRule::kBoth, nullptr,
       einsum_flops},
  };
}

}  // namespace lithe::host::ops
