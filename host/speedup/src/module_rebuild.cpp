// Unique-type copies of TorchScript modules and the shrinking of planned layers (see
// module_rebuild.h for why every instance needs its own type).
#include "module_rebuild.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "lithe/sdk/error.h"
#include "lithe/host/graph/submodule.h"

namespace lithe::host::speedup_detail {
namespace {

namespace jit = torch::jit;

std::string type_name(const c10::ClassTypePtr& type) {
  return type->name() ? type->name()->qualifiedName() : std::string("<anonymous>");
}

// After the receiver of each GetAttr got its new type, the GetAttr's result must carry the new
// type of that attribute (two attributes of one old type now have two types).
void retype_block(jit::Block* block, const std::unordered_set<const c10::Type*>& fresh) {
  for (jit::Node* node : block->nodes()) {
    if (node->kind() == c10::prim::GetAttr) {
      const auto owner = node->input()->type()->cast<c10::ClassType>();
      if (owner && fresh.count(owner.get()) != 0) {
        node->output()->setType(owner->getAttribute(node->s(c10::attr::name)));
      }
    }
    for (jit::Block* sub : node->blocks()) {
      retype_block(sub, fresh);
    }
  }
}

// Copies one module instance. `own_type(path)` says whether it needs a class type of its own;
// the others share one copied type per original type (`shared`), as the original shares them,
// so that an unchanged model does not grow by a class per instance.
class Cloner {
 public:
  explicit Cloner(std::function<bool(const std::string&)> own_type)
      : own_type_(std::move(own_type)) {}

  jit::Module clone(const jit::Module& source, const std::string& path) {
    const c10::ClassTypePtr old_type = source.type();
    LITHE_CHECK(old_type->getForwardHooks().empty() && old_type->getForwardPreHooks().empty(),
                sdk::Errc::kUnsupported, "cannot rebuild ", type_name(old_type),
                ": it has forward hooks");
    const bool own = own_type_(path);
    if (!own) {
      if (const auto cached = shared_.find(old_type.get()); cached != shared_.end()) {
        return fill(source, path, instantiate(source, cached->second));
      }
    }
    jit::Module copy(*old_type->name(), source._ivalue()->compilation_unit(),
                     /*shouldMangle=*/true);
    const c10::ClassTypePtr new_type = copy.type();
    fresh_.insert(new_type.get());
    // Attributes first (children give their types), then constants and methods.
    for (size_t i = 0; i < old_type->numAttributes(); ++i) {
      const std::string& name = old_type->getAttributeName(i);
      const c10::IValue value = source._ivalue()->getSlot(i);
      const c10::TypePtr type = old_type->getAttribute(i);
      const auto cls = type->cast<c10::ClassType>();
      if (cls && cls->is_module()) {
        const jit::Module child = clone(value.toModule(), join(path, name));
        new_type->addAttribute(name, child.type(), false, false);
        copy._ivalue()->setAttr(name, child._ivalue());
        continue;
      }
      LITHE_CHECK(type->kind() != c10::TypeKind::InterfaceType, sdk::Errc::kUnsupported,
                  "cannot rebuild ", type_name(old_type), ": attribute '", name,
                  "' holds a module interface");
      new_type->addAttribute(name, type, old_type->is_parameter(i), old_type->is_buffer(i));
      copy._ivalue()->setAttr(name, own_copy(value));
    }
    for (size_t i = 0; i < old_type->numConstants(); ++i) {
      new_type->addConstant(old_type->getConstantName(i), old_type->getConstant(i));
    }
    const auto remap = [&](c10::TypePtr t) -> c10::TypePtr {
      return t == old_type ? new_type : t;
    };
    for (jit::Function* method : old_type->methods()) {
      std::shared_ptr<jit::Graph> graph = jit::toGraphFunction(*method).graph()->copy();
      graph->remapTypes(remap);
      retype_block(graph->block(), fresh_);
      jit::Function* fn = copy._ivalue()->compilation_unit()->create_function(
          c10::QualifiedName(*new_type->name(), method->name()), graph);
      fn->setSchema(method->getSchema().cloneWithRemappedTypes(remap));
      new_type->addMethod(fn);
    }
    if (!own) {
      shared_.emplace(old_type.get(), new_type);
    }
    return copy;
  }

