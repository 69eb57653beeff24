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

// aten::layer_norm(x, normalized_shape, weight, bias, eps, cudnn_enable): LayerNormalization from
// opset 17; before it, (x - mean) / sqrt(var + eps) * weight + bias over the trailing axes.
void emit_layer_norm(OnnxWriter& w, const jit::Node* n) {
  const int64_t rank = w.tensor(n->input(0)).dim();
  const int64_t normalized = static_cast<int64_t>(w.ints(n, 1).size());
  const double eps = w.constant(n, 4).toDouble();
  const bool has_weight = w.present(n->input(2));
  const bool has_bias = w.present(n->input(3));
  const std::string x = w.input(n, 0);
  if (w.opset() >= 17) {
    std::vector<std::string> inputs = {x};
    const std::vector<int64_t> shape = w.ints(n, 1);
    inputs.push_back(has_weight ? w.input(n, 2) : w.initializer("ln_scale", at::ones(shape)));
    if (has_bias) {
      inputs.push_back(w.input(n, 3));
    }
    w.emit(n, "LayerNormalization", inputs, {{"axis", rank - normalized}, {"epsilon", eps}});
    return;
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
  if (!has_weight && !has_bias) {
    w.emit(n, "Div", {centred, deviation});
    return;
  }
  std::string y = w.step(n, "Div", {centred, deviation});
  if (has_weight && has_bias) {
    y = w.step(n, "Mul", {y, w.input(n, 2)});
    w.emit(n, "Add", {y, w.input(n, 3)});
  } else if (has_weight) {
    w.emit(n, "Mul", {y, w.input(n, 2)});
  } else {
    w.emit(n, "Add", {y, w.input(n, 3)});
  }
}

}  // namespace

std::vector<OpSpec> normalization_ops() {
  using C = Channels;
  return {
      {{"aten::batch_norm"}, C::kBatchNorm, emit_batch_norm},
      {{"aten::layer_norm"}, C::kLayerNorm, emit_layer_norm},
  };
}

}  // namespace lithe::host::ops
