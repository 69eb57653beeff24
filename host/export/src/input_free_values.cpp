// Taint propagation from the forward's inputs through data, aliasing and control (see the
// header). Shape reads carry no taint: the export describes one input shape.
#include "input_free_values.h"

#include <algorithm>

#include "lithe/host/graph/op_table.h"

namespace lithe::host {

namespace jit = torch::jit;

namespace {

// Whether output `index` of `n` may share memory with its input 0 (a view: slice, view,
// transpose, ...), per its schema.
bool output_aliases_input(const jit::Node* n, size_t index) {
  const c10::FunctionSchema* schema = n->maybeSchema();
  return schema != nullptr && index < schema->returns().size() &&
         schema->returns()[index].alias_info() != nullptr && !n->inputs().empty();
}

const jit::Node* top_level(const jit::Node* n) {
  while (n->owningBlock()->owningNode() != nullptr) {
    n = n->owningBlock()->owningNode();
  }
  return n;
}

}  // namespace

InputFreeValues::InputFreeValues(const jit::Graph& graph) {
  for (size_t i = 1; i < graph.inputs().size(); ++i) {
    taint(graph.inputs()[i]);
  }
  // Loops carry taint around: repeat until nothing changes (each round only adds taint).
  for (int round = 0; round < 64 && visit(graph.block(), false); ++round) {
  }
  check_order(graph.block());
}

const jit::Value* InputFreeValues::root(const jit::Value* v) const {
  auto it = parent_.find(v);
  if (it == parent_.end() || it->second == v) {
    return v;
  }
  const jit::Value* r = root(it->second);
  parent_[v] = r;
  return r;
}

void InputFreeValues::unite(const jit::Value* a, const jit::Value* b) {
  const jit::Value* ra = root(a);
  const jit::Value* rb = root(b);
  if (ra == rb) {
    return;
  }
  parent_[rb] = ra;
  if (tainted_roots_.erase(rb) != 0) {
    tainted_roots_.insert(ra);
  }
  if (auto it = writers_.find(rb); it != writers_.end()) {
    std::vector<const jit::Node*> moved = std::move(it->second);
    writers_.erase(it);
    auto& into = writers_[ra];
    into.insert(into.end(), moved.begin(), moved.end());
  }
}

bool InputFreeValues::taint(const jit::Value* v) { return tainted_roots_.insert(root(v)).second; }

bool InputFreeValues::tainted(const jit::Value* v) const {
  return tainted_roots_.count(root(v)) != 0;
}

bool InputFreeValues::visit(const jit::Block* block, bool controlled) {
  bool changed = false;
  for (const jit::Node* n : block->nodes()) {
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      if (output_aliases_input(n, i)) {
        unite(n->input(0), n->output(i));
      }
    }
    bool reads = controlled;
    if (!ops::reads_only_metadata(n)) {
      for (const jit::Value* input : n->inputs()) {
        reads = reads || tainted(input);
      }
    }
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      if (ops::writes_input(n, i)) {
        auto& writers = writers_[root(n->input(i))];
        if (std::find(writers.begin(), writers.end(), n) == writers.end()) {
          writers.push_back(n);
        }
        if (reads) {
          changed = taint(n->input(i)) || changed;
        }
      }
    }
    if (n->kind() == c10::prim::If) {
      const bool inner = controlled || tainted(n->input(0));
      for (const jit::Block* b : n->blocks()) {
        changed = visit(b, inner) || changed;
        for (size_t i = 0; i < n->outputs().size(); ++i) {
          if (inner || tainted(b->outputs()[i])) {
            changed = taint(n->output(i)) || changed;
          }
        }
      }
      continue;
    }
    if (n->kind() == c10::prim::Loop) {
      const jit::Block* body = n->blocks()[0];
      // The trip count and the first condition control every iteration.
      const bool inner = controlled || tainted(n->input(0)) || tainted(n->input(1)) ||
                         tainted(body->outputs()[0]);
      for (size_t i = 0; i < n->outputs().size(); ++i) {
        if (inner || tainted(n->input(i + 2)) || tainted(body->outputs()[i + 1])) {
          changed = taint(body->inputs()[i + 1]) || changed;
          changed = taint(n->output(i)) || changed;
        }
      }
      changed = visit(body, inner) || changed;
      continue;
    }
    if (reads) {
      for (const jit::Value* out : n->outputs()) {
        changed = taint(out) || changed;
      }
    }
  }
  return changed;
}

void InputFreeValues::check_order(const jit::Block* block) {
  // A folded tensor holds its final contents, so every read of its memory must come after the
  // last write into it. Views (they only alias), shape reads and the writes themselves are not
  // content reads.
  for (const jit::Node* n : block->nodes()) {
    for (const jit::Block* b : n->blocks()) {
      check_order(b);
    }
    if (ops::reads_only_metadata(n)) {
      continue;
    }
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      const jit::Value* input = n->input(i);
      const jit::Value* r = root(input);
      const auto writers = writers_.find(r);
      if (writers == writers_.end() || ops::writes_input(n, i)) {
        continue;
      }
      bool view = false;
      for (size_t o = 0; o < n->outputs().size(); ++o) {
        view = view || (output_aliases_input(n, o) && i == 0);
      }
      if (view) {
        continue;
      }
      const jit::Node* reader = top_level(n);
      for (const jit::Node* w : writers->second) {
        const jit::Node* writer = top_level(w);
        if (w != n && (writer == reader || reader->isBefore(writer))) {
          misordered_roots_.insert(r);
        }
      }
    }
  }
}

bool InputFreeValues::foldable(const jit::Value* v) const {
  return v->type()->kind() == c10::TypeKind::TensorType && !tainted(v) &&
         misordered_roots_.count(root(v)) == 0;
}

}  // namespace lithe::host
