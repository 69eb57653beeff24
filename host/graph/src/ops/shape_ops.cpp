// Shape and layout ops, and the reads of shapes and scalars that make no activation.
#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
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

// aten::index(x, [None, ..., idx]) with one integer index tensor (Swin's
// relative_position_bias_table[relative_position_index]): a Gather along that axis. Boolean
// masks and several index tensors (advanced indexing that broadcasts them) are not written.
void emit_index(OnnxWriter& w, const jit::Node* n) {
  const std::optional<std::vector<const jit::Value*>> items = list_items(n->input(1), n);
  if (!items) {
    // Indices that shapes alone decide were folded into a constant list (MViT's relative
    // distances, torch.arange(q_h)[:, None] - ...): its one tensor is written as an initializer.
    const c10::optional<c10::IValue> constant = jit::toIValue(n->input(1));
    if (!constant || !constant->isList()) {
      w.unsupported(n, "its index list is not built in the graph");
    }
    const c10::List<c10::IValue> list = constant->toList();
    std::optional<int64_t> axis;
    at::Tensor index;
    for (size_t i = 0; i < list.size(); ++i) {
      const c10::IValue item = list.get(i);
      if (item.isNone()) {
        continue;
      }
      if (axis.has_value() || !item.isTensor()) {
        w.unsupported(n, "it indexes with more than one tensor");
      }
      axis = static_cast<int64_t>(i);
      index = item.toTensor();
    }
    if (!axis.has_value()) {
      w.unsupported(n, "it has no index tensor");
    }
    if (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt) {
      w.unsupported(n, std::string("its index tensor is ") + c10::toString(index.scalar_type()) +
                           " (only integer indices are written; a mask is not)");
    }
    w.emit(n, "Gather", {w.input(n, 0), w.initializer("index", index.contiguous())},
           {{"axis", *axis}});
    return;
  }
  std::optional<int64_t> axis;
  for (size_t i = 0; i < items->size(); ++i) {
    if ((*items)[i]->type()->kind() == c10::TypeKind::NoneType) {
      continue;
    }
    if (axis.has_value()) {
      w.unsupported(n, "it indexes with more than one tensor");
    }
    axis = static_cast<int64_t>(i);
  }
  if (!axis.has_value()) {
    w.unsupported(n, "it has no index tensor");
  }
  const jit::Value* index = (*items)[static_cast<size_t>(*axis)];
  const c10::ScalarType type = w.tensor(index).scalar_type();
  if (type != at::kLong && type != at::kInt) {
    w.unsupported(n, std::string("its index tensor is ") + c10::toString(type) +
                         " (only integer indices are written; a mask is not)");
  }
  w.emit(n, "Gather", {w.input(n, 0), w.value(index, n)}, {{"axis", *axis}});
}

// aten::unsqueeze(x, dim) / aten::squeeze(x[, dim]): the axes as an initializer (opset 13+).
// squeeze without a dim removes every axis of size 1 in the export input's shape.
void emit_unsqueeze(OnnxWriter& w, const jit::Node* n) {
  const int64_t rank = w.tensor(n->output()).dim();
  const int64_t dim = normalized_axis(w.constant(n, 1).toInt(), rank);
  w.emit(n, "Unsqueeze",
         {w.input(n, 0), w.initializer("axes", at::tensor(std::vector<int64_t>{dim}, at::kLong))});
}

void emit_squeeze(OnnxWriter& w, const jit::Node* n) {
  const at::Tensor& x = w.tensor(n->input(0));
  std::vector<int64_t> axes;
  if (n->inputs().size() >= 2) {
    const int64_t dim = normalized_axis(w.constant(n, 1).toInt(), std::max<int64_t>(x.dim(), 1));
    if (x.dim() == 0 || x.size(dim) != 1) {
      w.emit(n, "Identity", {w.input(n, 0)});  // squeezing an axis that is not 1 keeps it
      return;
    }
    axes.push_back(dim);
  } else {
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (x.size(d) == 1) {
        axes.push_back(d);
      }
    }
  }
  w.emit(n, "Squeeze", {w.input(n, 0), w.initializer("axes", at::tensor(axes, at::kLong))});
}

