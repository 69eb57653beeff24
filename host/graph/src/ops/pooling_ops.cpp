// Pooling, resampling and reductions over the spatial axes: each output channel is computed from
// the same input channel alone, and an all-zero channel stays all zero.
#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

// aten::max_pool2d(x, kernel, stride, padding, dilation, ceil_mode) and
// aten::avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override).
// max_pool1d/2d/3d(x, kernel, stride, padding, dilation, ceil_mode) and
// avg_pool1d/2d/3d(x, kernel, stride, padding, ceil_mode, count_include_pad[, divisor]): one
// value per spatial axis (a single value stands for all of them; an empty stride is the kernel).
void emit_pool(OnnxWriter& w, const jit::Node* n) {
  const std::string name = n->kind().toQualString();
  const bool max = name.rfind("aten::max_pool", 0) == 0;
  const size_t spatial = static_cast<size_t>(w.tensor(n->input(0)).dim() - 2);
  const auto per_axis = [&](size_t index, const std::vector<int64_t>& fallback) {
    std::vector<int64_t> v = w.ints(n, index);
    if (v.empty()) {
      v = fallback;
    }
    if (v.size() == 1) {
      v.assign(spatial, v[0]);
    }
    if (v.size() != spatial) {
      w.unsupported(n, "argument " + std::to_string(index) + " does not give one value per "
                       "spatial axis");
    }
    return v;
  };
  const std::vector<int64_t> kernel = per_axis(1, {});
  const std::vector<int64_t> stride = per_axis(2, kernel);
  std::vector<int64_t> pads = per_axis(3, {0});
  pads.insert(pads.end(), pads.begin(), pads.end());  // ONNX: every axis's begin, then its end
  std::vector<OnnxAttribute> attributes = {
      {"kernel_shape", kernel}, {"strides", stride}, {"pads", pads}};
  if (max) {
    attributes.push_back({"dilations", per_axis(4, {1})});
    attributes.push_back({"ceil_mode", int64_t{w.constant(n, 5).toBool() ? 1 : 0}});
  } else {
    attributes.push_back({"ceil_mode", int64_t{w.constant(n, 4).toBool() ? 1 : 0}});
    attributes.push_back({"count_include_pad", int64_t{w.constant(n, 5).toBool() ? 1 : 0}});
    if (n->inputs().size() > 6 && !w.constant(n, 6).isNone()) {
      w.unsupported(n, name.substr(6) + " with divisor_override is not supported");
    }
  }
  w.emit(n, max ? "MaxPool" : "AveragePool", {w.input(n, 0)}, attributes);
}

// The [out, in] matrix whose rows average adaptive pooling's windows along one axis: window i
// is [floor(i·in/out), ceil((i+1)·in/out)), as ATen computes it.
at::Tensor pooling_matrix(int64_t in, int64_t out) {
  at::Tensor m = at::zeros({out, in});
  for (int64_t i = 0; i < out; ++i) {
    const int64_t start = (i * in) / out;
    const int64_t end = ((i + 1) * in + out - 1) / out;
    m.select(0, i).slice(0, start, end).fill_(1.0 / static_cast<double>(end - start));
  }
  return m;
}

void emit_adaptive_avg_pool(OnnxWriter& w, const jit::Node* n) {
  const at::Tensor& x = w.tensor(n->input(0));
  const at::Tensor& y = w.tensor(n->output());
  bool global = x.dim() >= 3;
  for (int64_t d = 2; d < y.dim(); ++d) {
    global = global && y.size(d) == 1;
  }
  if (global) {
    w.emit(n, "GlobalAveragePool", {w.input(n, 0)});
    return;
  }
  if (x.dim() != 4) {
    w.unsupported(n, "adaptive average pooling to a size other than 1 is supported in 2-d only");
  }
  if (x.size(2) % y.size(2) == 0 && x.size(3) % y.size(3) == 0) {
    const std::vector<int64_t> k = {x.size(2) / y.size(2), x.size(3) / y.size(3)};
    w.emit(n, "AveragePool", {w.input(n, 0)}, {{"kernel_shape", k}, {"strides", k}});
    return;
  }
  // Windows of uneven size (or an output larger than the input): y = P_h · x · P_wᵀ, two
  // MatMuls over the last two axes with the exact averaging weights.
  const std::string rows = w.step(
      n, "MatMul",
      {w.input(n, 0), w.initializer("pool_w", pooling_matrix(x.size(3), y.size(3)).t().contiguous())});
  w.emit(n, "MatMul", {w.initializer("pool_h", pooling_matrix(x.size(2), y.size(2))), rows});
}

