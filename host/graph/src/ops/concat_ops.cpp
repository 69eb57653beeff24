// Concatenation of a tensor list: along channels it lays the parts' channel spaces side by side
// (DenseNet's growing feature list, Inception's branches).
#include "families.h"

namespace lithe::host::ops {

namespace {

namespace jit = torch::jit;

void emit_cat(OnnxWriter& w, const jit::Node* n) {
  const std::optional<std::vector<const jit::Value*>> parts = list_items(n->input(0), n);
  if (!parts) {
    w.unsupported(n, "its tensor list is not built from a list literal and appends");
  }
  std::vector<std::string> inputs;
  for (const jit::Value* part : *parts) {
    inputs.push_back(w.value(part, n));
  }
  const int64_t rank = w.tensor(n->output()).dim();
  w.emit(n, "Concat", inputs, {{"axis", normalized_axis(w.constant(n, 1).toInt(), rank)}});
}

}  // namespace

std::vector<OpSpec> concat_ops() {
  return {
      {{"aten::cat", "aten::concat"}, Channels::kConcat, emit_cat},
      // Building the list: its readers see the items through list_items().
      {{"aten::append"}, Channels::kNone, nullptr},
  };
}

}  // namespace lithe::host::ops