// F.pad: aten::pad(x, pad, mode, value) and aten::constant_pad_nd(x, pad, value). torch lists
// (before, after) pairs from the last axis backwards; ONNX wants every axis's befores, then
// every axis's afters.
// A pad computed from sizes (Swin pads to a multiple of its window: (0, 0, 0, pad_r, 0, pad_b))
// is read from the shapes the export input gives: each pair's total is the axis's growth, so
// one constant in the pair fixes the other.
std::vector<int64_t> pad_list(OnnxWriter& w, const jit::Node* n) {
  if (const std::optional<std::vector<int64_t>> constant = constant_ints(n->input(1))) {
    return *constant;
  }
  const std::optional<std::vector<const jit::Value*>> items = list_items(n->input(1), n);
  if (!items || items->size() % 2 != 0) {
    w.unsupported(n, "its pad list is not known before running");
  }
  const at::Tensor& x = w.tensor(n->input(0));
  const at::Tensor& y = w.tensor(n->output());
  std::vector<int64_t> pad(items->size());
  for (size_t i = 0; i + 1 < items->size(); i += 2) {
    const int64_t axis = x.dim() - 1 - static_cast<int64_t>(i / 2);
    if (axis < 0) {
      w.unsupported(n, "its pad list is longer than the input's rank allows");
    }
    const int64_t total = y.size(axis) - x.size(axis);
    const c10::optional<c10::IValue> before = jit::toIValue((*items)[i]);
    const c10::optional<c10::IValue> after = jit::toIValue((*items)[i + 1]);
    if (before && before->isInt()) {
      pad[i] = before->toInt();
      pad[i + 1] = total - pad[i];
    } else if (after && after->isInt()) {
      pad[i + 1] = after->toInt();
      pad[i] = total - pad[i + 1];
    } else {
      w.unsupported(n, "both pads of one axis are computed while running");
    }
  }
  return pad;
}

void emit_pad(OnnxWriter& w, const jit::Node* n) {
  const int64_t rank = w.tensor(n->input(0)).dim();
  const std::vector<int64_t> pad = pad_list(w, n);
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size()) > 2 * rank) {
    w.unsupported(n, "its pad list does not fit the input's rank");
  }
  std::vector<int64_t> pads(static_cast<size_t>(2 * rank), 0);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const size_t axis = static_cast<size_t>(rank) - 1 - i;
    pads[axis] = pad[2 * i];
    pads[static_cast<size_t>(rank) + axis] = pad[2 * i + 1];
  }
  std::string mode = "constant";
  size_t value_index = 2;
  if (n->kind() == c10::Symbol::fromQualString("aten::pad")) {
    const std::string torch_mode = w.constant(n, 2).toStringRef();
    if (torch_mode == "reflect") {
      mode = "reflect";
    } else if (torch_mode == "replicate") {
      mode = "edge";
    } else if (torch_mode != "constant") {
      w.unsupported(n, "padding mode '" + torch_mode + "' has no ONNX Pad mode");
    }
    value_index = 3;
  }
  double value = 0.0;
  if (n->inputs().size() > value_index) {
    const c10::IValue v = w.constant(n, value_index);
    value = v.isNone() ? 0.0 : v.toScalar().toDouble();
  }
  const at::Tensor& x = w.tensor(n->input(0));
  w.emit(n, "Pad",
         {w.input(n, 0), w.initializer("pads", at::tensor(pads, at::kLong)),
          w.initializer("value", at::scalar_tensor(value, x.scalar_type()))},
         {{"mode", mode}});
}

