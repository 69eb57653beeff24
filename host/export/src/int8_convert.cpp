// Native int8 conversion (int8_convert.h): a rewrite of the model's inlined forward in which
// quantized Conv2d/Linear calls become libtorch's quantized kernels on prepacked weights, and
// each value knows whether an int8 form of it exists. The new model is a fresh module holding
// only what that forward reads (prepacked weights, the float tensors of the other layers), so
// the float copies of int8 weights are not written.
#include "lithe/host/export/int8_convert.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <sstream>
#include <utility>
#include <vector>

#include "lithe/host/graph/convolution_type.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/graph/submodule.h"
#include "lithe/host/session/quantization_session.h"
#include "lithe/sdk/error.h"
#include "onnx_quantization.h"

namespace lithe::host {
namespace {

namespace jit = torch::jit;
using onnx_quantization::LinearGrid;
using onnx_quantization::QuantizedLayer;

constexpr const char* kFailure = "cannot convert to int8";

c10::Symbol op(const char* name) { return c10::Symbol::fromQualString(name); }

bool is_torch_nn_class(const jit::Module& module, const std::string& op_type) {
  const auto name = module.type()->name();
  // Scripting mangles a class per distinct set of constants: check the prefix and last atom.
  return name && name->name() == op_type &&
         name->qualifiedName().rfind("__torch__.torch.nn.modules.", 0) == 0;
}

// "Conv2d" or "Linear" for the layer classes that convert, nullopt for any other.
std::optional<std::string> convertible_type(const jit::Module& module) {
  if (convolution_type(module.type(), 2)) {
    return "Conv2d";
  }
  if (is_torch_nn_class(module, "Linear")) {
    return "Linear";
  }
  return std::nullopt;
}

// Activations are quint8 in libtorch's int8 kernels: codes [0, 255]. A grid of 256 codes is
// that grid whatever its first code (a signed [-128, 127] grid with zero point z is [0, 255]
// with zero point z + 128: the same values); a narrower one would need a clamp.
bool fits_quint8(const LinearGrid& g) { return g.quant_max - g.quant_min == 255; }
double scale_of(const LinearGrid& g) { return g.scale.item<float>(); }
int64_t zero_point_of(const LinearGrid& g) {
  return static_cast<int64_t>(g.zero_point.item<float>());
}
int64_t quint8_zero_point(const LinearGrid& g) { return zero_point_of(g) - g.quant_min; }
bool same_grid(const LinearGrid& a, const LinearGrid& b) {
  return a.quant_min == b.quant_min && a.quant_max == b.quant_max && a.scale.equal(b.scale) &&
         a.zero_point.equal(b.zero_point);
}
// A weight grid's codes as qint8 ([0, 255] codes move down by 128, with their zero points).
int64_t weight_code_shift(const LinearGrid& g) { return g.is_signed() ? 0 : 128; }
bool symmetric_as_qint8(const LinearGrid& g) {
  return (g.zero_point - static_cast<double>(weight_code_shift(g))).abs().max().item<float>() == 0;
}

// The quint8 grid over an observed range [lo, hi], widened to hold 0 (ReLU's zeros, padding).
LinearGrid grid_over(double lo, double hi) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  LinearGrid g;
  g.quant_min = 0;
  g.quant_max = 255;
  const float scale = hi > lo ? static_cast<float>((hi - lo) / 255.0) : 1.0F;
  const double zero = std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0);
  g.scale = at::full({1}, scale, at::kFloat);
  g.zero_point = at::full({1}, static_cast<float>(zero), at::kFloat);
  return g;
}

// A grid for a check before calibration (Int8ConvertOptions::assume_*_observed).
LinearGrid placeholder_grid() { return grid_over(0.0, 1.0); }

std::string range_text(const LinearGrid& g) {
  return "[" + std::to_string(g.quant_min) + ", " + std::to_string(g.quant_max) + "]";
}

// Whether an op writes into (one of) its inputs: an in-place op ("aten::relu_").
bool writes_input(const jit::Node* n) {
  const std::string name = n->kind().toUnqualString();
  return n->kind().is_aten() && !name.empty() && name.back() == '_' && name.rfind("__", 0) != 0;
}
// Whether an in-place op writes into `v` (aten's in-place ops write their first argument).
bool has_writer(const jit::Value* v) {
  return std::any_of(v->uses().begin(), v->uses().end(),
                     [](const jit::Use& u) { return u.offset == 0 && writes_input(u.user); });
}

std::string where(const jit::Node* n) {
  if (n->kind() == c10::prim::Return) {
    return "the model's output";
  }
  std::string text = n->kind().toQualString();
  if (const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(n)) {
    text += " in " + scope->module + " (" + scope->op_type + ")";
  } else {
    text += " in the model's own forward";
  }
  return text;
}

// The value of a constant argument: a constant, or a list built of int constants.
c10::optional<c10::IValue> constant_argument(const jit::Value* v) {
  if (c10::optional<c10::IValue> value = jit::toIValue(v)) {
    return value;
  }
  if (v->node()->kind() != c10::prim::ListConstruct) {
    return c10::nullopt;
  }
  std::vector<int64_t> items;
  for (const jit::Value* item : v->node()->inputs()) {
    const c10::optional<c10::IValue> value = jit::toIValue(item);
    if (!value || !value->isInt()) {
      return c10::nullopt;
    }
    items.push_back(value->toInt());
  }
  return c10::IValue(items);
}

c10::IValue call_op(const char* name, jit::Stack stack) {
  const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  handle.callBoxed(&stack);
  return stack.at(0);
}

bool available(QuantizedEngine engine) {
  const std::vector<QuantizedEngine> engines = available_quantized_engines();
  return std::find(engines.begin(), engines.end(), engine) != engines.end();
}

// An int8 form of a float value of the graph: a quantized tensor on `grid`.
struct Int8Form {
  jit::Value* value = nullptr;
  const LinearGrid* grid = nullptr;
};

