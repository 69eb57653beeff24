// TorchScript models. Observation works by graph rewriting: after `self.<child>(...)` in the
// parent's methods, `lithe::observe(out, self.__lithe_tap_<child>)` is inserted. Rules learnt
// on this stack (libtorch-notes §Q5):
//  - edits to a method that already ran are silently ignored, so every change of the tap set
//    rebuilds a fresh clone(/*inplace=*/true) of the untouched original and rewrites that;
//    the clone shares parameters and buffers with the original, so training and masking
//    through it change the original, which is what gets saved (never containing taps);
//  - identical submodules share one ClassType, so a rewrite applies to every instance of the
//    parent's type; which instance observes which child is a per-instance string attribute
//    set on every instance ("" = not observed).
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/script.h>


#include <fstream>
#include <fstream>
#include <set>

#include "lithe/host/model.h"
#include "lithe/sdk/error.h"
#include "tap_dispatch.h"

namespace lithe::host {
namespace {

namespace jit = torch::jit;

std::string tap_attribute_name(const std::string& child) { return "__lithe_tap_" + child; }

// Inserts observe ops after every `self.<child>.forward(...)` call in `block` (recursively).
int rewrite_block(jit::Block* block, jit::Value* self, const std::string& child,
                  const std::string& attribute, const std::string& module_name) {
  int inserted = 0;
  for (auto it = block->nodes().begin(); it != block->nodes().end(); ++it) {
    jit::Node* node = *it;
    for (jit::Block* sub : node->blocks()) {
      inserted += rewrite_block(sub, self, child, attribute, module_name);
    }
    if (node->kind() != c10::prim::CallMethod || node->s(c10::attr::name) != "forward") {
      continue;
    }
    jit::Node* receiver = node->inputs()[0]->node();
    if (receiver->kind() != c10::prim::GetAttr || receiver->s(c10::attr::name) != child ||
        receiver->input() != self) {
      continue;
    }
    LITHE_CHECK(node->outputs().size() == 1 &&
                    node->output()->type()->kind() == c10::TypeKind::TensorType,
                sdk::Errc::kUnsupported, "module '", module_name,
                "' cannot be observed: its forward returns ", node->output()->type()->str(),
                ", not a single Tensor");
    jit::Graph* graph = block->owningGraph();
    jit::WithInsertPoint guard(node->next());
    jit::Value* tap = graph->insertGetAttr(self, attribute);
    jit::Value* observed =
        graph->insert(c10::Symbol::fromQualString("lithe::observe"), {node->output(), tap});
    node->output()->replaceAllUsesAfterNodeWith(observed->node(), observed);
    ++inserted;
  }
  return inserted;
}

jit::Module submodule(const jit::Module& root, const std::string& dotted) {
  jit::Module current = root;
  size_t start = 0;
  while (start < dotted.size()) {
    const size_t dot = dotted.find('.', start);
    const std::string atom = dotted.substr(start, dot == std::string::npos ? dot : dot - start);
    current = current.attr(atom).toModule();
    if (dot == std::string::npos) {
      break;
    }
    start = dot + 1;
  }
  return current;
}

void insert_tap(jit::Module& root, const std::string& name, const std::string& tap_value) {
  const size_t dot = name.rfind('.');
  const std::string parent_path = dot == std::string::npos ? "" : name.substr(0, dot);
  const std::string child = dot == std::string::npos ? name : name.substr(dot + 1);
  jit::Module parent = parent_path.empty() ? root : submodule(root, parent_path);
  const c10::ClassTypePtr type = parent.type();
  const std::string attribute = tap_attribute_name(child);
  if (!type->hasAttribute(attribute)) {
    type->addAttribute(attribute, c10::StringType::get());
    // Every instance of a shared type needs the slot, or reading it crashes.
    for (const auto& item : root.named_modules()) {
      if (item.value.type() == type) {
        item.value._ivalue()->setAttr(attribute, std::string());
      }
    }
    int inserted = 0;
    for (jit::Function* method : type->methods()) {
      auto graph = jit::toGraphFunction(*method).graph();
      inserted += rewrite_block(graph->block(), graph->inputs()[0], child, attribute, name);
    }
    LITHE_CHECK(inserted > 0, sdk::Errc::kUnsupported, "module '", name,
                "' cannot be observed: its parent (", type->name()->qualifiedName(),
                ") never calls it as self.", child, "(...)");
  }
  parent._ivalue()->setAttr(attribute, tap_value);
}

std::optional<at::Tensor> tensor_attribute(const jit::Module& module, const std::string& name) {
  if (!module.hasattr(name)) {
    return std::nullopt;
  }
  const c10::IValue value = module.attr(name);
  if (!value.isTensor()) {
    return std::nullopt;
  }
  return value.toTensor();
}

class TorchScriptModel final : public Model {
 public:
  explicit TorchScriptModel(const jit::Module& module)
      : original_(module), working_(module.clone(/*inplace=*/true)) {
    training_ = original_.is_training();
    for (const auto& item : original_.named_modules()) {
      if (item.name.empty()) {
        continue;  // the root is never compressed
      }
      ModuleRecord record;
      record.name = item.name;
      record.op_type = item.value.type()->name()->name();
      record.weight = tensor_attribute(item.value, "weight");
      record.bias = tensor_attribute(item.value, "bias");
      modules_.push_back(std::move(record));
    }
  }

