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
// Quantization uses the same mechanism with `lithe::quantize(x, site, type)`: inputs and
// outputs at the parent's call site, the weight inside the module's own methods, where every
// `self.weight` read is replaced, so the module computes with the quantized weight and
// autograd carries gradients back to the float parameter.
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/serialization/import.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>


#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "lithe/host/io/archive_check.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/model/model.h"
#include "lithe/host/model/quantized_engine.h"
#include "lithe/sdk/error.h"
#include "lithe/host/graph/convolution_type.h"
#include "lithe/host/graph/forward_cut.h"
#include "lithe/host/graph/submodule.h"
#include "model_move.h"
#include "tap_dispatch.h"

namespace lithe::host {
namespace {

namespace jit = torch::jit;

std::string tap_attribute_name(const std::string& child) { return "__lithe_tap_" + child; }

// Every `self.<child>.forward(...)` call in `block` and its sub-blocks, in graph order. Collected
// before any rewrite, so inserting nodes around them cannot disturb the walk.
std::vector<jit::Node*> child_calls(jit::Block* block, jit::Value* self, const std::string& child) {
  std::vector<jit::Node*> out;
  for (jit::Node* node : block->nodes()) {
    for (jit::Block* sub : node->blocks()) {
      const std::vector<jit::Node*> nested = child_calls(sub, self, child);
      out.insert(out.end(), nested.begin(), nested.end());
    }
    if (node->kind() != c10::prim::CallMethod || node->s(c10::attr::name) != "forward") {
      continue;
    }
    jit::Node* receiver = node->inputs()[0]->node();
    if (receiver->kind() == c10::prim::GetAttr && receiver->s(c10::attr::name) == child &&
        receiver->input() == self) {
      out.push_back(node);
    }
  }
  return out;
}

// The model's main output: the tensor itself, the first element of a tuple or list
// (torchvision's GoogLeNetOutputs / InceptionOutputs put the logits first, auxiliary heads
// after), or the "out" entry of a dict (torchvision's segmentation models).
at::Tensor main_output(const c10::IValue& output) {
  if (output.isTensor()) {
    return output.toTensor();
  }
  if (output.isTuple() && !output.toTupleRef().elements().empty() &&
      output.toTupleRef().elements()[0].isTensor()) {
    return output.toTupleRef().elements()[0].toTensor();
  }
  if (output.isList() && !output.toListRef().empty() && output.toListRef()[0].isTensor()) {
    return output.toListRef()[0].toTensor();
  }
  if (output.isGenericDict()) {
    for (const auto& entry : output.toGenericDict()) {
      if (entry.key().isString() && entry.key().toStringRef() == "out" &&
          entry.value().isTensor()) {
        return entry.value().toTensor();
      }
    }
  }
  throw sdk::Error(sdk::Errc::kUnsupported,
                   "the model's forward returns " + output.tagKind() +
                       ", which is not a Tensor, a tuple or list whose first element is a "
                       "Tensor, or a dict with a Tensor under \"out\"");
}

// Inserts observe ops after every `self.<child>.forward(...)` call in `block` (recursively).
int rewrite_block(jit::Block* block, jit::Value* self, const std::string& child,
                  const std::string& attribute, const std::string& module_name) {
  const std::vector<jit::Node*> calls = child_calls(block, self, child);
  for (jit::Node* node : calls) {
    LITHE_CHECK(node->outputs().size() == 1 &&
                    node->output()->type()->kind() == c10::TypeKind::TensorType,
                sdk::Errc::kUnsupported, "module '", module_name,
                "' cannot be observed: its forward returns ", node->output()->type()->str(),
                ", not a single Tensor");
    jit::Graph* graph = node->owningGraph();
    jit::WithInsertPoint guard(node->next());
    jit::Value* tap = graph->insertGetAttr(self, attribute);
    jit::Value* observed =
        graph->insert(c10::Symbol::fromQualString("lithe::observe"), {node->output(), tap});
    node->output()->replaceAllUsesAfterNodeWith(observed->node(), observed);
  }
  return static_cast<int>(calls.size());
}


/// "a.b.c" -> {"a.b", "c"}; "c" -> {"", "c"}.
std::pair<std::string, std::string> split_module_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) {
    return {"", name};
  }
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// Adds string attribute `attribute` to `type` if missing, with "" on every instance of it.
bool ensure_site_attribute(jit::Module& root, const c10::ClassTypePtr& type,
                           const std::string& attribute) {
  if (type->hasAttribute(attribute)) {
    return false;
  }
  type->addAttribute(attribute, c10::StringType::get());
  for (const auto& item : root.named_modules()) {
    if (item.value.type() == type) {
      item.value._ivalue()->setAttr(attribute, std::string());
    }
  }
  return true;
}

void insert_tap(jit::Module& root, const std::string& name, const std::string& tap_value) {
  const auto [parent_path, child] = split_module_name(name);
  jit::Module parent = parent_path.empty() ? root : submodule(root, parent_path);
  const c10::ClassTypePtr type = parent.type();
  const std::string attribute = tap_attribute_name(child);
  if (ensure_site_attribute(root, type, attribute)) {
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

std::string quant_attribute_name(const std::string& child, sdk::QuantType type) {
  return std::string("__lithe_q") + sdk::quant_type_name(type) + "_" + child;
}

jit::Value* insert_quantize(jit::Graph* graph, jit::Value* self, const std::string& attribute,
                            jit::Value* x, sdk::QuantType type) {
  jit::Value* site = graph->insertGetAttr(self, attribute);
  jit::Value* kind = graph->insertConstant(static_cast<int64_t>(type));
  return graph->insert(c10::Symbol::fromQualString("lithe::quantize"), {x, site, kind});
}

// Quantizes the input (first argument) or the output of every `self.<child>.forward(...)`.
int rewrite_call_sites(jit::Block* block, jit::Value* self, const std::string& child,
                       const std::string& attribute, sdk::QuantType type,
                       const std::string& module_name) {
  const std::vector<jit::Node*> calls = child_calls(block, self, child);
  for (jit::Node* node : calls) {
    jit::Graph* graph = node->owningGraph();
    if (type == sdk::QuantType::kInput) {
      LITHE_CHECK(node->inputs().size() >= 2 &&
                      node->inputs()[1]->type()->kind() == c10::TypeKind::TensorType,
                  sdk::Errc::kUnsupported, "the input of module '", module_name,
                  "' cannot be quantized: its forward does not take a Tensor first");
      jit::WithInsertPoint guard(node);
      node->replaceInput(1, insert_quantize(graph, self, attribute, node->inputs()[1], type));
    } else {
      LITHE_CHECK(node->outputs().size() == 1 &&
                      node->output()->type()->kind() == c10::TypeKind::TensorType,
                  sdk::Errc::kUnsupported, "the output of module '", module_name,
                  "' cannot be quantized: its forward returns ", node->output()->type()->str(),
                  ", not a single Tensor");
      jit::WithInsertPoint guard(node->next());
      jit::Value* quantized = insert_quantize(graph, self, attribute, node->output(), type);
      node->output()->replaceAllUsesAfterNodeWith(quantized->node(), quantized);
    }
  }
  return static_cast<int>(calls.size());
}

// Replaces every `self.weight` read in `block` by its quantized value.
int rewrite_weight_reads(jit::Block* block, jit::Value* self, const std::string& attribute) {
  int rewritten = 0;
  for (auto it = block->nodes().begin(); it != block->nodes().end(); ++it) {
    jit::Node* node = *it;
    for (jit::Block* sub : node->blocks()) {
      rewritten += rewrite_weight_reads(sub, self, attribute);
    }
    if (node->kind() != c10::prim::GetAttr || node->s(c10::attr::name) != "weight" ||
        node->input() != self) {
      continue;
    }
    jit::WithInsertPoint guard(node->next());
    jit::Value* quantized = insert_quantize(block->owningGraph(), self, attribute, node->output(),
                                            sdk::QuantType::kWeight);
    node->output()->replaceAllUsesAfterNodeWith(quantized->node(), quantized);
    ++rewritten;
  }
  return rewritten;
}

void insert_quant_site(jit::Module& root, const std::string& name, sdk::QuantType type,
                       const std::string& site) {
  if (type == sdk::QuantType::kWeight) {
    jit::Module module = submodule(root, name);
    const c10::ClassTypePtr module_type = module.type();
    const std::string attribute = quant_attribute_name("self", type);
    if (ensure_site_attribute(root, module_type, attribute)) {
      int rewritten = 0;
      for (jit::Function* method : module_type->methods()) {
        auto graph = jit::toGraphFunction(*method).graph();
        rewritten += rewrite_weight_reads(graph->block(), graph->inputs()[0], attribute);
      }
      LITHE_CHECK(rewritten > 0, sdk::Errc::kUnsupported, "the weight of module '", name,
                  "' cannot be quantized: its forward never reads self.weight");
    }
    module._ivalue()->setAttr(attribute, site);
    return;
  }
  const auto [parent_path, child] = split_module_name(name);
  jit::Module parent = parent_path.empty() ? root : submodule(root, parent_path);
  const c10::ClassTypePtr type_ptr = parent.type();
  const std::string attribute = quant_attribute_name(child, type);
  if (ensure_site_attribute(root, type_ptr, attribute)) {
    int rewritten = 0;
    for (jit::Function* method : type_ptr->methods()) {
      auto graph = jit::toGraphFunction(*method).graph();
      rewritten += rewrite_call_sites(graph->block(), graph->inputs()[0], child, attribute, type,
                                      name);
    }
    LITHE_CHECK(rewritten > 0, sdk::Errc::kUnsupported, "the ", sdk::quant_type_name(type),
                " of module '", name, "' cannot be quantized: its parent (",
                type_ptr->name()->qualifiedName(), ") never calls it as self.", child, "(...)");
  }
  parent._ivalue()->setAttr(attribute, site);
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

// The forward cut of a TorchScript model: its module (sharing the model's parameters, in eval
// mode, without taps) passed as `self` to the two graphs.
class TorchScriptForwardCut final : public ForwardCut {
 public:
  TorchScriptForwardCut(jit::Module module, ForwardCutGraphs graphs)
      : module_(std::move(module)),
        written_(std::move(graphs.written)),
        layer_output_(graphs.layer_output),
        prefix_("lithe_cut_prefix", std::move(graphs.prefix), nullptr),
        suffix_("lithe_cut_suffix", std::move(graphs.suffix), nullptr) {}

  c10::IValue prefix(const at::Tensor& input) override {
    jit::Stack stack = {module_._ivalue(), input};
    prefix_.run(stack);
    return stack.back();
  }

  at::Tensor suffix(const c10::IValue& cached) override {
    const auto& boundary = cached.toTupleRef().elements();
    jit::Stack stack = {module_._ivalue()};
    for (size_t i = 0; i < boundary.size(); ++i) {
      // A value the suffix writes in place is copied, so that `cached` serves the next run too.
      stack.push_back(written_[i] ? c10::IValue(boundary[i].toTensor().clone()) : boundary[i]);
    }
    suffix_.run(stack);
    return main_output(stack.back());
  }

  std::optional<LayerOutputSlot> layer_output() const override { return layer_output_; }

 private:
  jit::Module module_;
  std::vector<bool> written_;
  std::optional<LayerOutputSlot> layer_output_;
  jit::GraphFunction prefix_;
  jit::GraphFunction suffix_;
};

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
      if (!record.weight.has_value()) {  // nn.MultiheadAttention: q, k, v in one parameter
        record.weight = tensor_attribute(item.value, "in_proj_weight");
        if (record.weight.has_value()) {
          record.bias = tensor_attribute(item.value, "in_proj_bias");
        }
      }
      if (record.weight.has_value()) {
        const std::optional<std::string> conv =
            convolution_type(item.value.type(), record.weight->dim() - 2);
        if (conv.has_value() && *conv != record.op_type) {
          record.class_name = record.op_type;
          record.op_type = *conv;
        }
      }
      modules_.push_back(std::move(record));
    }
  }

  ~TorchScriptModel() override {
    if (tap_target_ != 0) {
      detail::unregister_tap_target(tap_target_);
    }
    if (quant_target_ != 0) {
      detail::unregister_quant_target(quant_target_);
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
    detail::take_op_error();  // a stale error of an earlier, caught failure must not resurface
    c10::IValue output;
    try {
      output = working_.forward({input});
    } catch (...) {
      // The interpreter rewraps what a Lithe op threw; report the original (layer, rule, value).
      if (const std::exception_ptr original = detail::take_op_error()) {
        std::rethrow_exception(original);
      }
      throw;
    }
    return main_output(output);
  }

  std::unique_ptr<ForwardCut> cut_forward(const std::string& layer, CutAt at,
                                          std::string* why_not) override {
    if (!quant_sites_.empty()) {
      *why_not = "the model is being quantized (its forward changes with the quantizer's state)";
      return nullptr;
    }
    // Shares the parameters (inplace clone); its own training flags, set to eval.
    jit::Module module = original_.clone(/*inplace=*/true);
    module.eval();
    std::optional<ForwardCutGraphs> graphs = cut_forward_graph(module, layer, why_not, at);
    if (!graphs) {
      return nullptr;
    }
    return std::make_unique<TorchScriptForwardCut>(std::move(module), std::move(*graphs));
  }

  // The working clone shares the original's tensor objects (inplace clone), which
  // jit::Module::to moves in place (set_data): moving the original moves both.
  void to(const c10::Device& device) override {
    detail::move_model_tensors(this->device(), device,
                               [&](const c10::Device& d) { original_.to(d); });
  }

  void train(bool on) override {
    training_ = on;
    working_.train(on);
  }
  bool is_training() const override { return training_; }

  void train_module(const std::string& module, bool on) override {
    LITHE_CHECK(find_module(module) != nullptr, sdk::Errc::kInvalidConfig, "the model has no ",
                "module '", module, "'");
    submodule(working_, module).train(on);  // working_ runs the forwards
  }

  std::optional<double> batchnorm_momentum(const std::string& module) const override {
    LITHE_CHECK(find_module(module) != nullptr, sdk::Errc::kInvalidConfig, "the model has no ",
                "module '", module, "'");
    const jit::Module target = submodule(original_, module);
    const auto name = target.type()->name();
    // Scripting may mangle the qualified name (...batchnorm.___torch_mangle_5.BatchNorm2d).
    const bool batchnorm =
        name && name->qualifiedName().rfind("__torch__.torch.nn.modules.batchnorm.", 0) == 0 &&
        (name->name() == "BatchNorm1d" || name->name() == "BatchNorm2d" ||
         name->name() == "BatchNorm3d");
    LITHE_CHECK(batchnorm, sdk::Errc::kUnsupported, "module '", module, "' (",
                name ? name->qualifiedName() : std::string("?"),
                ") is not torch.nn's BatchNorm1d/2d/3d");
    // torch.nn's BatchNorm declares momentum a constant: scripting bakes it into the forward.
    c10::optional<c10::IValue> value = target.type()->findConstant("momentum");
    if (!value && target.hasattr("momentum")) {
      value = target.attr("momentum");
    }
    LITHE_CHECK(value && (value->isDouble() || value->isNone()), sdk::Errc::kUnsupported,
                "BatchNorm layer '", module, "' has no momentum constant");
    return value->isNone() ? std::nullopt : std::optional<double>(value->toDouble());
  }

  void set_taps(const std::vector<std::string>& names, TapCallback callback) override {
    for (const std::string& name : names) {
      LITHE_CHECK(find_module(name) != nullptr, sdk::Errc::kInvalidConfig,
                  "cannot observe module '", name, "': the model has no module of that name");
    }
    std::shared_ptr<TapCallback> shared;
    if (!names.empty()) {
      shared = std::make_shared<TapCallback>(std::move(callback));
    }
    rebuild(names, shared, quant_sites_, quant_callback_);
  }

  void set_quantization(const std::vector<QuantSite>& sites, QuantCallback callback) override {
    for (const QuantSite& site : sites) {
      LITHE_CHECK(find_module(site.module) != nullptr, sdk::Errc::kInvalidConfig,
                  "cannot quantize module '", site.module,
                  "': the model has no module of that name");
    }
    std::shared_ptr<QuantCallback> shared;
    if (!sites.empty()) {
      shared = std::make_shared<QuantCallback>(std::move(callback));
    }
    rebuild(tap_names_, tap_callback_, sites, shared);
  }

  std::vector<std::pair<std::string, at::Tensor>> module_buffers(
      const std::string& module) const override {
    LITHE_CHECK(find_module(module) != nullptr, sdk::Errc::kInvalidConfig, "the model has no ",
                "module '", module, "'");
    const jit::Module target = submodule(original_, module);
    const c10::ClassTypePtr type = target.type();
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (size_t slot = 0; slot < type->numAttributes(); ++slot) {
      if (type->is_parameter(slot) || type->getAttribute(slot)->kind() != c10::TypeKind::TensorType) {
        continue;
      }
      const c10::IValue value = target._ivalue()->getSlot(slot);
      if (value.isTensor()) {
        out.emplace_back(type->getAttributeName(slot), value.toTensor());
      }
    }
    return out;
  }

  void set_module_buffer(const std::string& module, const std::string& name,
                         const at::Tensor& value) override {
    LITHE_CHECK(find_module(module) != nullptr, sdk::Errc::kInvalidConfig, "the model has no ",
                "module '", module, "'");
    jit::Module target = submodule(original_, module);
    const c10::ClassTypePtr type = target.type();
    if (const auto slot = type->findAttributeSlot(name)) {
      LITHE_CHECK(!type->is_parameter(*slot) &&
                      type->getAttribute(*slot)->kind() == c10::TypeKind::TensorType,
                  sdk::Errc::kInvalidModel, "module '", module, "' already has a ",
                  type->is_parameter(*slot) ? "parameter" : "non-tensor attribute", " named '",
                  name, "'; it cannot hold the quantization state of that name");
      target._ivalue()->setAttr(name, value);
      return;
    }
    type->addAttribute(name, c10::TensorType::get(), /*is_parameter=*/false, /*is_buffer=*/true);
    // Other instances of a shared type need the slot too: an empty tensor marks "no state".
    for (const auto& item : original_.named_modules()) {
      if (item.value.type() == type) {
        item.value._ivalue()->setAttr(name, at::empty({0}));
      }
    }
    target._ivalue()->setAttr(name, value);
  }

  std::string serialize() const override {
    try {
      // Through a stream, the archive's inner folder is always "archive/" rather than derived
      // from a file name, so identical models give identical bytes.
      std::ostringstream out(std::ios::binary);
      original_.save(out);
      return std::move(out).str();
    } catch (const std::exception& e) {
      const std::string message = e.what();
      throw sdk::Error(sdk::Errc::kIo, "cannot serialise the model: " +
                                           message.substr(0, message.find('\n')));
    }
  }

 private:
  // Builds the new working copy completely before replacing the old one, so a failure leaves
  // the current taps and quantization in place. Taps go in first: a quantized output is then
  // inserted between the call and its observer, which sees the quantized value (NNI's hooks
  // on the wrapper see the wrapper's output).
  void rebuild(const std::vector<std::string>& tap_names, std::shared_ptr<TapCallback> tap_callback,
               const std::vector<QuantSite>& sites, std::shared_ptr<QuantCallback> quant_callback) {
    jit::Module fresh = original_.clone(/*inplace=*/true);
    int64_t tap_target = 0;
    int64_t quant_target = 0;
    try {
      if (!tap_names.empty()) {
        tap_target = detail::register_tap_target(
            [tap_callback](const std::string& m, const at::Tensor& t) { (*tap_callback)(m, t); });
        for (const std::string& name : tap_names) {
          insert_tap(fresh, name, detail::make_tap_string(tap_target, name));
        }
      }
      if (!sites.empty()) {
        quant_target = detail::register_quant_target(
            [quant_callback](const std::string& m, sdk::QuantType type, const at::Tensor& t) {
              return (*quant_callback)(m, type, t);
            });
        for (const QuantSite& site : sites) {
          const std::string value = detail::make_tap_string(quant_target, site.module);
          if (site.weight) insert_quant_site(fresh, site.module, sdk::QuantType::kWeight, value);
          if (site.input) insert_quant_site(fresh, site.module, sdk::QuantType::kInput, value);
          if (site.output) insert_quant_site(fresh, site.module, sdk::QuantType::kOutput, value);
        }
      }
    } catch (...) {
      if (tap_target != 0) detail::unregister_tap_target(tap_target);
      if (quant_target != 0) detail::unregister_quant_target(quant_target);
      throw;
    }
    fresh.train(training_);
    working_ = fresh;
    if (tap_target_ != 0) detail::unregister_tap_target(tap_target_);
    if (quant_target_ != 0) detail::unregister_quant_target(quant_target_);
    tap_target_ = tap_target;
    quant_target_ = quant_target;
    tap_names_ = tap_names;
    tap_callback_ = std::move(tap_callback);
    quant_sites_ = sites;
    quant_callback_ = std::move(quant_callback);
  }

  jit::Module original_;  // never rewritten, never run: saved as is
  jit::Module working_;   // clone that runs (and carries the taps and quantization)
  std::vector<ModuleRecord> modules_;
  bool training_ = false;
  int64_t tap_target_ = 0;
  int64_t quant_target_ = 0;
  std::vector<std::string> tap_names_;
  std::shared_ptr<TapCallback> tap_callback_;
  std::vector<QuantSite> quant_sites_;
  std::shared_ptr<QuantCallback> quant_callback_;
};

// An int8 archive's weights are prepacked again while it loads, for the active quantized
// engine: switch to the engine it names (kQuantizedEngineRecord) first.
void use_engine_of_archive(const std::string& bytes, const std::filesystem::path& path) {
  std::istringstream in(bytes, std::ios::binary);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  const std::string record = std::string("extra/") + kQuantizedEngineRecord;
  if (!reader.hasRecord(record)) {
    return;
  }
  const auto [data, size] = reader.getRecord(record);
  const std::string name(static_cast<const char*>(data.get()), size);
  const QuantizedEngine engine =
      parse_quantized_engine(name, "model file '" + path.string() + "', " + record);
  try {
    use_quantized_engine(engine);
  } catch (const sdk::Error& e) {
    throw sdk::Error(sdk::Errc::kUnsupported, "model file '" + path.string() +
                                                  "' is an int8 model for the " + name +
                                                  " engine: " + e.what());
  }
}

}  // namespace

std::unique_ptr<Model> make_torchscript_model(const torch::jit::Module& module) {
  return std::make_unique<TorchScriptModel>(module);
}

torch::jit::Module load_torchscript_module(const std::filesystem::path& path) {
  std::error_code ec;
  LITHE_CHECK(std::filesystem::is_regular_file(path, ec), sdk::Errc::kIo, "model file '",
              path.string(), "' does not exist or is not a regular file");
  // libtorch trusts the archive (short tensor records become out-of-bounds tensors, CRCs are
  // not checked): validate the bytes first, then load exactly those bytes.
  const std::string bytes = read_file(path);
  check_torch_archive(bytes, "model file", path.string());
  use_engine_of_archive(bytes, path);
  torch::jit::Module module;
  try {
    std::istringstream in(bytes, std::ios::binary);
    module = torch::jit::load(in);
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kInvalidModel,
                     "model file '" + path.string() +
                         "' is not a loadable TorchScript archive: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw sdk::Error(sdk::Errc::kInvalidModel, "model file '" + path.string() +
                                                   "' is not a loadable TorchScript archive: " +
                                                   e.what());
  }
  check_module_tensors(module, "model file", path.string());
  return module;
}

std::unique_ptr<Model> load_torchscript_model(const std::filesystem::path& path) {
  return make_torchscript_model(load_torchscript_module(path));
}

}  // namespace lithe::host
