// The op table: every family's entries by symbol, built once. A name claimed by two entries is a
// bug in the table and fails the first lookup (kInternal), so it cannot go unnoticed in a test.
#include "lithe/host/graph/op_table.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "families.h"
#include "lithe/sdk/error.h"

namespace lithe::host::ops {

namespace {

using Table = std::unordered_map<c10::Symbol, OpSpec>;

Table build() {
  Table table;
  for (std::vector<OpSpec> (*family)() :
       {activation_ops, convolution_ops, normalization_ops, elementwise_ops, pooling_ops,
        shape_ops, concat_ops, attention_ops}) {
    for (const OpSpec& spec : family()) {
      for (const char* name : spec.names) {
        const bool added = table.emplace(c10::Symbol::fromQualString(name), spec).second;
        LITHE_CHECK(added, sdk::Errc::kInternal, "the op table lists ", name, " twice");
      }
    }
  }
  return table;
}

}  // namespace

int64_t onnx_data_type(at::ScalarType type) {
  // TensorProto.DataType: FLOAT 1, UINT8 2, INT8 3, INT32 6, INT64 7, BOOL 9.
  switch (type) {
    case at::kByte: return 2;
    case at::kChar: return 3;
    case at::kInt: return 6;
    case at::kLong: return 7;
    case at::kBool: return 9;
    default: return at::isFloatingType(type) ? 1 : 0;
  }
}

const OpSpec* find_op(c10::Symbol kind) {
  static const Table table = build();
  const auto found = table.find(kind);
  return found == table.end() ? nullptr : &found->second;
}

bool reads_only_metadata(const torch::jit::Node* node) {
  static const c10::Symbol is_nested = c10::Symbol::fromQualString("prim::is_nested");
  const OpSpec* spec = find_op(node->kind());
  return (spec != nullptr && (spec->channels == Channels::kShapeQuery ||
                              spec->channels == Channels::kFresh)) ||
         node->kind() == c10::prim::is_cuda || node->kind() == is_nested;
}

int64_t no_flops(const OpCall& /*call*/) { return 0; }

bool selects_whole_axis(const torch::jit::Node* node, int64_t size) {
  // aten::slice.Tensor(self, dim, start, end, step)
  if (node->inputs().size() != 5) {
    return false;
  }
  const c10::optional<c10::IValue> start = torch::jit::toIValue(node->input(2));
  const c10::optional<c10::IValue> end = torch::jit::toIValue(node->input(3));
  const c10::optional<c10::IValue> step = torch::jit::toIValue(node->input(4));
  const bool from_first =
      start && (start->isNone() ||
                (start->isInt() && (start->toInt() == 0 || start->toInt() <= -size)));
  const bool to_last = end && (end->isNone() || (end->isInt() && end->toInt() >= size));
  return from_first && to_last && step && step->isInt() && step->toInt() == 1;
}

int64_t op_flops(const OpSpec& spec, const OpCall& call) {
  if (spec.flops != nullptr) {
    return spec.flops(call);
  }
  const auto numel = [](const at::Tensor* t) { return t != nullptr ? t->numel() : int64_t{0}; };
  switch (spec.channels) {
    case Channels::kZeroPreserving:
    case Channels::kAligned:
    case Channels::kBroadcast:
      return numel(call.output(0));
    case Channels::kSpatial:
    case Channels::kReduction:
      return numel(call.input(0));
    case Channels::kBatchNorm:
    case Channels::kLayerNorm:
      return 2 * numel(call.input(0));
    default:
      return 0;
  }
}

bool writes_input(const torch::jit::Node* user, size_t index) {
  const c10::FunctionSchema* schema = user->maybeSchema();
  if (schema == nullptr || index >= schema->arguments().size()) {
    return false;
  }
  const c10::AliasInfo* alias = schema->arguments()[index].alias_info();
  return alias != nullptr && alias->isWrite();
}

std::optional<std::vector<const torch::jit::Value*>> list_items(const torch::jit::Value* list,
                                                                const torch::jit::Node* reader) {
  const torch::jit::Node* maker = list->node();
  if (maker->kind() != c10::prim::ListConstruct) {
    return std::nullopt;
  }
  std::vector<const torch::jit::Value*> items(maker->inputs().begin(), maker->inputs().end());
  std::vector<const torch::jit::Node*> appends;
  static const c10::Symbol append = c10::Symbol::fromQualString("aten::append");
  for (const torch::jit::Use& use : list->uses()) {
    const torch::jit::Node* user = use.user;
    if (user->kind() == append && use.offset == 0) {
      if (user->owningBlock() != maker->owningBlock()) {
        return std::nullopt;  // appended in a branch or a loop: not known from the graph
      }
      if (user->isBefore(reader)) {
        appends.push_back(user);
      }
      continue;
    }
    // Anything else that may write the list (insert, pop, a call that takes it) hides it.
    const c10::FunctionSchema* schema = user->maybeSchema();
    const bool writes = schema == nullptr ||
                        (use.offset < schema->arguments().size() &&
                         schema->arguments()[use.offset].alias_info() != nullptr &&
                         schema->arguments()[use.offset].alias_info()->isWrite());
    if (writes && user->kind() != c10::prim::ListUnpack) {
      return std::nullopt;
    }
  }
  std::sort(appends.begin(), appends.end(),
            [](const torch::jit::Node* a, const torch::jit::Node* b) { return a->isBefore(b); });
  for (const torch::jit::Node* node : appends) {
    items.push_back(node->input(1));
  }
  return items;
}

std::optional<std::vector<int64_t>> constant_ints(const torch::jit::Value* value) {
  if (const c10::optional<c10::IValue> constant = torch::jit::toIValue(value)) {
    if (constant->isIntList()) {
      return constant->toIntVector();
    }
    if (constant->isInt()) {
      return std::vector<int64_t>{constant->toInt()};
    }
    return std::nullopt;
  }
  const torch::jit::Node* list = value->node();
  if (list->kind() != c10::prim::ListConstruct) {
    return std::nullopt;
  }
  std::vector<int64_t> out;
  for (const torch::jit::Value* item : list->inputs()) {
    const c10::optional<c10::IValue> constant = torch::jit::toIValue(item);
    if (!constant || !constant->isInt()) {
      return std::nullopt;
    }
    out.push_back(constant->toInt());
  }
  return out;
}

std::optional<std::vector<int64_t>> layout_permutation(const torch::jit::Node* node, int64_t rank) {
  static const c10::Symbol permute = c10::Symbol::fromQualString("aten::permute");
  std::vector<int64_t> perm;
  if (node->kind() == permute) {
    std::optional<std::vector<int64_t>> dims = constant_ints(node->input(1));
    if (!dims || static_cast<int64_t>(dims->size()) != rank) {
      return std::nullopt;
    }
    perm = std::move(*dims);
    for (int64_t& d : perm) {
      d = normalized_axis(d, rank);
    }
    return perm;
  }
  const c10::optional<c10::IValue> a = torch::jit::toIValue(node->input(1));
  const c10::optional<c10::IValue> b = torch::jit::toIValue(node->input(2));
  if (!a || !b || !a->isInt() || !b->isInt()) {
    return std::nullopt;
  }
  for (int64_t d = 0; d < rank; ++d) {
    perm.push_back(d);
  }
  std::swap(perm[static_cast<size_t>(normalized_axis(a->toInt(), rank))],
            perm[static_cast<size_t>(normalized_axis(b->toInt(), rank))]);
  return perm;
}

const torch::jit::Value* item_value(const torch::jit::Node* getitem) {
  if (getitem->inputs().size() != 2) {
    return nullptr;
  }
  const c10::optional<c10::IValue> key = torch::jit::toIValue(getitem->input(1));
  if (!key) {
    return nullptr;
  }
  const torch::jit::Value* container = getitem->input(0);
  const torch::jit::Node* maker = container->node();
  if (maker->kind() == c10::prim::ListConstruct) {
    const std::optional<std::vector<const torch::jit::Value*>> items =
        list_items(container, getitem);
    if (!items || !key->isInt()) {
      return nullptr;
    }
    const auto size = static_cast<int64_t>(items->size());
    const int64_t at = key->toInt() < 0 ? key->toInt() + size : key->toInt();
    return at >= 0 && at < size ? (*items)[static_cast<size_t>(at)] : nullptr;
  }
  // {...} literals, and OrderedDict() / dict() (aten::dict of nothing).
  static const c10::Symbol empty_dict = c10::Symbol::fromQualString("aten::dict");
  if (maker->kind() != c10::prim::DictConstruct &&
      !(maker->kind() == empty_dict && maker->inputs().empty())) {
    return nullptr;
  }
  static const c10::Symbol set_item = c10::Symbol::fromQualString("aten::_set_item");
  static const c10::Symbol get_item = c10::Symbol::fromQualString("aten::__getitem__");
  static const c10::Symbol contains = c10::Symbol::fromQualString("aten::__contains__");
  static const c10::Symbol len = c10::Symbol::fromQualString("aten::len");
  const auto same_key = [&](const torch::jit::Value* k) {
    const c10::optional<c10::IValue> v = torch::jit::toIValue(k);
    return v && *v == *key;
  };
  const torch::jit::Value* found = nullptr;
  for (size_t i = 0; i + 1 < maker->inputs().size(); i += 2) {
    if (same_key(maker->input(i))) {
      found = maker->input(i + 1);
    }
  }
  const torch::jit::Node* latest = nullptr;
  for (const torch::jit::Use& use : container->uses()) {
    const torch::jit::Node* user = use.user;
    if (user->kind() == set_item && use.offset == 0) {
      if (user->owningBlock() != maker->owningBlock() ||
          !torch::jit::toIValue(user->input(1)).has_value()) {
        return nullptr;  // stored in a branch or under a key not known here
      }
      if (user->isBefore(getitem) && same_key(user->input(1)) &&
          (latest == nullptr || latest->isBefore(user))) {
        latest = user;
      }
    } else if (user->kind() != get_item && user->kind() != contains && user->kind() != len) {
      return nullptr;  // passed on (or returned): what it holds later is not ours to know
    }
  }
  return latest != nullptr ? latest->input(2) : found;
}

}  // namespace lithe::host::ops
