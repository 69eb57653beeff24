#pragma once
// The tensors a loaded model or value holds, checked against their storages: each tensor's
// extent (offset, sizes, strides) must lie within its storage, whatever a damaged archive
// claimed. A walk over nested values is iterative and bounded in visits and depth.

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "archive_reading.h"

namespace lithe::host::archive {

inline constexpr size_t kMaxVisits = 100'000'000;
inline constexpr size_t kMaxDepth = 10'000;

inline std::string ints_text(c10::IntArrayRef values) { return c10::str(values); }

/// Walks values iteratively (no recursion whatever the nesting), checking each tensor once.
class TensorWalker {
 public:
  explicit TensorWalker(const Reporter& report) : report_(report) {}

  /// Checks one tensor; `label` names it in errors ("parameter 'fc1.weight'").
  void check_tensor(const at::Tensor& tensor, const std::string& label) {
    if (!tensor.defined() || !seen_.insert(tensor.unsafeGetTensorImpl()).second) {
      return;
    }
    count_visit();
    try {
      check_layout(tensor, label);
    } catch (const c10::Error& error) {
      report_.fail(label + " cannot be inspected: " + error.what_without_backtrace());
    }
  }

  /// Checks every tensor reachable from `root`; `kind` and `path` name it ("attribute",
  /// "encoder.cache") and grow with the element path ("encoder.cache[2]").
  void walk(const c10::IValue& root, const std::string& kind, const std::string& path) {
    pending_.push_back({root, path, 0});
    while (!pending_.empty()) {
      Pending item = std::move(pending_.back());
      pending_.pop_back();
      visit(item, kind);
    }
  }

  /// Marks a container (e.g. a module object checked by other means) as already visited.
  void mark_visited(const c10::IValue& value) {
    if (value.isPtrType()) {
      visited_.insert(value.internalToPointer());
    }
  }

  void count_visit() {
    if (++visits_ > kMaxVisits) {
      report_.fail("holds more than " + std::to_string(kMaxVisits) +
                   " values to check; refusing to walk further");
    }
  }

 private:
  struct Pending {
    c10::IValue value;
    std::string path;
    size_t depth;
  };

  static std::string label_of(const std::string& kind, const std::string& path) {
    return kind + " '" + path + "'";
  }

  void check_layout(const at::Tensor& tensor, const std::string& label) {
    if (tensor.is_nested() || tensor.is_mkldnn()) {
      return;  // no strided view over a plain storage to check
    }
    // Sparse tensors keep their data in strided member tensors: check those.
    switch (tensor.layout()) {
      case at::kStrided:
        break;
      case at::kSparse:
        check_tensor(tensor._indices(), label + " (sparse indices)");
        check_tensor(tensor._values(), label + " (sparse values)");
        return;
      case at::kSparseCsr:
      case at::kSparseBsr:
        check_tensor(tensor.crow_indices(), label + " (compressed row indices)");
        check_tensor(tensor.col_indices(), label + " (column indices)");
        check_tensor(tensor.values(), label + " (sparse values)");
        return;
      case at::kSparseCsc:
      case at::kSparseBsc:
        check_tensor(tensor.ccol_indices(), label + " (compressed column indices)");
        check_tensor(tensor.row_indices(), label + " (row indices)");
        check_tensor(tensor.values(), label + " (sparse values)");
        return;
      default:
        return;
    }
    if (tensor.is_quantized() && (tensor.qscheme() == at::kPerChannelAffine ||
                                  tensor.qscheme() == at::kPerChannelAffineFloatQParams)) {
      check_tensor(tensor.q_per_channel_scales(), label + " (per-channel scales)");
      check_tensor(tensor.q_per_channel_zero_points(), label + " (per-channel zero points)");
    }
    if (!tensor.has_storage()) {
      return;
    }
    check_extent(tensor, label);
  }