 private:
  static std::string join(const std::string& path, const std::string& name) {
    return path.empty() ? name : path + "." + name;
  }

  // One copy per original tensor: modules that share a parameter keep sharing it.
  c10::IValue own_copy(const c10::IValue& value) {
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (!t.defined()) {
        return t;
      }
      auto [it, inserted] = copies_.try_emplace(t.unsafeGetTensorImpl());
      if (inserted) {
        it->second = t.detach().clone().requires_grad_(t.requires_grad());
      }
      return it->second;
    }
    return value.deepcopy();
  }

  static jit::Module instantiate(const jit::Module& source, const c10::ClassTypePtr& type) {
    return jit::Module(c10::ivalue::Object::create(
        c10::StrongTypePtr(source._ivalue()->compilation_unit(), type), type->numAttributes()));
  }

  // An instance of an already copied type: copies of the slots (children recursively).
  jit::Module fill(const jit::Module& source, const std::string& path, jit::Module copy) {
    const c10::ClassTypePtr old_type = source.type();
    for (size_t i = 0; i < old_type->numAttributes(); ++i) {
      const c10::IValue value = source._ivalue()->getSlot(i);
      const auto cls = old_type->getAttribute(i)->cast<c10::ClassType>();
      if (cls && cls->is_module()) {
        const jit::Module child =
            clone(value.toModule(), join(path, old_type->getAttributeName(i)));
        copy._ivalue()->setSlot(i, child._ivalue());
      } else {
        copy._ivalue()->setSlot(i, own_copy(value));
      }
    }
    return copy;
  }

  std::function<bool(const std::string&)> own_type_;
  std::unordered_map<const c10::Type*, c10::ClassTypePtr> shared_;
  std::unordered_set<const c10::Type*> fresh_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> copies_;
};


at::Tensor index(const std::vector<int64_t>& keep) {
  return at::tensor(keep, at::kLong);
}



// The groups argument is folded into the compiled convolution call as a constant.
void set_groups_in_graphs(jit::Module& module, int64_t old_groups, int64_t new_groups) {
  static const c10::Symbol conv1d = c10::Symbol::fromQualString("aten::conv1d");
  static const c10::Symbol conv2d = c10::Symbol::fromQualString("aten::conv2d");
  static const c10::Symbol conv3d = c10::Symbol::fromQualString("aten::conv3d");
  static const c10::Symbol conv = c10::Symbol::fromQualString("aten::_convolution");
  static const c10::Symbol convolution = c10::Symbol::fromQualString("aten::convolution");
  for (jit::Function* method : module.type()->methods()) {
    std::shared_ptr<jit::Graph> graph = jit::toGraphFunction(*method).graph();
    std::vector<jit::Node*> pending;
    for (jit::Node* node : graph->nodes()) {
      pending.push_back(node);
    }
    for (jit::Node* node : pending) {
      size_t groups_index = 0;
      if (node->kind() == conv1d || node->kind() == conv2d || node->kind() == conv3d) {
        groups_index = 6;
      } else if (node->kind() == conv || node->kind() == convolution) {
        groups_index = 8;
      } else {
        continue;
      }
      const c10::optional<c10::IValue> groups = jit::toIValue(node->input(groups_index));
      if (!groups || !groups->isInt() || groups->toInt() != old_groups) {
        continue;
      }
      jit::WithInsertPoint point(node);
      node->replaceInput(groups_index, graph->insertConstant(c10::IValue(new_groups)));
    }
  }
}

std::vector<int64_t> shape_of(const jit::Module& module) {
  const c10::IValue weight = module.attr("weight", c10::IValue());
  if (!weight.isTensor() || !weight.toTensor().defined()) {
    return {};
  }
  return weight.toTensor().sizes().vec();
}


}  // namespace