  ~TorchScriptModel() override {
    if (tap_target_ != 0) {
      detail::unregister_tap_target(tap_target_);
    }
  }

  std::string kind() const override { return "torchscript"; }
  const std::vector<ModuleRecord>& modules() const override { return modules_; }

  std::vector<at::Tensor> parameters() const override {
    std::vector<at::Tensor> out;
    for (const at::Tensor& p : original_.parameters()) {
      out.push_back(p);
    }
    return out;
  }

  std::vector<at::Tensor> state_tensors() const override {
    std::vector<at::Tensor> out;
    for (const at::Tensor& p : original_.parameters()) {
      out.push_back(p);
    }
    for (const at::Tensor& b : original_.buffers()) {
      out.push_back(b);
    }
    return out;
  }

  // From the untouched original: the working clone may carry taps and may already have run.
  LayerDependencies dependencies() const override {
    const std::string what = "cannot read the channel/group dependencies from the model's graph: ";
    try {
      return analyze_dependencies(original_);
    } catch (const sdk::Error& e) {
      throw sdk::Error(sdk::Errc::kUnsupported, what + e.what());
    } catch (const c10::Error& e) {
      throw sdk::Error(sdk::Errc::kUnsupported, what + e.what_without_backtrace());
    } catch (const std::exception& e) {
      throw sdk::Error(sdk::Errc::kUnsupported, what + e.what());
    }
  }

  at::Tensor forward(const at::Tensor& input) override {
    const c10::IValue output = working_.forward({input});
    LITHE_CHECK(output.isTensor(), sdk::Errc::kUnsupported,
                "the model's forward returns ", output.tagKind(), ", not a single Tensor");
    return output.toTensor();
  }

  void train(bool on) override {
    training_ = on;
    working_.train(on);
  }
  bool is_training() const override { return training_; }

  void set_taps(const std::vector<std::string>& names, TapCallback callback) override {
    for (const std::string& name : names) {
      LITHE_CHECK(find_module(name) != nullptr, sdk::Errc::kInvalidConfig,
                  "cannot observe module '", name, "': the model has no module of that name");
    }
    // Build the new working copy completely before replacing the old one, so a failure
    // leaves the current taps in place.
    jit::Module fresh = original_.clone(/*inplace=*/true);
    int64_t target = 0;
    if (!names.empty()) {
      target = detail::register_tap_target(std::move(callback));
      try {
        for (const std::string& name : names) {
          insert_tap(fresh, name, detail::make_tap_string(target, name));
        }
      } catch (...) {
        detail::unregister_tap_target(target);
        throw;
      }
    }
    fresh.train(training_);
    working_ = fresh;
    if (tap_target_ != 0) {
      detail::unregister_tap_target(tap_target_);
    }
    tap_target_ = target;
  }

  void write(const std::filesystem::path& file) const override {
    try {
      // Through a stream, the archive's inner folder is always "archive/" rather than derived
      // from the (temporary) file name, so identical models give identical bytes.
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      LITHE_CHECK(out.good(), sdk::Errc::kIo, "cannot write model to '", file.string(), "'");
      original_.save(out);
      out.flush();
      LITHE_CHECK(out.good(), sdk::Errc::kIo, "cannot write model to '", file.string(),
                  "': write failed");
    } catch (const std::exception& e) {
      const std::string message = e.what();
      throw sdk::Error(sdk::Errc::kIo, "cannot write model to '" + file.string() +
                                           "': " + message.substr(0, message.find('\n')));
    }
  }

 private:
  jit::Module original_;  // never rewritten, never run: saved as is
  jit::Module working_;   // clone that runs (and carries the taps)
  std::vector<ModuleRecord> modules_;
  bool training_ = false;
  int64_t tap_target_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_torchscript_model(const torch::jit::Module& module) {
  return std::make_unique<TorchScriptModel>(module);
}

std::unique_ptr<Model> load_torchscript_model(const std::filesystem::path& path) {
  std::error_code ec;
  LITHE_CHECK(std::filesystem::is_regular_file(path, ec), sdk::Errc::kIo, "model file '",
              path.string(), "' does not exist or is not a regular file");
  torch::jit::Module module;
  try {
    module = torch::jit::load(path.string());
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kInvalidModel,
                     "model file '" + path.string() +
                         "' is not a loadable TorchScript archive: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw sdk::Error(sdk::Errc::kInvalidModel, "model file '" + path.string() +
                                                   "' is not a loadable TorchScript archive: " +
                                                   e.what());
  }
  return make_torchscript_model(module);
}

}  // namespace lithe::host
