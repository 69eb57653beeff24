// BatchNorm folding (batchnorm_folding.h): a rewrite of module classes' forward
// graphs, where each class is rewritten once for all its instances.
#include "lithe/host/model/batchnorm_folding.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lithe/host/graph/convolution_type.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

namespace jit = torch::jit;

// One `self.<bn>(self.<conv>(x))` of a class's forward.
struct Pattern {
  jit::Node *conv_call;
  jit::Node *bn_call;
  std::string conv;  // attribute names on self
  std::string bn;
};

// The attribute of `self` a call's receiver is (`self.conv1`), or nullopt.
std::optional<std::string> receiver(const jit::Node *call) {
  if (call->kind() != c10::prim::CallMethod || call->s(c10::attr::name) != "forward" ||
      call->inputs().size() != 2) {
    return std::nullopt;
  }
  const jit::Node *get = call->input(0)->node();
  if (get->kind() != c10::prim::GetAttr || get->input() != call->owningGraph()->inputs().at(0)) {
    return std::nullopt;
  }
  return get->s(c10::attr::name);
}

bool is_batchnorm2d(const jit::Module &module) {
  const auto name = module.type()->name();
  return name && name->name() == "BatchNorm2d" &&
         name->qualifiedName().rfind("__torch__.torch.nn.modules.", 0) == 0;
}

std::optional<double> number(const jit::Module &module, const std::string &name) {
  c10::optional<c10::IValue> value;
  if (module.hasattr(name)) {
    value = module.attr(name);
  } else {
    value = module.type()->findConstant(name);
  }
  if (value && value->isDouble()) {
    return value->toDouble();
  }
  return std::nullopt;
}

// Why `bn` cannot be folded into `conv` (empty when it can).
std::string why_not(const jit::Module &conv, const jit::Module &bn) {
  if (!convolution_type(conv.type(), 2)) {
    return "the module called before it is not a Conv2d";
  }
  if (!is_batchnorm2d(bn)) {
    return "it is not torch.nn's BatchNorm2d";
  }
  for (const char *stat : {"running_mean", "running_var"}) {
    if (!bn.hasattr(stat) || !bn.attr(stat).isTensor()) {
      return std::string("it has no ") + stat + " (track_running_stats=False)";
    }
  }
  if (!number(bn, "eps")) {
    return "its eps is not a float";
  }
  const c10::TypePtr bias_type = conv.type()->findAttribute("bias");
  if (!bias_type || !c10::TensorType::get()->isSubtypeOf(*bias_type)) {
    return "the convolution's bias attribute cannot hold a tensor";
  }
  const at::Tensor weight = conv.attr("weight").toTensor();
  if (bn.attr("running_mean").toTensor().numel() != weight.size(0)) {
    return "it normalizes " + std::to_string(bn.attr("running_mean").toTensor().numel()) +
           " channels, the convolution has " + std::to_string(weight.size(0));
  }
  return {};
}

void fold(jit::Module &conv, const jit::Module &bn) {
  const at::Tensor weight = conv.attr("weight").toTensor();
  const auto as_double = [](const c10::IValue &v) { return v.toTensor().detach().to(at::kDouble); };
  const at::Tensor mean = as_double(bn.attr("running_mean"));
  const at::Tensor var = as_double(bn.attr("running_var"));
  const int64_t channels = mean.numel();
  const at::Tensor gamma = bn.attr("weight").isTensor() ? as_double(bn.attr("weight"))
                                                        : at::ones({channels}, at::kDouble);
  const at::Tensor beta =
      bn.attr("bias").isTensor() ? as_double(bn.attr("bias")) : at::zeros({channels}, at::kDouble);
  const at::Tensor factor = gamma / at::sqrt(var + *number(bn, "eps"));
  const c10::IValue bias = conv.attr("bias");
  const at::Tensor b = bias.isTensor() ? as_double(bias) : at::zeros({channels}, at::kDouble);
  std::vector<int64_t> shape(static_cast<size_t>(weight.dim()), 1);
  shape[0] = channels;
  at::NoGradGuard no_grad;
  conv.setattr("weight", (weight.detach().to(at::kDouble) * factor.view(shape)).to(weight.dtype()));
  conv.setattr("bias", ((b - mean) * factor + beta).to(weight.dtype()));
}