class Converter {
 public:
  Converter(const jit::Module& model, const Int8ConvertOptions& options, Int8ConvertReport& report)
      : source_(model.clone()), options_(options), report_(report) {
    source_.eval();
    quantized_ = onnx_quantization::read_quantized_layers(source_, kFailure);
    LITHE_CHECK(!quantized_.empty(), sdk::Errc::kInvalidModel, kFailure,
                ": no layer of the model carries Lithe's quantization state (buffers "
                "lithe_q_*); quantize it first (lithe compress with a quantizer)");
    for (const auto& [name, layer] : quantized_) {
      const jit::Module module = submodule(source_, name);
      const std::optional<std::string> type = convertible_type(module);
      if (type) {
        op_types_[name] = *type;
      } else {
        // Any other module may quantize its output (a residual block's sum, an activation).
        const bool output_only =
            layer.types.size() == 1 && layer.types.count(sdk::QuantType::kOutput) == 1;
        LITHE_CHECK(output_only, sdk::Errc::kUnsupported, kFailure, ": layer '", name, "' (",
                    module.type()->name() ? module.type()->name()->name() : "a module",
                    ") quantizes its input or weight; int8 conversion handles Conv2d and Linear "
                    "layers, and the output of any module (config quant_types); nothing was "
                    "written");
        output_layers_.insert(name);
      }
      for (auto& [quant_type, grid] : quantized_.at(name).types) {
        if (!grid && options_.assume_grids_observed) {
          grid = placeholder_grid();
        } else if (!grid) {
          report_.not_quantized_yet.push_back(name + " " + sdk::quant_type_name(quant_type));
        }
      }
      if (type) {
        read_observed_input_range(name, module);
      }
    }
  }