// aten::upsample_bilinear2d(x, output_size, align_corners, scale_factors) and
// aten::upsample_nearest2d(x, output_size, scale_factors) (F.interpolate): ONNX Resize to the
// output's static size, with PyTorch's coordinate mapping.
void emit_resize(OnnxWriter& w, const jit::Node* n) {
  const bool bilinear = n->kind() == c10::Symbol::fromQualString("aten::upsample_bilinear2d");
  const at::Tensor& y = w.tensor(n->output());
  const std::string sizes = w.initializer("sizes", at::tensor(y.sizes().vec(), at::kLong));
  std::vector<OnnxAttribute> attributes;
  if (bilinear) {
    const bool corners = w.constant(n, 2).toBool();
    attributes = {{"mode", std::string("linear")},  // op-name: ONNX Resize's mode
                  {"coordinate_transformation_mode",
                   std::string(corners ? "align_corners" : "pytorch_half_pixel")}};
  } else {
    attributes = {{"mode", std::string("nearest")},
                  {"coordinate_transformation_mode", std::string("asymmetric")},
                  {"nearest_mode", std::string("floor")}};
  }
  w.emit(n, "Resize", {w.input(n, 0), "", "", sizes}, attributes);
}

// NNI's per-output-value cost of resampling (count_flops_params' Upsample rule): 11 for
// bilinear, 0 for nearest.
int64_t resize_flops(const OpCall& call) {
  const at::Tensor* y = call.output(0);
  const bool bilinear =
      call.node->kind() == c10::Symbol::fromQualString("aten::upsample_bilinear2d");
  return y == nullptr || !bilinear ? 0 : 11 * y->numel();
}

// aten::mean(x, dims, keepdim, dtype)
void emit_mean(OnnxWriter& w, const jit::Node* n) {
  w.emit(n, "ReduceMean", {w.input(n, 0)},
         {{"axes", w.ints(n, 1)}, {"keepdims", int64_t{w.constant(n, 2).toBool() ? 1 : 0}}});
}

// aten::norm(x, p, dims, keepdim) with p = 1 or 2 (F.normalize; Swin v2's cosine attention):
// ReduceL1 / ReduceL2 over the axes.
void emit_norm(OnnxWriter& w, const jit::Node* n) {
  const c10::IValue p = w.constant(n, 1);
  const double order = p.isNone() ? 2.0 : p.toScalar().toDouble();
  if ((order != 1.0 && order != 2.0) || n->inputs().size() < 4) {
    w.unsupported(n, "only the 1- and 2-norm over given axes are written");
  }
  const int64_t rank = w.tensor(n->input(0)).dim();
  std::vector<int64_t> axes = w.ints(n, 2);
  for (int64_t& a : axes) {
    a = normalized_axis(a, rank);
  }
  w.emit(n, order == 1.0 ? "ReduceL1" : "ReduceL2", {w.input(n, 0)},
         {{"axes", axes}, {"keepdims", int64_t{w.constant(n, 3).toBool() ? 1 : 0}}});
}

}  // namespace

std::vector<OpSpec> pooling_ops() {
  using C = Channels;
  return {
      {{"aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d", "aten::avg_pool1d",
        "aten::avg_pool2d", "aten::avg_pool3d"},
       C::kSpatial, emit_pool},
      {{"aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d"},
       C::kSpatial, emit_adaptive_avg_pool},
      {{"aten::adaptive_max_pool2d",
        "aten::max_pool2d_with_indices"},
       C::kSpatial, nullptr},
      {{"aten::upsample_bilinear2d", "aten::upsample_nearest2d"}, C::kSpatial, emit_resize, -1,
       -1, nullptr, ZeroRule::kBoth, nullptr, resize_flops},
      // mean / sum / amax(x, dims, keepdim, ...)
      {{"aten::mean"}, C::kReduction, emit_mean, /*dim_arg=*/1, /*keepdim_arg=*/2},
      {{"aten::norm"}, C::kReduction, emit_norm, /*dim_arg=*/2, /*keepdim_arg=*/3},
      {{"aten::sum", "aten::amax"}, C::kReduction, nullptr, 1, 2},
  };
}

}  // namespace lithe::host::ops