// aten::roll(x, shifts, dims) (Swin's shifted windows): per axis, the last `shift` positions
// moved to the front — two Slices and a Concat, since ONNX has no Roll.
void emit_roll(OnnxWriter& w, const jit::Node* n) {
  const at::Tensor& x = w.tensor(n->input(0));
  const std::vector<int64_t> shifts = w.ints(n, 1);
  const std::vector<int64_t> dims = w.ints(n, 2);
  if (dims.empty() || shifts.size() != dims.size()) {
    w.unsupported(n, "a roll without one dim per shift (of the flattened tensor) is not written");
  }
  const auto one = [&](const char* stem, int64_t v) {
    return w.initializer(stem, at::tensor(std::vector<int64_t>{v}, at::kLong));
  };
  std::string current = w.input(n, 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t dim = normalized_axis(dims[i], x.dim());
    const int64_t size = x.size(dim);
    const int64_t shift = size == 0 ? 0 : ((shifts[i] % size) + size) % size;
    std::string rolled = current;
    if (shift != 0) {
      const std::string tail = w.step(n, "Slice", {current, one("starts", size - shift),
                                                   one("ends", size), one("axes", dim)});
      const std::string head = w.step(n, "Slice", {current, one("starts", 0),
                                                   one("ends", size - shift), one("axes", dim)});
      rolled = w.step(n, "Concat", {tail, head}, {{"axis", dim}});
    }
    current = rolled;
  }
  w.emit(n, "Identity", {current});
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

// x.chunk(n, dim) / x.split(size, dim) / x.tensor_split(indices, dim) unpacked into tensors: one
// Split, with the items' sizes.
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

// x.unbind(dim) unpacked into tensors (MViT's `q, k, v = qkv.unbind(dim=2)`): item i is
// Gather with the scalar index i along dim, which drops that axis as unbind does.
void emit_unbind(OnnxWriter& w, const jit::Node* n, const jit::Node* unpack) {
  const int64_t dim = axis(w, n, 1);
  for (size_t i = 0; i < unpack->outputs().size(); ++i) {
    w.emit_each(n, "Gather",
                {w.input(n, 0),
                 w.initializer("index", at::scalar_tensor(static_cast<int64_t>(i), at::kLong))},
                {unpack->output(i)}, {{"axis", dim}});
  }
}

// aten::slice(x, dim, start, end, step): per channel along every axis but the channel axis it
// cuts (a spatial crop, a class token dropped); data movement, no FLOPs.
OpSpec slice_op() {
  OpSpec slice{{"aten::slice"}, Channels::kZeroPreserving, emit_slice, /*dim_arg=*/1};
  slice.selects = true;
  slice.flops = no_flops;
  return slice;
}

}  // namespace

std::vector<OpSpec> shape_ops() {
  using C = Channels;
  return {
      {{"aten::flatten", "aten::view", "aten::reshape"}, C::kReshape, emit_reshape},
      // x.unflatten(dim, sizes) (nn.MultiheadAttention's packed projections in torch 2.x): a
      // reshape to its static output shape; its channels are not followed (its arguments are
      // not view's).
      {{"aten::unflatten"}, C::kUnknown, emit_reshape},
      {{"aten::permute", "aten::transpose"}, C::kLayout, emit_layout},
      {{"aten::expand", "aten::expand_as"}, C::kUnknown, emit_expand},
      {{"aten::select"}, C::kUnknown, emit_select},
      slice_op(),
      {{"aten::index"}, C::kUnknown, emit_index},
      {{"aten::pad", "aten::constant_pad_nd"}, C::kUnknown, emit_pad},
      {{"aten::roll"}, C::kUnknown, emit_roll},
      {{"aten::chunk", "aten::split", "aten::tensor_split"}, C::kUnknown, nullptr, -1, -1,
       nullptr, ZeroRule::kBoth, emit_split},
      {{"aten::unbind"}, C::kUnknown, nullptr, -1, -1, nullptr, ZeroRule::kBoth, emit_unbind},
      {{"aten::unsqueeze"}, C::kInsertAxis, emit_unsqueeze, /*dim_arg=*/1},
      {{"aten::squeeze"}, C::kRemoveAxis, emit_squeeze, /*dim_arg=*/1},
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