  void check_extent(const at::Tensor& tensor, const std::string& label) const {
    const c10::IntArrayRef sizes = tensor.sizes();
    const c10::IntArrayRef strides = tensor.strides();
    const int64_t offset = tensor.storage_offset();
    const uint64_t storage_bytes = tensor.storage().nbytes();
    const auto describe = [&] {
      return label + " (shape " + ints_text(sizes) + ", strides " + ints_text(strides) +
             ", storage offset " + std::to_string(offset) + ", " +
             std::string(c10::toString(tensor.scalar_type())) + ")";
    };
    if (sizes.size() != strides.size()) {
      report_.fail(describe() + " has " + std::to_string(strides.size()) + " strides for " +
                   std::to_string(sizes.size()) + " dimensions");
    }
    if (offset < 0) {
      report_.fail(describe() + " has a negative storage offset");
    }
    bool empty = false;
    for (size_t dim = 0; dim < sizes.size(); ++dim) {
      if (sizes[dim] < 0 || strides[dim] < 0) {
        report_.fail(describe() + " has a negative size or stride in dimension " +
                     std::to_string(dim));
      }
      empty = empty || sizes[dim] == 0;
    }
    if (empty) {
      return;  // no element is ever read
    }
    // The last element reachable is at storage_offset + sum((size_i - 1) * stride_i).
    uint64_t last = static_cast<uint64_t>(offset);
    bool overflow = false;
    for (size_t dim = 0; dim < sizes.size(); ++dim) {
      uint64_t reach = 0;
      overflow = overflow ||
                 __builtin_mul_overflow(static_cast<uint64_t>(sizes[dim] - 1),
                                        static_cast<uint64_t>(strides[dim]), &reach) ||
                 __builtin_add_overflow(last, reach, &last);
    }
    uint64_t needed = 0;
    overflow = overflow || __builtin_add_overflow(last, uint64_t{1}, &needed) ||
               __builtin_mul_overflow(needed, static_cast<uint64_t>(tensor.itemsize()), &needed);
    if (overflow) {
      report_.fail(describe() + " reaches beyond 2^64 bytes; the file is corrupted");
    }
    if (needed > storage_bytes) {
      report_.fail(describe() + " reaches byte " + std::to_string(needed) +
                   " of a storage that holds " + std::to_string(storage_bytes) +
                   " bytes; the file is corrupted");
    }
  }

  void visit(const Pending& item, const std::string& kind) {
    count_visit();
    const c10::IValue& value = item.value;
    if (value.isTensor()) {
      check_tensor(value.toTensor(), label_of(kind, item.path));
      return;
    }
    if (!(value.isList() || value.isTuple() || value.isGenericDict() || value.isObject() ||
          value.isEnum())) {
      return;  // scalars, strings, devices, ...: no tensors inside
    }
    if (!visited_.insert(value.internalToPointer()).second) {
      return;  // shared or cyclic
    }
    if (item.depth >= kMaxDepth) {
      report_.fail(label_of(kind, item.path) + " is nested more than " + std::to_string(kMaxDepth) +
                   " levels deep");
    }
    const auto add = [&](const c10::IValue& child, std::string path) {
      if (child.isTensor() || child.isList() || child.isTuple() || child.isGenericDict() ||
          child.isObject() || child.isEnum()) {
        pending_.push_back({child, std::move(path), item.depth + 1});
      }
    };
    if (value.isList()) {
      if (value.isIntList() || value.isDoubleList() || value.isBoolList()) {
        return;
      }
      const c10::ArrayRef<c10::IValue> elements = value.toListRef();
      for (size_t i = 0; i < elements.size(); ++i) {
        count_visit();
        add(elements[i], item.path + "[" + std::to_string(i) + "]");
      }
    } else if (value.isTuple()) {
      const auto elements = value.toTupleRef().elements();
      for (size_t i = 0; i < elements.size(); ++i) {
        count_visit();
        add(elements[i], item.path + "[" + std::to_string(i) + "]");
      }
    } else if (value.isGenericDict()) {
      size_t index = 0;
      for (const auto& entry : value.toGenericDict()) {
        count_visit();
        const c10::IValue& key = entry.key();
        const std::string key_text = key.isString()
                                         ? "\"" + sdk::printable(key.toStringRef(), 60) + "\""
                                     : key.isInt() ? std::to_string(key.toInt())
                                                   : "#" + std::to_string(index);
        add(key, item.path + "[key " + key_text + "]");
        add(entry.value(), item.path + "[" + key_text + "]");
        ++index;
      }
    } else if (value.isObject()) {
      const c10::ivalue::Object& object = value.toObjectRef();
      const c10::ClassTypePtr type = object.type();
      const std::vector<c10::IValue>& slots = object.slots();
      for (size_t i = 0; i < slots.size(); ++i) {
        count_visit();
        const std::string name = type != nullptr && i < type->numAttributes()
                                     ? type->getAttributeName(i)
                                     : "[slot " + std::to_string(i) + "]";
        add(slots[i], item.path.empty() ? name : item.path + "." + name);
      }
    } else if (value.isEnum()) {
      add(value.toEnumHolder()->value(), item.path + ".value");
    }
  }

  const Reporter& report_;
  std::unordered_set<const void*> seen_;     // TensorImpls already checked
  std::unordered_set<const void*> visited_;  // containers and objects already walked
  std::vector<Pending> pending_;
  size_t visits_ = 0;
};

}  // namespace lithe::host::archive