std::vector<Pattern> patterns(const std::shared_ptr<jit::Graph> &graph) {
  std::map<std::string, int> calls;  // calls per attribute of self
  for (const jit::Node *n : graph->nodes()) {
    if (const std::optional<std::string> name = receiver(n)) {
      ++calls[*name];
    }
  }
  std::vector<Pattern> found;
  for (jit::Node *n : graph->nodes()) {
    const std::optional<std::string> bn = receiver(n);
    if (!bn) {
      continue;
    }
    jit::Node *before = n->input(1)->node();
    const std::optional<std::string> conv = receiver(before);
    if (!conv || *conv == *bn || n->input(1)->uses().size() != 1 || calls[*conv] != 1 ||
        calls[*bn] != 1) {
      continue;
    }
    found.push_back({before, n, *conv, *bn});
  }
  return found;
}

}  // namespace

BatchNormFolding fold_batchnorms(jit::Module &model) {
  // Instances per class: a class's forward is shared by all of them.
  std::map<c10::ClassType *, std::vector<std::pair<std::string, jit::Module>>> instances;
  for (const jit::NameModule &item : model.named_modules()) {
    instances[item.value.type().get()].emplace_back(item.name, item.value);
  }
  const auto path = [](const std::string &parent, const std::string &atom) {
    return parent.empty() ? atom : parent + "." + atom;
  };
  BatchNormFolding result;
  std::set<const c10::ivalue::Object *> folded_convs;
  for (auto &[cls, members] : instances) {
    jit::Module &first = members.front().second;
    // Every method: forward may call its own helpers (torchvision's
    // ResNet._forward_impl).
    const std::vector<jit::Function *> methods = cls->methods();
    for (jit::Function *method : methods) {
      // Edited on a copy, which then replaces the method: a graph that already
      // ran keeps its compiled plan, so editing it in place would not change
      // what runs.
      const jit::GraphFunction &old = jit::toGraphFunction(*method);
      const std::shared_ptr<jit::Graph> graph = old.graph()->copy();
      bool changed = false;
      for (const Pattern &p : patterns(graph)) {
        const c10::IValue first_bn = first.attr(p.bn);
        if (!first_bn.isModule() || !is_batchnorm2d(first_bn.toModule())) {
          continue;  // not a BatchNorm call
        }
        std::string reason;
        for (const auto &[name, module] : members) {
          const c10::IValue conv = module.attr(p.conv);
          const c10::IValue bn = module.attr(p.bn);
          if (!conv.isModule() || !bn.isModule()) {
            reason = "the modules called are not submodules";
          } else if (folded_convs.count(conv.toObject().get()) != 0) {
            reason = "its convolution is shared with another fold";
          } else {
            reason = why_not(conv.toModule(), bn.toModule());
          }
          if (!reason.empty()) {
            break;
          }
        }
        if (!reason.empty()) {
          for (const auto &[name, module] : members) {
            result.kept.push_back({path(name, p.bn), reason});
          }
          continue;
        }
        for (auto &[name, module] : members) {
          jit::Module conv = module.attr(p.conv).toModule();
          fold(conv, module.attr(p.bn).toModule());
          folded_convs.insert(conv._ivalue().get());
          result.folded.push_back({path(name, p.conv), path(name, p.bn)});
        }
        jit::Node *bn_getter = p.bn_call->input(0)->node();
        p.bn_call->output()->replaceAllUsesWith(p.conv_call->output());
        p.bn_call->destroy();
        if (!bn_getter->output()->hasUses()) {
          bn_getter->destroy();
        }
        changed = true;
      }
      if (changed) {
        const c10::QualifiedName name = old.qualname();
        const c10::FunctionSchema schema = old.getSchema();
        const std::shared_ptr<jit::CompilationUnit> unit = first._ivalue()->compilation_unit();
        cls->unsafeRemoveMethod(name.name());
        unit->unsafeRemoveMethod(name);
        jit::Function *replacement = unit->create_function(name, graph);
        replacement->setSchema(schema);
        cls->addMethod(replacement);
      }
    }
  }
  return result;
}

}  // namespace lithe::host
