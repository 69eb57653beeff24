// FLOPs and parameters per module call (NNI count_flops_params, reference §4.3). NNI hooks the
// modules and runs them; Lithe reads every call of a counted module from the inlined forward
// graph and takes its input and output shapes from the tensors the call's boundary values take
// on one zero input (graph_trace), so no hook, wrapper or mask buffer is ever added to the model
// (departure 4), and masks are read from the caller's NamedMasks instead of the model.
#include "lithe/host/graph/flops_counter.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/scope.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/graph/op_table.h"
#include "lithe/sdk/error.h"
#include "lithe/host/graph/submodule.h"

namespace lithe::host {
namespace {

namespace jit = torch::jit;

// torch.nn classes counted per mode. Exact classes, as NNI's `type(m) in ops`: a user subclass
// has its own class name and is not counted.
const std::set<std::string>& counted_types(FlopsMode mode) {
  static const std::set<std::string> kDefault = {"Conv1d", "Conv2d", "Conv3d", "Linear"};
  static const std::set<std::string> kFull = [] {
    std::set<std::string> types = kDefault;
    types.insert({"ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"});
    types.insert({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LeakyReLU"});
    types.insert({"AvgPool1d", "AvgPool2d", "AvgPool3d"});
    types.insert({"AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d"});
    types.insert({"Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"});
    return types;
  }();
  return mode == FlopsMode::kFull ? kFull : kDefault;
}

bool is_torch_nn_class(const jit::Module& module, const std::string& op_type) {
  const auto name = module.type()->name();
  // Scripting mangles a class per distinct set of constants
  // ("__torch__.torch.nn.modules.conv.___torch_mangle_3.Conv2d"): check the prefix and the
  // last atom only.
  return name && name->name() == op_type &&
         name->qualifiedName().rfind("__torch__.torch.nn.modules.", 0) == 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (const int64_t d : shape) {
    text += (text.empty() ? "" : "x") + std::to_string(d);
  }
  return text.empty() ? "-" : text;
}

int64_t product(const std::vector<int64_t>& sizes, size_t from) {
  int64_t p = 1;
  for (size_t i = from; i < sizes.size(); ++i) {
    p *= sizes[i];
  }
  return p;
}

std::vector<int64_t> sizes_of(const at::Tensor& t) { return t.sizes().vec(); }


std::optional<at::Tensor> tensor_attr(const jit::Module& module, const std::string& name) {
  if (!module.hasattr(name)) {
    return std::nullopt;
  }
  const c10::IValue value = module.attr(name);
  return value.isTensor() ? std::optional<at::Tensor>(value.toTensor()) : std::nullopt;
}

// A scripted torch.nn module keeps __constants__ (Upsample's mode) as class constants.
std::optional<c10::IValue> constant_or_attr(const jit::Module& module, const std::string& name) {
  if (module.type()->hasConstant(name)) {
    return module.type()->getConstant(name);
  }
  if (module.hasattr(name)) {
    return module.attr(name);
  }
  return std::nullopt;
}

// Restores, whatever happens in between, every module's training flag and every tensor
// attribute (parameters and buffers: the same tensor object and its values). The counting
// forward runs in evaluation mode and should change nothing; this makes "counting never
// changes the model" (departure 4) hold even for a forward that updates its own state.
class ModelStateGuard {
 public:
  explicit ModelStateGuard(const jit::Module& root) {
    for (const jit::Module& m : root.modules()) {
      const auto& type = m.type();
      for (size_t slot = 0; slot < type->numAttributes(); ++slot) {
        const c10::IValue value = m._ivalue()->getSlot(slot);
        if (type->getAttributeName(slot) == "training" && value.isBool()) {
          flags_.push_back({m, slot, value.toBool()});
        } else if (value.isTensor()) {
          const at::Tensor& t = value.toTensor();
          tensors_.push_back({m, slot, t, t.defined() ? t.detach().clone() : t});
        }
      }
    }
  }
  ModelStateGuard(const ModelStateGuard&) = delete;
  ModelStateGuard& operator=(const ModelStateGuard&) = delete;
  ~ModelStateGuard() {
    at::NoGradGuard no_grad;
    for (Flag& f : flags_) {
      f.module._ivalue()->setSlot(f.slot, f.value);
    }
    for (Saved& s : tensors_) {
      const c10::IValue now = s.module._ivalue()->getSlot(s.slot);
      if (!now.isTensor() || !now.toTensor().is_same(s.object)) {
        s.module._ivalue()->setSlot(s.slot, s.object);
      }
      if (s.object.defined() && !s.object.equal(s.copy)) {
        s.object.detach().copy_(s.copy);
      }
    }
  }

 private:
  struct Flag {
    jit::Module module;
    size_t slot;
    bool value;
  };
  struct Saved {
    jit::Module module;
    size_t slot;
    at::Tensor object;
    at::Tensor copy;
  };
  std::vector<Flag> flags_;
  std::vector<Saved> tensors_;
};

// One call of one module in the inlined graph: the top-level nodes it spans, in graph order.
struct ModuleCall {
  std::string name;
  std::string op_type;
  size_t last = 0;   // graph position of its last top-level node: where the call returns
  size_t depth = 0;  // nesting depth of the module (scopes_of index)
  std::vector<const jit::Node*> nodes;
  std::unordered_set<const jit::Node*> node_set;
};

const jit::Node* top_level_of(const jit::Node* node, const jit::Block* top) {
  while (node->owningBlock() != top) {
    node = node->owningBlock()->owningNode();
  }
  return node;
}

void visit_nested(const jit::Node* node, const std::function<void(const jit::Node*)>& visit) {
  visit(node);
  for (const jit::Block* block : node->blocks()) {
    for (const jit::Node* inner : block->nodes()) {
      visit_nested(inner, visit);
    }
  }
}

bool is_tensor(const jit::Value* value) {
  return value->type()->kind() == c10::TypeKind::TensorType;
}

// The calls of counted modules in the order they return, which is the order NNI's forward
// hooks append results (a call nested in another returns first). `inside_control_flow` receives
// counted modules whose calls have no top-level node (they run in an If/Loop of an enclosing
// forward).
std::vector<ModuleCall> find_calls(const jit::Graph& graph, const std::set<std::string>& types,
                                   std::vector<std::string>* inside_control_flow) {
  std::map<std::string, ModuleCall> calls;
  std::map<std::string, std::string> nested_only;  // key -> module name
  size_t position = 0;
  for (const jit::Node* top : graph.nodes()) {
    visit_nested(top, [&](const jit::Node* node) {
      // Constants belong to no call: ConstantPooling in the callees' optimized graphs hoists
      // them to the top of their graph, ahead of earlier calls' nodes, and shares them.
      if (node->kind() == c10::prim::Constant) {
        return;
      }
      const std::vector<graph_trace::Scope> scopes = graph_trace::scopes_of(node);
      for (size_t i = 0; i < scopes.size(); ++i) {
        if (types.count(scopes[i].op_type) == 0) {
          continue;
        }
        if (node != top) {
          nested_only.emplace(scopes[i].call, scopes[i].module);
          continue;
        }
        ModuleCall& call = calls[scopes[i].call];
        call.name = scopes[i].module;
        call.op_type = scopes[i].op_type;
        call.last = std::max(call.last, position);
        call.depth = i;
        call.nodes.push_back(node);
        call.node_set.insert(node);
      }
    });
    ++position;
  }
  for (const auto& [key, name] : nested_only) {
    if (calls.count(key) == 0) {
      inside_control_flow->push_back(name);
    }
  }
  std::vector<ModuleCall> ordered;
  for (auto& [key, call] : calls) {
    ordered.push_back(std::move(call));
  }
  std::sort(ordered.begin(), ordered.end(), [](const ModuleCall& a, const ModuleCall& b) {
    return a.last != b.last ? a.last < b.last : a.depth > b.depth;
  });
  return ordered;
}

// The first tensor the call consumes that is made outside it (NNI's x[0]), and the tensor it
// makes that is used outside it or returned (NNI's y).
std::pair<const jit::Value*, const jit::Value*> call_boundary(const ModuleCall& call,
                                                              const jit::Graph& graph) {
  const jit::Block* top = graph.block();
  const jit::Value* input = nullptr;
  for (const jit::Node* node : call.nodes) {
    visit_nested(node, [&](const jit::Node* inner) {
      for (const jit::Value* value : inner->inputs()) {
        if (input == nullptr && is_tensor(value) &&
            call.node_set.count(top_level_of(value->node(), top)) == 0) {
          input = value;
        }
      }
    });
    if (input != nullptr) {
      break;
    }
  }
  const jit::Value* output = nullptr;
  for (const jit::Node* node : call.nodes) {
    for (const jit::Value* value : node->outputs()) {
      if (output != nullptr || !is_tensor(value)) {
        continue;
      }
      for (const jit::Use& use : value->uses()) {
        if (call.node_set.count(top_level_of(use.user, top)) == 0) {
          output = value;
          break;
        }
      }
    }
  }
  return {input, output};
}

struct Counted {
  int64_t flops = 0;
  std::vector<int64_t> weight_shape;
  int64_t params = 0;
};

// floor(mask.sum() / per_output_channel): the output channels (features) a weight mask keeps
// (NNI floors the same way, fine-grained masks give fractional counts).
int64_t kept_outputs(const at::Tensor& mask, int64_t per_output_channel) {
  const double kept = mask.to(at::kDouble).sum().item<double>();
  return static_cast<int64_t>(std::floor(kept / static_cast<double>(per_output_channel)));
}

Counted count_call(const jit::Module& module, const std::string& op_type,
                   const std::vector<int64_t>& x, const std::vector<int64_t>& y, bool full,
                   const sdk::Masks* mask) {
  Counted out;
  const std::optional<at::Tensor> weight = tensor_attr(module, "weight");
  const std::optional<at::Tensor> bias = tensor_attr(module, "bias");
  if (weight && weight->defined()) {
    out.weight_shape = sizes_of(*weight);
  }
  for (const at::Tensor& p : module.parameters()) {
    out.params += p.numel();
  }
  const bool has_bias = bias.has_value() && bias->defined();
  const bool transposed = op_type.rfind("ConvTranspose", 0) == 0;
  if (op_type.rfind("Conv", 0) == 0) {
    LITHE_CHECK(weight && weight->dim() >= 3 && y.size() >= 2, sdk::Errc::kInvalidModel, op_type,
                " has no weight of rank >= 3 or its output ", shape_text(y),
                " has no channel dimension");
    const std::vector<int64_t> w = sizes_of(*weight);
    const int64_t kernel = product(w, 2);
    const int64_t out_spatial = product(y, 2);
    int64_t cout = y[1];
    // Conv weight: [cout, cin/groups, k...]; ConvTranspose weight: [cin, cout/groups, k...].
    // An unbatched input (libtorch accepts [C, H, W]) has no batch dim to skip: refuse it rather
    // than read the wrong sizes.
    LITHE_CHECK(x.size() == w.size() && y.size() == w.size(), sdk::Errc::kShapeMismatch, op_type,
                " expects a batched input of rank ", w.size(), ", got ", shape_text(x),
                " (--input-shape must start with the batch size)");
    const int64_t cin = transposed ? w[0] : x.at(1);
    const int64_t groups = transposed ? y[1] / w[1] : x.at(1) / w[1];
    LITHE_CHECK(groups >= 1, sdk::Errc::kShapeMismatch, op_type, " with weight ", shape_text(w),
                " cannot read an input of shape ", shape_text(x));
    if (mask != nullptr) {
      // Weights per output channel: weight.size(1)·prod(kernel) for a convolution (in_channels
      // / groups, so depthwise convolutions count 1 input channel; NNI divides by in_channels).
      cout = kept_outputs(mask->weight, weight->numel() / y[1]);
    }
    out.flops = cout * out_spatial * kernel * cin / groups;
    if (full && has_bias) {
      out.flops += cout * out_spatial;
    }
  } else if (op_type == "Linear") {
    LITHE_CHECK(weight && weight->dim() == 2, sdk::Errc::kInvalidModel, "Linear has no 2-D weight");
    const int64_t in = weight->size(1);
    int64_t features = weight->size(0);
    if (mask != nullptr) {
      features = kept_outputs(mask->weight, in);
    }
    out.flops = features * in + (full && has_bias ? features : 0);
  } else if (op_type.rfind("BatchNorm", 0) == 0) {
    out.flops = 2 * product(x, 0);
  } else if (op_type == "LeakyReLU") {
    out.flops = product(x, 0);
  } else if (op_type.rfind("AvgPool", 0) == 0) {
    out.flops = product(y, 0);
  } else if (op_type.rfind("AdaptiveAvgPool", 0) == 0) {
    LITHE_CHECK(x.size() == y.size() && x.size() >= 2, sdk::Errc::kInvalidModel, op_type, " input ",
                shape_text(x), " and output ", shape_text(y), " differ in rank");
    int64_t window = 1;  // NNI: prod(in_spatial // output_size) additions, then one division
    for (size_t i = 2; i < x.size(); ++i) {
      window *= y[i] == 0 ? 0 : x[i] / y[i];
    }
    out.flops = (window + 1) * product(y, 0);
  } else if (op_type.rfind("Upsampl", 0) == 0) {
    const std::optional<c10::IValue> mode = constant_or_attr(module, "mode");
    const std::string name = mode && mode->isString() ? mode->toStringRef() : std::string();
    static const std::map<std::string, int64_t> kPerOutput = {
        {"linear", 5},  // op-name: nn.Upsample's mode, not the plugin
        {"bilinear", 11}, {"bicubic", 224 + 35}, {"trilinear", 13 * 2 + 5}};
    const auto factor = kPerOutput.find(name);
    out.flops = factor == kPerOutput.end() ? 0 : factor->second * product(y, 0);
  } else {
    LITHE_INTERNAL_ASSERT(false);
  }
  return out;
}

// Every mask must name a module with a weight of the mask's shape (and a bias of the bias
// mask's shape); returns them by module name.
std::map<std::string, const sdk::Masks*> check_masks(const jit::Module& root,
                                                     const NamedMasks& masks,
                                                     const std::string& source) {
  std::map<std::string, const sdk::Masks*> by_name;
  for (const auto& [name, mask] : masks) {
    const std::optional<jit::Module> module = find_submodule(root, name);
    LITHE_CHECK(module.has_value() && !name.empty(), sdk::Errc::kInvalidModel, source, ": layer '",
                name, "' names no module of the model");
    const std::optional<at::Tensor> weight = tensor_attr(*module, "weight");
    LITHE_CHECK(weight.has_value() && weight->defined(), sdk::Errc::kInvalidModel, source,
                ": layer '", name, "' has a weight mask but the module has no weight");
    LITHE_CHECK(mask.weight.defined() && mask.weight.sizes() == weight->sizes(),
                sdk::Errc::kShapeMismatch, source, ": layer '", name, "': weight mask shape ",
                mask.weight.defined() ? shape_text(sizes_of(mask.weight)) : "undefined",
                " does not match the weight shape ", shape_text(sizes_of(*weight)));
    if (mask.bias.has_value() && mask.bias->defined()) {
      const std::optional<at::Tensor> bias = tensor_attr(*module, "bias");
      LITHE_CHECK(bias.has_value() && bias->defined(), sdk::Errc::kShapeMismatch, source,
                  ": layer '", name, "' has a bias mask of shape ",
                  shape_text(sizes_of(*mask.bias)), " but the module has no bias");
      LITHE_CHECK(mask.bias->sizes() == bias->sizes(), sdk::Errc::kShapeMismatch, source,
                  ": layer '", name, "': bias mask shape ", shape_text(sizes_of(*mask.bias)),
                  " does not match the bias shape ", shape_text(sizes_of(*bias)));
    }
    by_name[name] = &mask;
  }
  return by_name;
}

}  // namespace

const char* flops_mode_name(FlopsMode mode) {
  return mode == FlopsMode::kFull ? "full" : mode == FlopsMode::kOps ? "ops" : "default";
}

FlopsMode parse_flops_mode(const std::string& value, const std::string& option) {
  if (value == "default") {
    return FlopsMode::kDefault;
  }
  if (value == "ops") {
    return FlopsMode::kOps;
  }
  LITHE_CHECK(value == "full", sdk::Errc::kInvalidConfig, option,
              " must be 'default', 'full' or 'ops', got '", value, "'");
  return FlopsMode::kFull;
}

namespace {

// kOps: every op call of the forward as described for exactly this input shape (the branches
// its shapes decide folded), by the op table's rules.
FlopsReport count_op_flops(const torch::jit::Module& module, const at::Tensor& input,
                           const std::map<std::string, const sdk::Masks*>& mask_of) {
  graph_trace::Trace trace;
  {
    ModelStateGuard restore(module);
    jit::Module handle = module;  // shares the object
    handle.eval();
    trace = graph_trace::trace_forward(handle, input, graph_trace::InputShape::kFixed);
  }
  const graph_trace::ValueTensors& values = trace.values;
  // An Optional[Tensor] attribute (a convolution's bias) is not among the recorded tensors:
  // read it from the module.
  std::map<const jit::Value*, at::Tensor> attributes;
  ops::OpCall call;
  call.tensor = [&](const jit::Value* v) -> const at::Tensor* {
    if (const auto found = values.find(v); found != values.end()) {
      return found->second.defined() ? &found->second : nullptr;
    }
    if (const auto found = attributes.find(v); found != attributes.end()) {
      return found->second.defined() ? &found->second : nullptr;
    }
    at::Tensor& attribute = attributes[v];
    if (v->node()->kind() == c10::prim::GetAttr) {
      const std::optional<std::string> owner = graph_trace::module_path(v->node()->input());
      const std::optional<jit::Module> sub =
          owner ? find_submodule(module, *owner) : std::nullopt;
      const std::string& name = v->node()->s(c10::attr::name);
      if (sub && sub->hasattr(name) && sub->attr(name).isTensor()) {
        attribute = sub->attr(name).toTensor();
      }
    }
    return attribute.defined() ? &attribute : nullptr;
  };
  const auto first_tensor = [&](const auto& list) -> std::vector<int64_t> {
    for (const jit::Value* v : list) {
      if (const at::Tensor* t = call.tensor(v)) {
        return sizes_of(*t);
      }
    }
    return {};
  };
  FlopsReport report;
  std::map<std::string, int64_t> uncounted;
  const jit::Block* top = trace.graph->block();
  for (const jit::Node* top_node : trace.graph->nodes()) {
    visit_nested(top_node, [&](const jit::Node* node) {
      // Structural nodes and scalar queries (is_grad_enabled, int arithmetic) compute nothing.
      const bool makes_tensor =
          std::any_of(node->outputs().begin(), node->outputs().end(),
                      [](const jit::Value* v) { return graph_trace::holds_tensors(v->type()); });
      if (node->kind().is_prim() || !makes_tensor) {
        return;
      }
      const ops::OpSpec* spec = ops::find_op(node->kind());
      if (spec == nullptr || node != top_node || node->owningBlock() != top) {
        ++uncounted[std::string(node->kind().toQualString()) +
                    (spec == nullptr ? "" : " in a branch or loop")];
        return;
      }
      call.node = node;
      int64_t flops = ops::op_flops(*spec, call);
      if (flops == 0) {
        return;
      }
      const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(node);
      LayerFlops row;
      row.name = scope ? scope->module : "";
      row.op_type = node->kind().toQualString();
      row.input_shape = first_tensor(node->inputs());
      row.output_shape = first_tensor(node->outputs());
      const bool weighted = spec->channels == ops::Channels::kConvolution ||
                            spec->channels == ops::Channels::kLinear;
      if (weighted && call.input(1) != nullptr) {
        const at::Tensor& weight = *call.input(1);
        row.weight_shape = sizes_of(weight);
        const at::Tensor* bias = call.input(2);
        row.params = weight.numel() + (bias != nullptr && bias->defined() ? bias->numel() : 0);
        // A masked layer counts the output channels its mask keeps (as kDefault does).
        const auto mask = mask_of.find(row.name);
        if (mask != mask_of.end() && mask->second->weight.defined() && weight.dim() >= 2 &&
            mask->second->weight.sizes() == weight.sizes()) {
          const int64_t out = weight.size(0);
          const int64_t kept = kept_outputs(mask->second->weight, weight.numel() / out);
          flops = flops / out * kept;
        }
      }
      row.flops = flops;
      report.total_flops += flops;
      report.layers.push_back(std::move(row));
    });
  }
  for (const auto& [op, calls] : uncounted) {
    report.uncounted.push_back(op + " (" + std::to_string(calls) +
                               (calls == 1 ? " call)" : " calls)"));
  }
  std::set<const c10::TensorImpl*> seen;
  for (const at::Tensor& p : module.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) {
      report.total_params += p.numel();
    }
  }
  return report;
}

}  // namespace

FlopsReport count_flops(const torch::jit::Module& module, const std::vector<int64_t>& input_shape,
                        FlopsMode mode, const NamedMasks* masks, const std::string& masks_source) {
  LITHE_CHECK(!input_shape.empty(), sdk::Errc::kInvalidConfig,
              "the input shape must have at least one dimension");
  for (const int64_t d : input_shape) {
    LITHE_CHECK(d >= 1, sdk::Errc::kInvalidConfig, "every input size must be >= 1, got ",
                shape_text(input_shape));
  }
  const std::map<std::string, const sdk::Masks*> mask_of =
      masks != nullptr ? check_masks(module, *masks, masks_source)
                       : std::map<std::string, const sdk::Masks*>{};
  if (mode == FlopsMode::kOps) {
    return count_op_flops(module, at::zeros(input_shape), mask_of);
  }
  const std::set<std::string>& types = counted_types(mode);
  // Shapes as deployed: the graph is read and run in eval mode (`restore` undoes it), so that
  // the branches folded on `self.training` are the ones eval runs.
  graph_trace::Trace trace;
  {
    ModelStateGuard restore(module);
    jit::Module handle = module;  // shares the object
    handle.eval();
    trace = graph_trace::trace_forward(handle, at::zeros(input_shape));
  }
  const std::shared_ptr<jit::Graph>& graph = trace.graph;
  const graph_trace::ValueTensors& values = trace.values;
  std::vector<std::string> inside_control_flow;
  std::vector<ModuleCall> calls = find_calls(*graph, types, &inside_control_flow);
  LITHE_CHECK(inside_control_flow.empty(), sdk::Errc::kUnsupported, "cannot count layer '",
              inside_control_flow.empty() ? "" : inside_control_flow.front(),
              "': it runs inside an if or loop of an enclosing forward, so its input and output "
              "shapes cannot be measured (torch.nn layers with a fused inference kernel, such as "
              "TransformerEncoderLayer, call their submodules only off it); mode 'ops' counts "
              "the ops that run");
  // NNI hooks the root too when its own class is counted (a model that is one nn.Linear).
  const std::string root_type = module.type()->name() ? module.type()->name()->name() : "";
  const bool root_counted = types.count(root_type) != 0 && is_torch_nn_class(module, root_type);

  const auto shape_of = [&](const jit::Value* value, const std::string& layer, const char* what) {
    const auto found = value != nullptr ? values.find(value) : values.end();
    LITHE_CHECK(found != values.end(), sdk::Errc::kUnsupported, "cannot count layer '", layer,
                "': its ", what, " is not a tensor of the forward's top level");
    return sizes_of(found->second);
  };

  FlopsReport report;
  const auto add = [&](const jit::Module& m, const std::string& name, const std::string& type,
                       std::vector<int64_t> x, std::vector<int64_t> y) {
    const auto mask = mask_of.find(name);
    const Counted counted = count_call(m, type, x, y, mode == FlopsMode::kFull,
                                       mask != mask_of.end() ? mask->second : nullptr);
    report.layers.push_back({name, type, std::move(x), std::move(y), counted.weight_shape,
                             counted.flops, counted.params});
  };
  if (root_counted && graph->inputs().size() >= 2 && graph->outputs().size() == 1) {
    add(module, "", root_type, shape_of(graph->inputs()[1], "<root>", "input"),
        shape_of(graph->outputs()[0], "<root>", "output"));
  }
  for (const ModuleCall& call : calls) {
    const std::optional<jit::Module> sub = find_submodule(module, call.name);
    LITHE_CHECK(sub.has_value(), sdk::Errc::kUnsupported, "cannot count layer '", call.name,
                "' (", call.op_type, "): the model's forward reaches it in a way its recorded "
                "call path does not name (a module held by two containers alike)");
    if (!is_torch_nn_class(*sub, call.op_type)) {
      continue;  // a user class that happens to share a torch.nn class name
    }
    const auto [input, output] = call_boundary(call, *graph);
    add(*sub, call.name, call.op_type, shape_of(input, call.name, "input"),
        shape_of(output, call.name, "output"));
  }
  std::map<std::string, int64_t> params_by_name;
  for (const LayerFlops& layer : report.layers) {
    report.total_flops += layer.flops;
    params_by_name[layer.name] = layer.params;
  }
  for (const auto& [name, params] : params_by_name) {
    report.total_params += params;
  }
  return report;
}

std::string format_flops_table(const FlopsReport& report) {
  const std::vector<std::string> headers = {"Index",  "Name",         "Type",  "Input",
                                            "Output", "Weight shape", "FLOPs", "#Params"};
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.layers.size(); ++i) {
    const LayerFlops& l = report.layers[i];
    rows.push_back({std::to_string(i), l.name.empty() ? "<root>" : l.name, l.op_type,
                    shape_text(l.input_shape), shape_text(l.output_shape),
                    shape_text(l.weight_shape), std::to_string(l.flops), std::to_string(l.params)});
  }
  std::vector<size_t> widths(headers.size());
  for (size_t c = 0; c < headers.size(); ++c) {
    widths[c] = headers[c].size();
    for (const auto& row : rows) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  std::ostringstream out;
  const auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      // Numbers right-aligned (Index, FLOPs, #Params), text left-aligned.
      const bool numeric = c == 0 || c >= 6;
      const std::string pad(widths[c] - cells[c].size(), ' ');
      out << (c == 0 ? "" : "  ") << (numeric ? pad + cells[c] : cells[c] + pad);
    }
    out << "\n";
  };
  line(headers);
  for (const auto& row : rows) {
    line(row);
  }
  out << "FLOPs total: " << report.total_flops << "\n";
  out << "#Params total: " << report.total_params << "\n";
  if (!report.uncounted.empty()) {
    out << "Not counted:";
    for (size_t i = 0; i < report.uncounted.size(); ++i) {
      out << (i == 0 ? " " : ", ") << report.uncounted[i];
    }
    out << "\n";
  }
  return out.str();
}

std::string flops_report_json(const FlopsReport& report, FlopsMode mode) {
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const LayerFlops& l : report.layers) {
    layers.push_back({{"name", l.name},
                      {"type", l.op_type},
                      {"input_shape", l.input_shape},
                      {"output_shape", l.output_shape},
                      {"weight_shape", l.weight_shape},
                      {"flops", l.flops},
                      {"params", l.params}});
  }
  nlohmann::ordered_json out = {{"mode", flops_mode_name(mode)},
                                {"layers", std::move(layers)},
                                {"total_flops", report.total_flops},
                                {"total_params", report.total_params}};
  if (mode == FlopsMode::kOps) {
    out["uncounted"] = report.uncounted;
  }
  return out.dump(2);
}

}  // namespace lithe::host
