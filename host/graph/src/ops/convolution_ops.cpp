// Convolutions and Linear: the layers whose weights map input channels (features) to output
// channels. Their channel flow (through the weight, grouped and depthwise included) is the core
// of speedup's channel_flow; here they state their kind and their ONNX form.
#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

// aten::conv1d/2d/3d(x, w, b, stride, padding, dilation, groups) and aten::_convolution /
// aten::convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups, ...).
void emit_conv(OnnxWriter& w, const jit::Node* n) {
  const bool plain = n->kind() != c10::Symbol::fromQualString("aten::_convolution") &&
                     n->kind() != c10::Symbol::fromQualString("aten::convolution");
  if (!plain && w.constant(n, 6).toBool()) {
    w.unsupported(n, "transposed convolutions are not supported");
  }
  if (plain && n->input(4)->type()->kind() == c10::TypeKind::StringType) {
    w.unsupported(n, "padding given as a string is not supported");
  }
  const at::Tensor& weight = w.tensor(n->input(1));
  const int64_t spatial = weight.dim() - 2;
  if (spatial < 1 || spatial > 3) {
    w.unsupported(n, "only 1-d, 2-d and 3-d convolutions are supported");
  }
  std::vector<std::string> inputs = {w.input(n, 0), w.input(n, 1)};
  if (w.present(n->input(2))) {
    inputs.push_back(w.input(n, 2));
  }
  // ATen gives one value per spatial axis (or one for all); ONNX wants begin and end pads.
  const auto per_axis = [&](std::vector<int64_t> v) {
    if (v.size() == 1) {
      v.assign(static_cast<size_t>(spatial), v.front());
    }
    if (static_cast<int64_t>(v.size()) != spatial) {
      w.unsupported(n, "its stride, padding or dilation does not match the kernel's rank");
    }
    return v;
  };
  std::vector<int64_t> pads = per_axis(w.ints(n, 4));
  pads.insert(pads.end(), pads.begin(), pads.end());
  w.emit(n, "Conv", inputs,
         {{"kernel_shape", std::vector<int64_t>(weight.sizes().begin() + 2, weight.sizes().end())},
          {"strides", per_axis(w.ints(n, 3))},
          {"pads", pads},
          {"dilations", per_axis(w.ints(n, 5))},
          {"group", w.constant(n, plain ? 6 : 8).toInt()}});
}

// x @ Wᵀ + b: Gemm for 2-d inputs, MatMul (+ Add) for inputs of any rank.
void emit_linear(OnnxWriter& w, const jit::Node* n) {
  const bool has_bias = w.present(n->input(2));
  if (w.tensor(n->input(0)).dim() == 2) {
    std::vector<std::string> inputs = {w.input(n, 0), w.input(n, 1)};
    if (has_bias) {
      inputs.push_back(w.input(n, 2));
    }
    w.emit(n, "Gemm", inputs, {{"transB", int64_t{1}}});
    return;
  }
  // A quantized weight is transposed after its DequantizeLinear; a float one ahead of time.
  const std::string transposed =
      w.weight_is_quantized(n)
          ? w.step(n, "Transpose", {w.input(n, 1)}, {{"perm", std::vector<int64_t>{1, 0}}})
          : w.initializer("weight_t", w.tensor(n->input(1)).t());
  if (!has_bias) {
    w.emit(n, "MatMul", {w.input(n, 0), transposed});
    return;
  }
  const std::string product = w.step(n, "MatMul", {w.input(n, 0), transposed});
  w.emit(n, "Add", {product, w.input(n, 2)});
}

// One multiply-accumulate per kernel element and input channel of a group, per output value
// (per input value for a transposed convolution), plus one per output value for a bias.
int64_t conv_flops(const OpCall& call) {
  const at::Tensor* x = call.input(0);
  const at::Tensor* weight = call.input(1);
  const at::Tensor* y = call.output(0);
  if (x == nullptr || weight == nullptr || y == nullptr || weight->dim() < 2) {
    return 0;
  }
  const jit::Node* n = call.node;
  const bool plain = n->kind() != c10::Symbol::fromQualString("aten::_convolution") &&
                     n->kind() != c10::Symbol::fromQualString("aten::convolution");
  const c10::optional<c10::IValue> transposed =
      plain ? c10::nullopt : jit::toIValue(n->input(6));
  const int64_t kernel = weight->numel() / (weight->size(0) * weight->size(1));
  const at::Tensor* bias = call.input(2);
  const int64_t bias_flops = bias != nullptr && bias->defined() ? y->numel() : 0;
  if (transposed && transposed->isBool() && transposed->toBool()) {
    return x->numel() * weight->size(1) * kernel + bias_flops;
  }
  return y->numel() * weight->size(1) * kernel + bias_flops;
}

// One multiply-accumulate per input feature, per output value, plus the bias.
int64_t linear_flops(const OpCall& call) {
  const at::Tensor* weight = call.input(1);
  const at::Tensor* y = call.output(0);
  if (weight == nullptr || y == nullptr || weight->dim() != 2) {
    return 0;
  }
  const at::Tensor* bias = call.input(2);
  return y->numel() * weight->size(1) + (bias != nullptr && bias->defined() ? y->numel() : 0);
}

}  // namespace

std::vector<OpSpec> convolution_ops() {
  using C = Channels;
  OpSpec conv{{"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution",
               "aten::convolution"},
              C::kConvolution, emit_conv};
  conv.flops = conv_flops;
  OpSpec linear{{"aten::linear"}, C::kLinear, emit_linear};
  linear.flops = linear_flops;
  return {conv, linear};
}

}  // namespace lithe::host::ops