void set_tensor(jit::Module& module, const std::string& name,
                const std::function<at::Tensor(const at::Tensor&)>& change) {
  if (!module.hasattr(name)) {
    return;
  }
  const c10::IValue value = module.attr(name);
  if (!value.isTensor() || !value.toTensor().defined()) {
    return;
  }
  const at::Tensor& old = value.toTensor();
  at::Tensor updated = change(old.detach()).contiguous().clone();
  updated.requires_grad_(old.requires_grad());
  module._ivalue()->setAttr(name, updated);
}

void set_int(jit::Module& module, const std::string& name, int64_t value) {
  const c10::ClassTypePtr type = module.type();
  if (type->hasConstant(name)) {
    type->unsafeRemoveConstant(name);
    type->addConstant(name, c10::IValue(value));
  } else if (module.hasattr(name) && module.attr(name).isInt()) {
    module._ivalue()->setAttr(name, value);
  }
}

int64_t int_constant_or_attr(const jit::Module& module, const std::string& name) {
  if (module.type()->hasConstant(name)) {
    return module.type()->getConstant(name).toInt();
  }
  return module.attr(name).toInt();
}

void replace_forward(jit::Module& module, const std::string& helper,
                     const std::string& helper_name) {
  try {
    module.define(helper);
  } catch (const std::exception& e) {
    // TorchScript's compile errors are not c10::Errors; some print nothing of themselves.
    throw sdk::Error(sdk::Errc::kInternal, "compiling the rebuilt forward of " +
                                               module.type()->str() + " failed: " + e.what());
  }
  jit::Function& defined = module.get_method(helper_name).function();
  jit::Function& forward = module.get_method("forward").function();
  const std::shared_ptr<jit::Graph> target = jit::toGraphFunction(forward).graph();
  const std::shared_ptr<jit::Graph> source = jit::toGraphFunction(defined).graph()->copy();
  LITHE_CHECK(target->inputs().size() == source->inputs().size(), sdk::Errc::kInternal,
              "the forward of ", module.type()->str(), " takes ", target->inputs().size(),
              " arguments, the rebuilt one ", source->inputs().size());
  for (size_t i = 1; i < target->inputs().size(); ++i) {
    LITHE_CHECK(*target->inputs()[i]->type() == *source->inputs()[i]->type(),
                sdk::Errc::kInternal, "argument ", i, " of the forward of ",
                module.type()->str(), " is ", target->inputs()[i]->type()->str(),
                ", the rebuilt one's ", source->inputs()[i]->type()->str());
  }
  while (!target->outputs().empty()) {
    target->eraseOutput(0);
  }
  std::vector<jit::Node*> old_nodes(target->nodes().begin(), target->nodes().end());
  for (auto it = old_nodes.rbegin(); it != old_nodes.rend(); ++it) {
    (*it)->destroy();
  }
  jit::WithInsertPoint end(target->return_node());
  for (jit::Value* out : jit::insertGraph(*target, *source, target->inputs())) {
    target->registerOutput(out);
  }
  module.type()->unsafeRemoveMethod(helper_name);
  module._ivalue()->compilation_unit()->unsafeRemoveMethod(defined.qualname());
}

void substitute(std::string& text, const std::string& placeholder, const std::string& literal) {
  for (size_t at = text.find(placeholder); at != std::string::npos;
       at = text.find(placeholder, at + literal.size())) {
    text.replace(at, placeholder.size(), literal);
  }
}

bool method_takes(const torch::jit::Module& module, const std::string& method,
                  const std::string& argument) {
  const std::optional<torch::jit::Method> found = module.find_method(method);
  return found && found->function().getSchema().argumentIndexWithName(argument).has_value();
}

std::vector<int64_t> all(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = i;
  }
  return out;
}

