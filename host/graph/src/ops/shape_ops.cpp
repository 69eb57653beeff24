// Shape and layout ops, and the reads of shapes and scalars that make no activation.
#include <torch/csrc/jit/ir/constants.h>

#include <limits>
#include <utility>

#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

// The target shape is the one the op produced on the export input (static shapes).
void emit_reshape(OnnxWriter& w, const jit::Node* n) {
  const at::Tensor& y = w.tensor(n->output());
  w.emit(n, "Reshape",
         {w.input(n, 0), w.initializer("shape", at::tensor(y.sizes().vec(), at::kLong))});
}

// aten::permute and aten::transpose: one Transpose with the permutation they apply.
void emit_layout(OnnxWriter& w, const jit::Node* n) {
  const std::optional<std::vector<int64_t>> perm =
      layout_permutation(n, w.tensor(n->input(0)).dim());
  if (!perm) {
    w.unsupported(n, "its axes are not constants");
  }
  w.emit(n, "Transpose", {w.input(n, 0)}, {{"perm", *perm}});
}

int64_t axis(OnnxWriter& w, const jit::Node* n, size_t index) {
  const int64_t rank = w.tensor(n->input(0)).dim();
  return normalized_axis(w.constant(n, index).toInt(), rank);
}

// aten::expand(x, size, implicit): to the output's static shape.
void emit_expand(OnnxWriter& w, const jit::Node* n) {
  const at::Tensor& y = w.tensor(n->output());
  w.emit(n, "Expand",
         {w.input(n, 0), w.initializer("shape", at::tensor(y.sizes().vec(), at::kLong))});
}

// aten::select(x, dim, index): Gather of one position, which drops the axis.
void emit_select(OnnxWriter& w, const jit::Node* n) {
  const int64_t dim = axis(w, n, 1);
  int64_t index = w.constant(n, 2).toInt();
  if (index < 0) {
    index += w.tensor(n->input(0)).size(dim);
  }
  w.emit(n, "Gather", {w.input(n, 0), w.initializer("index", at::scalar_tensor(index, at::kLong))},
         {{"axis", dim}});
}

// aten::slice(x, dim, start, end, step) of a tensor (x[:, 1:]).
void emit_slice(OnnxWriter& w, const jit::Node* n) {
  const int64_t dim = axis(w, n, 1);
  const c10::IValue start = w.constant(n, 2);
  const c10::IValue end = w.constant(n, 3);
  const int64_t step = w.constant(n, 4).toInt();
  const auto one = [&](const char* stem, int64_t v) {
    return w.initializer(stem, at::tensor(std::vector<int64_t>{v}, at::kLong));
  };
  w.emit(n, "Slice",
         {w.input(n, 0), one("starts", start.isNone() ? 0 : start.toInt()),
          one("ends", end.isNone() ? std::numeric_limits<int64_t>::max() : end.toInt()),
          one("axes", dim), one("steps", step)});
}

// x.chunk(n, dim) / x.split(size, dim) unpacked into tensors: one Split, with the items' sizes.
void emit_split(OnnxWriter& w, const jit::Node* n, const jit::Node* unpack) {
  const size_t dim_index = 2;
  const int64_t dim = axis(w, n, dim_index);
  std::vector<int64_t> sizes;
  std::vector<const jit::Value*> items;
  for (const jit::Value* item : unpack->outputs()) {
    sizes.push_back(w.tensor(item).size(dim));
    items.push_back(item);
  }
  w.emit_each(n, "Split", {w.input(n, 0), w.initializer("split", at::tensor(sizes, at::kLong))},
              items, {{"axis", dim}});
}

}  // namespace

std::vector<OpSpec> shape_ops() {
  using C = Channels;
  return {
      {{"aten::flatten", "aten::view", "aten::reshape"}, C::kReshape, emit_reshape},
      {{"aten::permute", "aten::transpose"}, C::kLayout, emit_layout},
      {{"aten::expand"}, C::kUnknown, emit_expand},
      {{"aten::select"}, C::kUnknown, emit_select},
      {{"aten::slice"}, C::kUnknown, emit_slice},
      {{"aten::chunk", "aten::split"}, C::kUnknown, nullptr, -1, -1, nullptr, ZeroRule::kBoth,
       emit_split},
      {{"aten::unsqueeze"}, C::kInsertAxis, nullptr, /*dim_arg=*/1},
      {{"aten::squeeze"}, C::kRemoveAxis, nullptr, /*dim_arg=*/1},
      {{"aten::size", "aten::dim", "prim::shape", "aten::len", "aten::numel", "prim::device",
        "prim::dtype", "aten::__isnot__", "aten::__is__"},
       C::kShapeQuery, nullptr},
      // Swin builds its shifted-window mask with x.new_zeros((H, W)): x's values (and channels)
      // do not reach the mask.
      {{"aten::new_zeros", "aten::new_ones", "aten::new_full", "aten::new_empty"}, C::kFresh,
       nullptr},
      {{"aten::warn", "aten::_assert_int_or_pair", "aten::format", "aten::__not__"}, C::kNone,
       nullptr},
      // Comparisons of scalars (a tensor result is not described).
      {{"aten::eq", "aten::ne"}, C::kNone, nullptr},
      // Reading a list or dict built in the graph gives the tensor stored there (ONNX: that
      // tensor's name); storing is structural, read back by item_value().
      {{"aten::__getitem__"}, C::kItem, nullptr},
      {{"aten::_set_item", "aten::dict"}, C::kNone, nullptr},
  };
}

}  // namespace lithe::host::ops
