#pragma once
// Internal to the export area: the tensors of a forward graph that the input's contents never
// reach. A model exported at one input shape computes them the same way on every input (Swin's
// shifted-window attention mask: new_zeros of the padded size, filled in a loop over constant
// slices), so the exporter may write what they held on the export input as initializers where
// ONNX has no op for how they were made.

#include <torch/csrc/jit/ir/ir.h>

#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace lithe::host {

class InputFreeValues {
 public:
  /// Analyses `graph` (an inlined forward whose input 0 is the module and the rest are inputs).
  explicit InputFreeValues(const torch::jit::Graph& graph);

  /// Whether tensor value `v` of the top-level block may be replaced by the contents it held at
  /// the end of a run: nothing that depends on an input's contents reaches it or any tensor it
  /// shares memory with (views, in-place writes, control flow that writes into it), and every
  /// write into that memory comes before every read of its contents.
  bool foldable(const torch::jit::Value* v) const;

 private:
  const torch::jit::Value* root(const torch::jit::Value* v) const;
  void unite(const torch::jit::Value* a, const torch::jit::Value* b);
  bool visit(const torch::jit::Block* block, bool controlled);
  bool taint(const torch::jit::Value* v);
  bool tainted(const torch::jit::Value* v) const;
  void check_order(const torch::jit::Block* block);

  mutable std::unordered_map<const torch::jit::Value*, const torch::jit::Value*> parent_;
  std::unordered_set<const torch::jit::Value*> tainted_roots_;
  // Per alias group (root): the nodes that write into it.
  std::unordered_map<const torch::jit::Value*, std::vector<const torch::jit::Node*>> writers_;
  std::unordered_set<const torch::jit::Value*> misordered_roots_;
};

}  // namespace lithe::host