  // The layer's observed input range (kObservedInputRangeBuffer), as a quint8 grid; before
  // calibration, a placeholder for a layer that will observe it.
  void read_observed_input_range(const std::string& name, const jit::Module& module) {
    const QuantizedLayer& layer = quantized_.at(name);
    if (layer.types.count(sdk::QuantType::kInput) != 0 ||
        layer.types.count(sdk::QuantType::kWeight) == 0) {
      return;  // the quantizer's own input grid, or a layer that observes none
    }
    if (module.hasattr(kObservedInputRangeBuffer) &&
        module.attr(kObservedInputRangeBuffer).isTensor()) {
      const at::Tensor range = module.attr(kObservedInputRangeBuffer).toTensor();
      // Empty: the slot of an instance that observed nothing (a class shared with a layer that
      // did), as absent.
      LITHE_CHECK(range.numel() == 0 || (range.numel() == 2 && range.is_floating_point()),
                  sdk::Errc::kInvalidModel, kFailure, ": layer '", name,
                  "': its observed input range (buffer ", kObservedInputRangeBuffer, ") is a ",
                  range.scalar_type(), range.sizes(),
                  " tensor; it must hold two floating-point values, [min, max]; nothing was "
                  "written");
      if (range.numel() == 2) {
        const at::Tensor values = range.detach().to(at::kDouble).cpu().contiguous();
        const double lo = values[0].item<double>();
        const double hi = values[1].item<double>();
        LITHE_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, sdk::Errc::kInvalidModel,
                    kFailure, ": layer '", name, "': its observed input range (buffer ",
                    kObservedInputRangeBuffer, ") is [", lo, ", ", hi,
                    "]; a range must be finite with min <= max; nothing was written");
        LinearGrid g = grid_over(lo, hi);
        const float scale = g.scale.item<float>();
        LITHE_CHECK(std::isfinite(scale) && scale >= std::numeric_limits<float>::min(),
                    sdk::Errc::kInvalidModel, kFailure, ": layer '", name,
                    "': its observed input range (buffer ", kObservedInputRangeBuffer, ") [", lo,
                    ", ", hi, "] gives the grid step ", scale,
                    "; a step must be a normal float32; nothing was written");
        observed_inputs_[name] = std::move(g);
        return;
      }
    }
    if (options_.assume_input_ranges_observed) {
      observed_inputs_[name] = placeholder_grid();
    }
  }

  jit::Module run() {
    report_.engine = choose_engine();
    if (!options_.fake_quantized) {
      use_quantized_engine(report_.engine);
    }
    graph_ = graph_trace::inline_forward(source_);
    target_ = jit::Module(c10::QualifiedName("__torch__.lithe.Int8Model"),
                          std::make_shared<jit::CompilationUnit>(), /*shouldMangle=*/true);
    target_.register_attribute("training", c10::BoolType::get(), false);
    target_.register_attribute("lithe_quantized_engine", c10::StringType::get(),
                               std::string(quantized_engine_name(report_.engine)));
    self_ = graph_->inputs().at(0);
    find_module_outputs();

    rewrite_block(graph_->block(), /*top_level=*/true);
    refuse_float_layers();
    finish_int8_values();
    move_attributes_to_target();
    count_conversions();

    self_->setType(target_.type());
    graph_->lint();
    jit::Function* forward = target_._ivalue()->compilation_unit()->create_function(
        c10::QualifiedName(*target_.type()->name(), "forward"), graph_);
    target_.type()->addMethod(forward);
    return target_;
  }

 private:
  // ---- engine ---------------------------------------------------------------------------
  QuantizedEngine choose_engine() {
    for (const auto& [name, layer] : quantized_) {
      const auto weight = layer.types.find(sdk::QuantType::kWeight);
      if (weight != layer.types.end() && weight->second && !symmetric_as_qint8(*weight->second)) {
        report_.asymmetric_weights = true;
      }
    }
    if (options_.engine != QuantizedEngine::kAuto) {
      LITHE_CHECK(options_.fake_quantized || available(options_.engine), sdk::Errc::kUnsupported,
                  kFailure, ": this libtorch has no ", quantized_engine_name(options_.engine),
                  " engine; nothing was written");
      return options_.engine;
    }
    const bool symmetric = !report_.asymmetric_weights;
    const bool onednn = available(QuantizedEngine::kOnednn);
    const bool x86 = available(QuantizedEngine::kX86);
    const bool qnnpack = available(QuantizedEngine::kQnnpack);
    LITHE_CHECK(onednn || x86 || qnnpack || options_.fake_quantized, sdk::Errc::kUnsupported,
                kFailure, ": this libtorch has no quantized CPU engine (x86, oneDNN or QNNPACK); "
                "nothing was written");
    // libtorch 2.x's x86 engine picks oneDNN or FBGEMM per op and takes any weight zero point:
    // as fast as oneDNN alone on ResNets, many times faster on small layers (oneDNN alone takes
    // 1 ms for the LeNet's forward, x86 0.08 ms); oneDNN alone takes zero point 0 only, and
    // QNNPACK is several times slower on x86.
    if (x86) {
      return QuantizedEngine::kX86;
    }
    if (onednn && symmetric) {
      return QuantizedEngine::kOnednn;
    }
    return qnnpack ? QuantizedEngine::kQnnpack : QuantizedEngine::kOnednn;
  }

  // A model called int8 is int8: quantized layers left in float are refused unless allowed,
  // in one line, grouped by reason (each reason ends with its fix).
  void refuse_float_layers() const {
    if (options_.fake_quantized || options_.allow_float_layers || report_.float_layers.empty()) {
      return;
    }
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // reason, layers
    std::set<std::string> layers;
    for (const FloatLayer& f : report_.float_layers) {
      layers.insert(f.name);
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& g) { return g.first == f.reason; });
      if (group == groups.end()) {
        groups.push_back({f.reason, {}});
        group = std::prev(groups.end());
      }
      if (std::find(group->second.begin(), group->second.end(), f.name) == group->second.end()) {
        group->second.push_back(f.name);
      }
    }
    std::string text;
    for (const auto& [reason, names] : groups) {
      text += text.empty() ? "" : "; ";
      for (size_t i = 0; i < names.size() && i < 3; ++i) {
        text += (i == 0 ? "" : ", ") + names[i];
      }
      if (names.size() > 3) {
        text += " and " + std::to_string(names.size() - 3) + " more";
      }
      text += ": " + reason;
    }
    throw sdk::Error(sdk::Errc::kUnsupported,
                     std::string(kFailure) + ": " + std::to_string(layers.size()) + " of " +
                         std::to_string(op_types_.size()) +
                         " quantized layers would run their fake quantization in float, not "
                         "int8 (" + text + "); allow that with --allow-float-layers; nothing "
                         "was written");
  }

  // ---- the walk --------------------------------------------------------------------------
  void rewrite_block(jit::Block* block, bool top_level) {
    // Nodes are replaced while walking: take the list first.
    const std::vector<jit::Node*> nodes(block->nodes().begin(), block->nodes().end());
    for (jit::Node* n : nodes) {
      if (fused_.count(n) != 0) {
        continue;  // part of an int8 op made at an earlier node
      }
      if (const std::optional<std::string> layer = layer_call(n)) {
        convert_layer_call(n, *layer, top_level);
      } else {
        for (jit::Block* inner : n->blocks()) {
          rewrite_block(inner, /*top_level=*/false);
        }
        if (top_level && !int8_add(n)) {
          keep_int8(n);
        }
      }
      if (fused_.count(n) == 0) {
        for (jit::Value* v : n->outputs()) {
          apply_module_outputs(v, top_level);
        }
      }
    }
  }

  // ---- outputs of quantized modules of any type ----------------------------------------------
  // The values each call of an output-quantized module returns: made inside the call, read
  // outside it. Innermost module first where calls nest.
  void find_module_outputs() {
    if (output_layers_.empty()) {
      return;
    }
    for (jit::Node* n : graph_->nodes()) {
      const std::vector<graph_trace::Scope> scopes = graph_trace::scopes_of(n);
      for (jit::Value* v : n->outputs()) {
        if (v->type()->kind() != c10::TypeKind::TensorType) {
          continue;
        }
        for (size_t i = scopes.size(); i-- > 0;) {
          if (output_layers_.count(scopes[i].module) == 0) {
            continue;
          }
          const bool leaves =
              std::any_of(v->uses().begin(), v->uses().end(), [&](const jit::Use& u) {
                for (const graph_trace::Scope& s : graph_trace::scopes_of(u.user)) {
                  if (s.call == scopes[i].call) {
                    return false;
                  }
                }
                return true;
              });
          if (leaves) {
            module_outputs_[v].push_back(scopes[i].module);
          }
        }
      }
    }
  }

  // The output grids `v` takes as the value modules return (innermost first), or none.
  std::vector<const LinearGrid*> output_grids(const jit::Value* v) const {
    std::vector<const LinearGrid*> grids;
    const auto it = module_outputs_.find(v);
    if (it != module_outputs_.end()) {
      for (const std::string& layer : it->second) {
        if (const LinearGrid* g = grid(layer, sdk::QuantType::kOutput)) {
          grids.push_back(g);
        }
      }
    }
    return grids;
  }

  void apply_module_outputs(jit::Value* v, bool top_level) {
    if (applied_.insert(v).second) {
      apply_grids(v, output_grids(v), 0, top_level);
    }
  }

  // The fake quantization of `v` on grids[from..], in order. In int8 the first grid quantizes v
  // (or requantizes an int8 form on another grid); the float reference fake-quantizes.
  void apply_grids(jit::Value* v, const std::vector<const LinearGrid*>& grids, size_t from,
                   bool top_level) {
    jit::Value* current = v;  // the value the next grid applies to
    for (size_t i = from; i < grids.size(); ++i) {
      const LinearGrid& g = *grids[i];
      // Once one grid ran as float fake quantization, the enclosing ones follow it in float.
      if (options_.fake_quantized || !top_level || !fits_quint8(g) || current != v) {
        jit::Value* x = float_form(current);
        jit::WithInsertPoint at(x->node()->next());
        jit::Value* fq = fake_quantize(x, g);
        x->replaceAllUsesAfterNodeWith(fq->node(), fq);
        current = fq;
        continue;
      }
      const auto form = int8_.find(v);
      if (form == int8_.end()) {
        jit::WithInsertPoint after(v->node()->next());
        publish(v, quantize(v, g), &g);
      } else if (!same_grid(*form->second.grid, g)) {
        // Requantized: the module's grid over the value an int8 op made on another grid.
        jit::Value* q = form->second.value;
        jit::WithInsertPoint after(q->node()->next());
        jit::Value* d = graph_->insert(c10::aten::dequantize, {q});
        jit::Value* q2 = graph_->insert(
            c10::aten::quantize_per_tensor,
            {d, scale_of(g), quint8_zero_point(g), static_cast<int64_t>(at::kQUInt8)});
        form->second = {q2, &g};
        grids_[q2] = &g;
      }
    }
  }

  // a + b (alpha 1), or relu(a + b), whose result a module returns quantized, on two int8
  // tensors: quantized::add or quantized::add_relu, writing the module's output grid at once.
  bool int8_add(jit::Node* n) {
    if (options_.fake_quantized || (n->kind() != c10::aten::add && n->kind() != c10::aten::add_) ||
        n->inputs().size() != 3) {
      return false;
    }
    const c10::optional<c10::IValue> alpha = jit::toIValue(n->input(2));
    const auto a = int8_.find(n->input(0));
    const auto b = int8_.find(n->input(1));
    if (!alpha || !alpha->isInt() || alpha->toInt() != 1 || a == int8_.end() || b == int8_.end()) {
      return false;
    }
    // In place: nothing else may read the tensor written into.
    if (n->kind() == c10::aten::add_ && n->input(0)->uses().size() != 1) {
      return false;
    }
    jit::Value* result = n->output();
    jit::Node* relu = sole_relu(result);
    if (relu != nullptr && relu->kind() == c10::aten::relu_ && result->uses().size() != 1) {
      relu = nullptr;
    }
    if (relu != nullptr) {
      result = relu->output();
    }
    const std::vector<const LinearGrid*> grids = output_grids(result);
    std::vector<std::string> consumers;
    const LinearGrid* target = grids.empty() ? consumer_grid(result, consumers) : grids.front();
    if (target == nullptr || !fits_quint8(*target)) {
      return false;
    }
    const LinearGrid& g = *target;
    jit::WithInsertPoint at(n);
    const std::string kernel = relu != nullptr ? "quantized::add_relu" : "quantized::add";
    jit::Value* q = graph_->insert(
        op(kernel.c_str()), {a->second.value, b->second.value, scale_of(g), quint8_zero_point(g)});
    replaced_.push_back(n);
    if (relu != nullptr) {
      replaced_.push_back(relu);
      fused_.insert(relu);
    }
    publish(result, q, &g);
    for (const std::string& layer : consumers) {
      note_input_from_range(layer);
    }
    const std::string place = where(n);
    report_.int8_ops.push_back(kernel + place.substr(place.find(" in ")));
    // Modules around the one whose grid the kernel wrote, returning the same value, still apply.
    applied_.insert(result);
    apply_grids(result, grids, 1, /*top_level=*/true);
    return true;
  }

  // A sum no module quantizes, read by quantized layers that would quantize it on their observed
  // input range (a residual block's output, read by the next block's convolutions): the grid
  // they share, which the int8 add writes at once; their names go to `layers`. Other readers (the
  // next block's identity path) read that int8 value. nullptr when no such layer reads `v` or
  // their grids differ.
  const LinearGrid* consumer_grid(const jit::Value* v, std::vector<std::string>& layers) const {
    const LinearGrid* shared = nullptr;
    for (const jit::Use& use : v->uses()) {
      const std::optional<std::string> layer = layer_call(use.user);
      if (!layer || use.offset != 0 || grid(*layer, sdk::QuantType::kInput) != nullptr) {
        continue;
      }
      const auto observed = observed_inputs_.find(*layer);
      if (observed == observed_inputs_.end()) {
        continue;
      }
      if (shared != nullptr && !same_grid(*shared, observed->second)) {
        return nullptr;
      }
      shared = &observed->second;
      if (std::find(layers.begin(), layers.end(), *layer) == layers.end()) {
        layers.push_back(*layer);
      }
    }
    return shared;
  }

  void note_input_from_range(const std::string& layer) {
    auto& from_ranges = report_.inputs_from_ranges;
    if (std::find(from_ranges.begin(), from_ranges.end(), layer) == from_ranges.end()) {
      from_ranges.push_back(layer);
    }
  }

  // The quantized layer whose convolution or linear op `n` is (the op reads the layer's own
  // weight), or nullopt.
  std::optional<std::string> layer_call(const jit::Node* n) const {
    const bool conv = n->kind() == c10::aten::conv2d;
    const bool linear = n->kind() == c10::aten::linear;
    if ((!conv && !linear) || n->inputs().size() < 2) {
      return std::nullopt;
    }
    const jit::Node* getter = n->input(1)->node();
    if (getter->kind() != c10::prim::GetAttr || getter->s(c10::attr::name) != "weight") {
      return std::nullopt;
    }
    const std::optional<std::string> owner = graph_trace::module_path(getter->input());
    if (!owner) {
      return std::nullopt;
    }
    const auto type = op_types_.find(*owner);
    if (type == op_types_.end() || type->second != (conv ? "Conv2d" : "Linear")) {
      return std::nullopt;
    }
    return owner;
  }

  void convert_layer_call(jit::Node* n, const std::string& name, bool top_level) {
    if (options_.fake_quantized) {
      fake_quantize_call(n, name);
      return;
    }
    std::string why;
    if (!top_level) {
      why = "it is called inside control flow";
    } else {
      why = why_not_int8(n, name);
    }
    if (!why.empty()) {
      report_.float_layers.push_back({name, why});
      fake_quantize_call(n, name, /*int8_output=*/top_level);
      return;
    }
    int8_call(n, name);
  }

  const std::optional<LinearGrid>* grid_entry(const std::string& layer, sdk::QuantType type) const {
    const QuantizedLayer& q = quantized_.at(layer);
    const auto it = q.types.find(type);
    return it == q.types.end() ? nullptr : &it->second;
  }
  const LinearGrid* grid(const std::string& layer, sdk::QuantType type) const {
    const std::optional<LinearGrid>* entry = grid_entry(layer, type);
    return entry != nullptr && entry->has_value() ? &**entry : nullptr;
  }

  std::string why_not_int8(const jit::Node* n, const std::string& name) const {
    const auto missing = [&](sdk::QuantType type) -> std::string {
      const std::optional<LinearGrid>* entry = grid_entry(name, type);
      const std::string what = sdk::quant_type_name(type);
      return entry == nullptr
                 ? "its " + what + " is not quantized (config quant_types)"
                 : "its " + what + " passes through unquantized (no range observed yet)";
    };
    // What makes a missing type present: the config, or data.
    const auto fix = [&](sdk::QuantType type) -> std::string {
      return grid_entry(name, type) == nullptr
                 ? std::string(" (add \"") + sdk::quant_type_name(type) + "\" to its quant_types)"
                 : " (calibrate: lithe compress --calibration-batches N)";
    };
    const LinearGrid* weight = grid(name, sdk::QuantType::kWeight);
    if (weight == nullptr) {
      return missing(sdk::QuantType::kWeight) + fix(sdk::QuantType::kWeight);
    }
    const LinearGrid* output = output_grid(n, name);
    if (output == nullptr) {
      return missing(sdk::QuantType::kOutput) +
             ", and no module returns it quantized; int8 kernels write quantized outputs" +
             fix(sdk::QuantType::kOutput);
    }
    if (!fits_quint8(*output)) {
      return "its output grid " + range_text(*output) + " has fewer than quint8's 256 codes";
    }
    const LinearGrid* input = grid(name, sdk::QuantType::kInput);
    if (input != nullptr && !fits_quint8(*input)) {
      return "its input grid " + range_text(*input) + " has fewer than quint8's 256 codes";
    }
    if (input == nullptr && int8_.count(n->input(0)) == 0 && observed_inputs_.count(name) == 0) {
      return missing(sdk::QuantType::kInput) +
             ", no int8 op makes it and no input range was observed (calibrate: lithe compress "
             "--calibration-batches N observes it; or add \"input\" to its quant_types)";
    }
    if (report_.engine == QuantizedEngine::kOnednn && !symmetric_as_qint8(*weight)) {
      return "its weight's zero point is not 0 (as qint8), which the onednn engine requires "
             "(quantize weights symmetrically, or use the x86 engine)";
    }
    if (n->kind() == c10::aten::conv2d) {
      for (size_t i = 3; i <= 6; ++i) {
        const c10::optional<c10::IValue> v = constant_argument(n->input(i));
        if (!v || (i < 6 && !v->isIntList()) || (i == 6 && !v->isInt())) {
          return "its convolution's " +
                 std::string(i == 3   ? "stride"
                             : i == 4 ? "padding"
                             : i == 5 ? "dilation"
                                      : "groups") +
                 " is not a constant list of ints";
        }
      }
    }
    return {};
  }

  // The grid the layer call `n` writes: its own output grid, or else the output grid of the
  // module that returns its result through ReLU/ReLU6-like clamps only (a Conv-BN-ReLU6 block
  // quantizing its output): clamping commutes with rounding to a grid that holds 0, so writing
  // that grid at once and clamping the int8 codes gives the same values.
  const LinearGrid* output_grid(const jit::Node* n, const std::string& name) const {
    if (const LinearGrid* own = grid(name, sdk::QuantType::kOutput)) {
      return own;
    }
    const jit::Value* v = n->output();
    for (int depth = 0; depth < 4; ++depth) {
      const std::vector<const LinearGrid*> grids = output_grids(v);
      if (!grids.empty()) {
        return grids.front();
      }
      if (v->uses().size() != 1) {
        return nullptr;
      }
      const jit::Node* user = v->uses()[0].user;
      if (!is_clamp(user) || user->input(0) != v || user->owningBlock() != graph_->block()) {
        return nullptr;
      }
      v = user->output();
    }
    return nullptr;
  }

  static bool is_clamp(const jit::Node* n) {
    const c10::Symbol k = n->kind();
    if (k == c10::aten::relu || k == c10::aten::relu_) {
      return true;
    }
    if (k != c10::aten::hardtanh && k != c10::aten::hardtanh_) {
      return false;
    }
    const c10::optional<c10::IValue> lo = jit::toIValue(n->input(1));
    const c10::optional<c10::IValue> hi = jit::toIValue(n->input(2));
    return lo && hi && lo->isDouble() && hi->isDouble() && lo->toDouble() <= 0 &&
           hi->toDouble() >= 0;
  }

  // The clamps between a layer call writing a module's grid and that module's output: they run
  // on the int8 codes (keep_int8), exact there because the grid is applied after them.
  void mark_clamp_chain(const jit::Value* v) {
    while (v->uses().size() == 1 && is_clamp(v->uses()[0].user) && output_grids(v).empty()) {
      const jit::Node* user = v->uses()[0].user;
      clamp_chain_.insert(user);
      v = user->output();
    }
  }

  // ---- int8 layer calls --------------------------------------------------------------------
  void int8_call(jit::Node* n, const std::string& name) {
    const LinearGrid& weight_grid = *grid(name, sdk::QuantType::kWeight);
    const LinearGrid& output_grid = *this->output_grid(n, name);
    if (grid(name, sdk::QuantType::kOutput) == nullptr) {
      mark_clamp_chain(n->output());  // the grid is a module's, applied after the clamps
    }
    const LinearGrid* input_grid = grid(name, sdk::QuantType::kInput);
    const bool conv = n->kind() == c10::aten::conv2d;

    jit::WithInsertPoint at(n);
    jit::Value* x = n->input(0);
    jit::Value* qx = nullptr;
    const auto form = int8_.find(x);
    if (input_grid == nullptr && form == int8_.end()) {
      input_grid = &observed_inputs_.at(name);  // why_not_int8 found it
      note_input_from_range(name);
    }
    if (input_grid == nullptr) {
      qx = form->second.value;  // the layer computes with the int8 tensor it is given
    } else if (form != int8_.end() && same_grid(*form->second.grid, *input_grid)) {
      qx = form->second.value;
    } else {
      qx = quantize(x, *input_grid);
    }
    jit::Value* packed = packed_weights(name, conv, n, weight_grid);

    // conv + ReLU run as one kernel: relu(q) on the output grid equals the grid's value of
    // relu(y), as 0 lies on every grid.
    jit::Node* relu = sole_relu(n->output());
    std::string kernel = conv ? "quantized::conv2d" : "quantized::linear";
    if (relu != nullptr) {
      kernel += "_relu";
    }
    jit::Value* qy = graph_->insert(
        op(kernel.c_str()), {qx, packed, scale_of(output_grid), quint8_zero_point(output_grid)});
    replaced_.push_back(n);
    jit::Value* y = n->output();
    if (relu != nullptr) {
      replaced_.push_back(relu);
      y = relu->output();
    }
    publish(y, qy, &output_grid);
    report_.int8_layers.push_back(
        {name, op_types_.at(name), kernel, weight_grid.scale.numel() > 1});
  }

  jit::Node* sole_relu(jit::Value* y) const {
    if (y->uses().size() != 1) {
      return nullptr;
    }
    jit::Node* user = y->uses()[0].user;
    const bool relu = user->kind() == c10::aten::relu || user->kind() == c10::aten::relu_;
    return relu && user->owningBlock() == graph_->block() && !has_writer(user->output()) ? user
                                                                                         : nullptr;
  }

  // The layer's weight as qint8 codes prepacked for the engine, a target attribute (one per
  // layer, however often it is called).
  jit::Value* packed_weights(const std::string& name, bool conv, const jit::Node* n,
                             const LinearGrid& g) {
    const std::string attribute = attribute_name("packed", name);
    if (!target_.hasattr(attribute)) {
      const jit::Module layer = submodule(source_, name);
      const at::Tensor weight = layer.attr("weight").toTensor().detach();
      const int64_t shift = weight_code_shift(g);
      const at::Tensor codes =
          (onnx_quantization::weight_codes(weight, g).to(at::kShort) - shift).to(at::kChar);
      at::Tensor qweight;
      if (g.scale.numel() == 1) {
        qweight =
            at::_make_per_tensor_quantized_tensor(codes, scale_of(g), zero_point_of(g) - shift);
      } else {
        qweight = at::_make_per_channel_quantized_tensor(
            codes, g.scale.to(at::kDouble),
            (g.zero_point - static_cast<double>(shift)).to(at::kLong), 0);
      }
      const c10::IValue bias_value = layer.attr("bias");
      const c10::IValue bias =
          bias_value.isTensor()
              ? c10::IValue(bias_value.toTensor().detach().to(at::kFloat).contiguous())
              : c10::IValue();
      c10::IValue packed;
      if (conv) {
        packed = call_op(
            "quantized::conv2d_prepack",
            {qweight, bias, *constant_argument(n->input(3)), *constant_argument(n->input(4)),
             *constant_argument(n->input(5)), *constant_argument(n->input(6))});
      } else {
        packed = call_op("quantized::linear_prepack", {qweight, bias});
      }
      target_.register_attribute(attribute, packed.type(), packed);
    }
    return get_target_attribute(attribute);
  }

  // ---- float fake quantization (the reference, and layers that cannot run int8) ------------
  // `int8_output`: the layer's output grid is quint8's, and int8 ops after it read its output
  // quantized by libtorch (quantize_per_tensor: the same grid, rounded as the int8 kernels do).
  void fake_quantize_call(jit::Node* n, const std::string& name, bool int8_output = false) {
    jit::WithInsertPoint at(n);
    if (const LinearGrid* g = grid(name, sdk::QuantType::kInput)) {
      n->replaceInput(0, fake_quantize(n->input(0), *g));
    } else if (options_.fake_quantized && observed_inputs_.count(name) != 0 &&
               std::find(options_.inputs_from_ranges.begin(), options_.inputs_from_ranges.end(),
                         name) != options_.inputs_from_ranges.end()) {
      n->replaceInput(0, fake_quantize(n->input(0), observed_inputs_.at(name)));
    }
    if (const LinearGrid* g = grid(name, sdk::QuantType::kWeight)) {
      const std::string attribute = attribute_name("fake_quantized", name + ".weight");
      if (!target_.hasattr(attribute)) {
        const at::Tensor weight = submodule(source_, name).attr("weight").toTensor().detach();
        target_.register_buffer(attribute, dequantized_codes(weight, *g));
      }
      n->replaceInput(1, get_target_attribute(attribute));
    }
    if (const LinearGrid* g = grid(name, sdk::QuantType::kOutput)) {
      jit::WithInsertPoint after(n->next());
      jit::Value* y = n->output();
      if (int8_output && fits_quint8(*g)) {
        publish(y, quantize(y, *g), g);
        return;
      }
      jit::Value* fq = fake_quantize(y, *g);
      y->replaceAllUsesAfterNodeWith(fq->node(), fq);
    }
  }

  // (q − z)·s of the weight's codes: the quantizer's fake-quantized weight, bit for bit.
  static at::Tensor dequantized_codes(const at::Tensor& weight, const LinearGrid& g) {
    std::vector<int64_t> shape(static_cast<size_t>(std::max<int64_t>(weight.dim(), 1)), 1);
    shape[0] = g.scale.numel();
    const at::Tensor s = g.scale.numel() == 1 ? g.scale.reshape({}) : g.scale.view(shape);
    const at::Tensor z =
        g.zero_point.numel() == 1 ? g.zero_point.reshape({}) : g.zero_point.view(shape);
    return (onnx_quantization::weight_codes(weight, g).to(at::kFloat) - z) * s;
  }

  // The SDK's fake quantization of x on a per-tensor grid, op for op:
  // (round_half_even(clamp(x / s + z, qmin, qmax)) − z)·s, s and z float32 scalars.
  jit::Value* fake_quantize(jit::Value* x, const LinearGrid& g) {
    jit::Value* s = graph_->insertConstant(g.scale.reshape({}).clone());
    jit::Value* z = graph_->insertConstant(g.zero_point.reshape({}).clone());
    jit::Value* t = graph_->insert(c10::aten::div, {x, s});
    t = graph_->insert(c10::aten::add, {t, z});
    t = graph_->insert(c10::aten::clamp,
                       {t, static_cast<double>(g.quant_min), static_cast<double>(g.quant_max)});
    t = graph_->insert(c10::aten::round, {t});
    t = graph_->insert(c10::aten::sub, {t, z});
    return graph_->insert(c10::aten::mul, {t, s});
  }

  // ---- int8 values -------------------------------------------------------------------------
  jit::Value* quantize(jit::Value* x, const LinearGrid& g) {
    // One quantization per value and grid, unless the value is written in place between reads.
    const bool reusable = !has_writer(x);
    if (reusable) {
      for (const auto& [value, grid, q] : quantized_values_) {
        if (value == x && same_grid(*grid, g)) {
          return q;
        }
      }
    }
    jit::Value* q =
        graph_->insert(c10::aten::quantize_per_tensor,
                       {x, scale_of(g), quint8_zero_point(g), static_cast<int64_t>(at::kQUInt8)});
    if (reusable) {
      quantized_values_.emplace_back(x, &g, q);
    }
    return q;
  }

  // `q` (int8, on `grid`) is `y`'s value from here on: int8 readers take q, float readers a
  // dequantized copy made once (finish_int8_values). A value written in place afterwards gets
  // its float copy at once: the write must reach every reader.
  // Every reader of y comes after q's node (q is made before the op it replaces, or from y).
  void publish(jit::Value* y, jit::Value* q, const LinearGrid* grid) {
    // A value written in place is read by the writer; any other reader must see the write.
    if (has_writer(y) && y->uses().size() > 1) {
      jit::WithInsertPoint after(q->node()->next());
      y->replaceAllUsesAfterNodeWith(q->node(), graph_->insert(c10::aten::dequantize, {q}));
      return;
    }
    int8_[y] = {q, grid};
    grids_[q] = grid;
    published_.push_back(y);
  }

  // Ops that give the same result on an int8 tensor as on its float value (monotone, or moving
  // elements only) run on the int8 form; shape queries read it as it is.
  void keep_int8(jit::Node* n) {
    if (n->inputs().empty()) {
      return;
    }
    const auto form = int8_.find(n->input(0));
    if (form == int8_.end()) {
      return;
    }
    const c10::Symbol kind = n->kind();
    if (kind == c10::aten::size || kind == c10::aten::dim) {
      n->replaceInput(0, form->second.value);
      return;
    }
    static const std::set<c10::Symbol> exact = {
        c10::aten::relu,    c10::aten::relu_, c10::aten::max_pool2d, c10::aten::flatten,
        c10::aten::reshape, c10::aten::view,  c10::aten::contiguous, c10::aten::dropout};
    // ReLU6-like clamps (constant bounds around 0) clamp the codes: exact but for values above
    // the upper bound, which land on the grid point nearest it (within half a step).
    const bool chained_clamp = clamp_chain_.count(n) != 0 || is_clamp(n);
    if ((exact.count(kind) == 0 && !chained_clamp) || n->outputs().size() != 1) {
      return;
    }
    if (kind == c10::aten::dropout) {
      const c10::optional<c10::IValue> train = jit::toIValue(n->input(2));
      if (!train || !train->isBool() || train->toBool()) {
        return;
      }
    }
    // An in-place op, or a view whose value or source is written later, keeps float aliasing.
    jit::Value* x = n->input(0);
    const bool in_place = kind == c10::aten::relu_ || kind == c10::aten::hardtanh_;
    // (An in-place op that is the only reader of its input writes nothing anyone else reads.)
    if ((in_place ? x->uses().size() != 1 : has_writer(x)) || has_writer(n->output())) {
      return;
    }
    jit::WithInsertPoint before(n);
    jit::Value* int8 = nullptr;
    if (kind == c10::aten::relu_) {
      int8 = graph_->insert(c10::aten::relu, {form->second.value});
    } else if (kind == c10::aten::hardtanh_) {
      int8 = graph_->insert(c10::aten::hardtanh, {form->second.value, n->input(1), n->input(2)});
    } else {
      jit::Node* copy = graph_->insertNode(
          graph_->createClone(n, [&](jit::Value* v) { return v == x ? form->second.value : v; }));
      copy->output()->setType(c10::TensorType::get());
      int8 = copy->output();
    }
    replaced_.push_back(n);
    publish(n->output(), int8, form->second.grid);
  }

  // `v` itself, or, when an int8 op makes it, its dequantized copy (made now; v then has no
  // int8 form any more, as what follows is a float op every reader must see).
  jit::Value* float_form(jit::Value* v) {
    const auto form = int8_.find(v);
    if (form == int8_.end()) {
      return v;
    }
    jit::Value* q = form->second.value;
    jit::WithInsertPoint after(q->node()->next());
    jit::Value* d = graph_->insert(c10::aten::dequantize, {q});
    v->replaceAllUsesAfterNodeWith(q->node(), d);
    int8_.erase(form);
    published_.erase(std::remove(published_.begin(), published_.end(), v), published_.end());
    return d;
  }

  // Float readers of int8-made values get one dequantized copy each; the float ops those values
  // replaced go.
  void finish_int8_values() {
    for (jit::Value* y : published_) {
      const Int8Form& form = int8_.at(y);
      jit::WithInsertPoint after(form.value->node()->next());
      y->replaceAllUsesAfterNodeWith(form.value->node(),
                                     graph_->insert(c10::aten::dequantize, {form.value}));
    }
    for (auto it = replaced_.rbegin(); it != replaced_.rend(); ++it) {
      for (const jit::Value* out : (*it)->outputs()) {
        LITHE_CHECK(!out->hasUses(), sdk::Errc::kInternal, kFailure, ": ", where(*it),
                    " was replaced by its int8 form but is still read");
      }
      (*it)->destroy();
    }
    jit::EliminateDeadCode(graph_);
  }

  // ---- the new module's attributes -----------------------------------------------------------
  std::string attribute_name(const std::string& kind, const std::string& path) {
    std::string name = "lithe_" + kind + "_" + path;
    std::replace(name.begin(), name.end(), '.', '_');
    return name;
  }

  jit::Value* get_target_attribute(const std::string& name) {
    jit::Node* get = graph_->insertNode(graph_->create(c10::prim::GetAttr, {self_}));
    get->s_(c10::attr::name, name);
    get->output()->setType(target_.type()->getAttribute(name));
    target_getters_.insert(get);
    return get->output();
  }

  // Every other attribute the forward reads (self.layer1.0.bn1.weight, ...) becomes an attribute
  // of the new module ("layer1_0_bn1_weight"), parameters staying parameters.
  void move_attributes_to_target() {
    std::vector<jit::Node*> getters;
    collect_getters(graph_->block(), getters);
    std::map<std::string, std::string> names;  // source path -> target attribute
    for (jit::Node* get : getters) {
      const std::optional<std::string> owner = graph_trace::module_path(get->input());
      const auto cls = get->output()->type()->cast<c10::ClassType>();
      if (!owner || (cls && cls->is_module())) {
        continue;  // module chains go once nothing reads through them
      }
      const std::string& field = get->s(c10::attr::name);
      const std::string path = owner->empty() ? field : *owner + "." + field;
      auto known = names.find(path);
      if (known == names.end()) {
        const jit::Module module = submodule(source_, *owner);
        std::string name = path;
        std::replace(name.begin(), name.end(), '.', '_');
        while (target_.hasattr(name)) {
          name += "_";
        }
        const c10::ClassTypePtr& cls_type = module.type();
        const size_t slot = cls_type->getAttributeSlot(field);
        c10::IValue value = module.attr(field);
        if (value.isTensor()) {
          value = value.toTensor().detach();
        }
        target_.register_attribute(name, cls_type->getAttribute(slot), value,
                                   cls_type->is_parameter(slot), cls_type->is_buffer(slot));
        known = names.emplace(path, name).first;
      }
      jit::WithInsertPoint at(get);
      get->output()->replaceAllUsesWith(get_target_attribute(known->second));
    }
    // Only module chains are left to go; the set's nodes may be destroyed from here on.
    target_getters_.clear();
    jit::EliminateDeadCode(graph_);
    std::vector<jit::Node*> left;
    collect_getters(graph_->block(), left);
    for (const jit::Node* get : left) {
      const auto cls = get->output()->type()->cast<c10::ClassType>();
      LITHE_CHECK(!(cls && cls->is_module()), sdk::Errc::kUnsupported, kFailure,
                  ": the forward uses submodule '", get->s(c10::attr::name), "' as a value (",
                  where(get), "); nothing was written");
    }
  }

  void collect_getters(jit::Block* block, std::vector<jit::Node*>& out) const {
    for (jit::Node* n : block->nodes()) {
      if (n->kind() == c10::prim::GetAttr && target_getters_.count(n) == 0) {
        out.push_back(n);
      }
      for (jit::Block* inner : n->blocks()) {
        collect_getters(inner, out);
      }
    }
  }

  void count_conversions() {
    std::vector<const jit::Node*> nodes;
    const std::function<void(jit::Block*)> walk = [&](jit::Block* block) {
      for (jit::Node* n : block->nodes()) {
        nodes.push_back(n);
        for (jit::Block* inner : n->blocks()) {
          walk(inner);
        }
      }
    };
    walk(graph_->block());
    for (const jit::Value* out : graph_->outputs()) {
      const jit::Node* maker = out->node();
      const auto grid =
          maker->kind() == c10::aten::dequantize ? grids_.find(maker->input(0)) : grids_.end();
      report_.output_scales.push_back(grid != grids_.end() ? scale_of(*grid->second) : 0.0);
    }
    for (const jit::Node* n : nodes) {
      if (n->kind() == c10::aten::quantize_per_tensor) {
        ++report_.quantize_ops;
      } else if (n->kind() == c10::aten::dequantize) {
        ++report_.dequantize_ops;
        for (const jit::Use& use : n->output()->uses()) {
          report_.dequantized_before.push_back(where(use.user));
        }
      }
    }
  }

  jit::Module source_;
  const Int8ConvertOptions& options_;
  Int8ConvertReport& report_;
  std::map<std::string, QuantizedLayer> quantized_;
  std::map<std::string, std::string> op_types_;
  std::map<std::string, LinearGrid> observed_inputs_;  // layer -> grid over its observed input
  std::shared_ptr<jit::Graph> graph_;
  jit::Module target_;
  jit::Value* self_ = nullptr;
  std::unordered_map<const jit::Value*, Int8Form> int8_;
  std::unordered_map<const jit::Value*, const LinearGrid*> grids_;  // int8 value -> its grid
  std::set<std::string> output_layers_;  // quantized layers of other types: output only
  std::unordered_map<const jit::Value*, std::vector<std::string>> module_outputs_;
  std::set<const jit::Value*> applied_;        // values whose module output grids were applied
  std::set<const jit::Node*> fused_;           // nodes an int8 op made at an earlier node replaces
  std::set<const jit::Node*> clamp_chain_;     // see mark_clamp_chain
  std::vector<jit::Value*> published_;         // values with an int8 form, in graph order
  std::vector<jit::Node*> replaced_;           // float ops their int8 forms replace
  std::set<const jit::Node*> target_getters_;  // reads of the new module's attributes
  std::vector<std::tuple<const jit::Value*, const LinearGrid*, jit::Value*>> quantized_values_;
};

}  // namespace

jit::Module convert_to_int8(const jit::Module& model, const Int8ConvertOptions& options,
                            Int8ConvertReport* report) {
  Int8ConvertReport local;
  Int8ConvertReport& out = report != nullptr ? *report : local;
  out = {};
  return Converter(model, options, out).run();
}

std::string serialize_int8_model(const torch::jit::Module& int8, QuantizedEngine engine) {
  try {
    std::ostringstream out(std::ios::binary);
    int8.save(out, {{kQuantizedEngineRecord, quantized_engine_name(engine)}});
    return std::move(out).str();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    throw sdk::Error(sdk::Errc::kIo,
                     "cannot serialise the int8 model: " + message.substr(0, message.find('\n')));
  }
}

}  // namespace lithe::host
