// Normalisations. BatchNorm is per channel (its running statistics and affine parameters shrink
// with the channels it normalises). LayerNorm normalises over the trailing axes: channel-last
// blocks (ConvNeXt, ViT, Swin) normalise over their channels, so those stay.
#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

// aten::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
void emit_batch_norm(OnnxWriter& w, const jit::Node* n) {
  const int64_t channels = w.tensor(n->input(0)).size(1);
  std::vector<std::string> inputs = {w.input(n, 0)};
  for (size_t i = 1; i <= 4; ++i) {
    if (w.present(n->input(i))) {
      inputs.push_back(w.input(n, i));
    } else if (i <= 2) {  // affine=False: γ = 1, β = 0
      inputs.push_back(w.initializer(i == 1 ? "bn_scale" : "bn_bias",
                                     i == 1 ? at::ones({channels}) : at::zeros({channels})));
    } else {
      w.unsupported(n, "BatchNorm without running statistics normalises with batch statistics, "
                       "which ONNX's BatchNormalization (inference) cannot express");
    }
  }
  w.emit(n, "BatchNormalization", inputs, {{"epsilon", w.constant(n, 7).toDouble()}});
}

// aten::layer_norm(x, normalized_shape, weight, bias, eps, cudnn_enable).
void emit_layer_norm(OnnxWriter& w, const jit::Node* n) {
  const int64_t rank = w.tensor(n->input(0)).dim();
  const std::vector<int64_t> shape = w.ints(n, 1);
  layer_norm_steps(w, n, w.input(n, 0), rank, shape, w.constant(n, 4).toDouble(),
                   w.present(n->input(2)) ? w.input(n, 2) : std::string(),
                   w.present(n->input(3)) ? w.input(n, 3) : std::string(), /*last=*/true);
}

}  // namespace

std::vector<OpSpec> normalization_ops() {
  using C = Channels;
  return {
      {{"aten::batch_norm"}, C::kBatchNorm, emit_batch_norm},
      {{"aten::layer_norm"}, C::kLayerNorm, emit_layer_norm},
  };
}

std::string layer_norm_steps(OnnxWriter& w, const jit::Node* n, const std::string& x,
                             int64_t rank, const std::vector<int64_t>& shape, double eps,
                             const std::string& weight, const std::string& bias, bool last) {
  const auto write = [&](const std::string& type, const std::vector<std::string>& inputs,
                         const std::vector<OnnxAttribute>& attributes = {}) {
    return last ? w.emit(n, type, inputs, attributes) : w.step(n, type, inputs, attributes);
  };
  const auto normalized = static_cast<int64_t>(shape.size());
  if (w.opset() >= 17) {
    std::vector<std::string> inputs = {x};
    inputs.push_back(!weight.empty() ? weight : w.initializer("ln_scale", at::ones(shape)));
    if (!bias.empty()) {
      inputs.push_back(bias);
    }
    return write("LayerNormalization", inputs, {{"axis", rank - normalized}, {"epsilon", eps}});
  }
  std::vector<int64_t> axes;
  for (int64_t a = rank - normalized; a < rank; ++a) {
    axes.push_back(a);
  }
  const std::string mean = w.step(n, "ReduceMean", {x}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  const std::string centred = w.step(n, "Sub", {x, mean});
  const std::string square = w.step(n, "Mul", {centred, centred});
  const std::string var = w.step(n, "ReduceMean", {square}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  const std::string shifted =
      w.step(n, "Add", {var, w.initializer("ln_eps", at::scalar_tensor(eps, at::kFloat))});
  const std::string deviation = w.step(n, "Sqrt", {shifted});
  if (weight.empty() && bias.empty()) {
    return write("Div", {centred, deviation});
  }
  std::string y = w.step(n, "Div", {centred, deviation});
  if (!weight.empty() && !bias.empty()) {
    y = w.step(n, "Mul", {y, weight});
    return write("Add", {y, bias});
  }
  return !weight.empty() ? write("Mul", {y, weight}) : write("Add", {y, bias});
}

}  // namespace lithe::host::ops
