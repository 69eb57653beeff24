// Shape and layout ops, and the reads of shapes and scalars that make no activation.
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

void emit_permute(OnnxWriter& w, const jit::Node* n) {
  const int64_t rank = w.tensor(n->input(0)).dim();
  std::vector<int64_t> perm = w.ints(n, 1);
  for (int64_t& d : perm) {
    d = (d % rank + rank) % rank;
  }
  w.emit(n, "Transpose", {w.input(n, 0)}, {{"perm", perm}});
}

// aten::transpose(x, a, b): a permutation that swaps two axes.
void emit_transpose(OnnxWriter& w, const jit::Node* n) {
  const int64_t rank = w.tensor(n->input(0)).dim();
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d) {
    perm.push_back(d);
  }
  const int64_t a = (w.constant(n, 1).toInt() % rank + rank) % rank;
  const int64_t b = (w.constant(n, 2).toInt() % rank + rank) % rank;
  std::swap(perm[a], perm[b]);
  w.emit(n, "Transpose", {w.input(n, 0)}, {{"perm", perm}});
}

}  // namespace

std::vector<OpSpec> shape_ops() {
  using C = Channels;
  return {
      {{"aten::flatten", "aten::view", "aten::reshape"}, C::kReshape, emit_reshape},
      {{"aten::permute"}, C::kLayout, emit_permute},
      {{"aten::transpose"}, C::kLayout, emit_transpose},
      {{"aten::unsqueeze"}, C::kInsertAxis, nullptr, /*dim_arg=*/1},
      {{"aten::squeeze"}, C::kRemoveAxis, nullptr, /*dim_arg=*/1},
      {{"aten::size", "aten::dim", "prim::shape", "aten::len", "aten::numel", "prim::device",
        "prim::dtype", "aten::__isnot__", "aten::__is__"},
       C::kShapeQuery, nullptr},
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