jit::Module clone_module(const jit::Module& module, const std::set<std::string>& changing) {
  // A module needs its own type when it or a module inside it changes shape.
  Cloner cloner([&changing](const std::string& path) {
    if (path.empty()) {
      return true;
    }
    const auto next = changing.lower_bound(path);
    return next != changing.end() &&
           (*next == path || next->compare(0, path.size() + 1, path + ".") == 0);
  });
  try {
    return cloner.clone(module, "");
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kUnsupported,
                     std::string("cannot copy the model to rebuild it: ") +
                         e.what_without_backtrace());
  }
}

std::vector<ShrunkLayer> shrink_layers(jit::Module& module, const ChannelPlan& plan) {
  std::vector<ShrunkLayer> shrunk;
  for (const std::string& name : plan.layer_order) {
    const LayerPlan& p = plan.layers.at(name);
    if (!p.changed()) {
      continue;
    }
    jit::Module layer = submodule(module, name);
    const std::vector<int64_t> keep_out = p.keep_out.empty() ? all(p.out_channels) : p.keep_out;
    const std::vector<int64_t> keep_in = p.keep_in.empty() ? all(p.in_channels) : p.keep_in;
    const at::Tensor out_index = index(keep_out);
    const at::Tensor in_index = index(keep_in);
    ShrunkLayer record{name, p.op_type, shape_of(layer), {}, keep_out, keep_in};
    const auto n_out = static_cast<int64_t>(keep_out.size());
    const auto n_in = static_cast<int64_t>(keep_in.size());
    switch (p.kind) {
      case LayerKind::kConv:
      case LayerKind::kLinear: {
        set_tensor(layer, "weight", [&](const at::Tensor& w) {
          return w.index_select(0, out_index).index_select(1, in_index);
        });
        set_tensor(layer, "bias", [&](const at::Tensor& b) { return b.index_select(0, out_index); });
        if (p.kind == LayerKind::kConv) {
          set_int(layer, "in_channels", n_in);
          set_int(layer, "out_channels", n_out);
        } else {
          set_int(layer, "in_features", n_in);
          set_int(layer, "out_features", n_out);
        }
        break;
      }
      case LayerKind::kGroupedConv: {
        // Output row o of group q reads only group q's inputs: pick, per row, the positions
        // within that group that stay (every group keeps the same number).
        const int64_t in_per_group = p.in_channels / p.groups;
        const int64_t out_per_group = p.out_channels / p.groups;
        std::vector<std::vector<int64_t>> positions(static_cast<size_t>(p.groups));
        for (const int64_t i : keep_in) {
          positions[static_cast<size_t>(i / in_per_group)].push_back(i % in_per_group);
        }
        set_tensor(layer, "weight", [&](const at::Tensor& w) {
          std::vector<at::Tensor> rows;
          for (const int64_t o : keep_out) {
            rows.push_back(w[o].index_select(
                0, index(positions[static_cast<size_t>(o / out_per_group)])));
          }
          return at::stack(rows);
        });
        set_tensor(layer, "bias", [&](const at::Tensor& b) { return b.index_select(0, out_index); });
        set_int(layer, "in_channels", n_in);
        set_int(layer, "out_channels", n_out);
        break;
      }
      case LayerKind::kDepthwiseConv: {
        set_tensor(layer, "weight", [&](const at::Tensor& w) { return w.index_select(0, out_index); });
        set_tensor(layer, "bias", [&](const at::Tensor& b) { return b.index_select(0, out_index); });
        set_int(layer, "in_channels", n_out);
        set_int(layer, "out_channels", n_out);
        set_int(layer, "groups", n_out);
        set_groups_in_graphs(layer, p.out_channels, n_out);
        break;
      }
      case LayerKind::kBatchNorm: {
        for (const char* tensor : {"weight", "bias", "running_mean", "running_var"}) {
          set_tensor(layer, tensor,
                     [&](const at::Tensor& t) { return t.index_select(0, out_index); });
        }
        set_int(layer, "num_features", n_out);
        break;
      }
    }
    record.weight_shape_after = shape_of(layer);
    shrunk.push_back(std::move(record));
  }
  return shrunk;
}

}  // namespace lithe::host::speedup_detail
