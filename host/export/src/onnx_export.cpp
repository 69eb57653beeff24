// ONNX emitter: walks the inlined forward graph (graph_trace) in order and writes one or a few
// ONNX nodes per aten op. Shapes and non-tensor arguments must be known when exporting: list
// and scalar arguments are graph constants, and reshape targets come from the shapes the model
// produced on the export input (ONNX models exported this way have a static input shape, as
// NNI's export_model(input_shape=...)).
#include "lithe/host/export/onnx_export.h"

#include <ATen/ATen.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/graph/op_table.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/io/staged_file.h"
#include "input_free_values.h"
#include "onnx_quantization.h"
#include "lithe/sdk/error.h"
#include "lithe/host/graph/submodule.h"

namespace lithe::host {
namespace {

namespace jit = torch::jit;

std::string node_place(const jit::Node* node) {
  std::string text = std::string(node->kind().toQualString()) + " (node %" +
                     (node->outputs().empty() ? std::string("-") : node->output(0)->debugName()) +
                     ")";
  if (const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(node)) {
    text += " in module '" + scope->module + "' (" + scope->op_type + ")";
  } else {
    text += " in the model's own forward";
  }
  return text;
}

[[noreturn]] void unsupported(const jit::Node* node, const std::string& why) {
  throw sdk::Error(sdk::Errc::kUnsupported,
                   "cannot export to ONNX: " + node_place(node) + ": " + why +
                       "; nothing was written");
}

class Emitter : public ops::OnnxWriter {
 public:
  Emitter(const jit::Module& module, const OnnxExportOptions& options)
      : module_(module), options_(options) {
    quantized_ = onnx_quantization::read_quantized_layers(module);
    graph_trace::Trace trace = graph_trace::trace_forward(
        module, at::zeros(options.input_shape), graph_trace::InputShape::kFixed);
    graph_ = std::move(trace.graph);
    values_ = std::move(trace.values);
    input_free_ = std::make_unique<InputFreeValues>(*graph_);
  }

  onnx::ModelProto run() {
    onnx::ModelProto model;
    model.set_ir_version(8);
    model.set_producer_name("lithe");
    onnx::OperatorSetIdProto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(options_.opset);
    graph_proto_ = model.mutable_graph();
    graph_proto_->set_name("lithe");

    LITHE_CHECK(graph_->inputs().size() == 2, sdk::Errc::kUnsupported,
                "cannot export to ONNX: the model's forward takes ", graph_->inputs().size() - 1,
                " arguments; Lithe exports forwards of one input tensor; nothing was written");
    const jit::Value* input = graph_->inputs()[1];
    names_[input] = "input";
    add_value_info(graph_proto_->add_input(), "input", tensor_of(input));

    for (const jit::Node* node : graph_->nodes()) {
      emit_node(node);
    }
    std::vector<const jit::Value*> outputs;
    for (const jit::Value* v : graph_->outputs()) {
      flatten_output(v, outputs);
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string name = i == 0 ? "output" : "output_" + std::to_string(i);
      node("Identity", {name_of(outputs[i], graph_->return_node())}, name, "output");
      add_value_info(graph_proto_->add_output(), name, tensor_of(outputs[i]));
    }
    drop_unread_initializers();
    summary_.nodes = graph_proto_->node_size();
    for (const auto& [layer, quantized] : quantized_) {
      for (const auto& [type, g] : quantized.types) {
        if (!g) {
          summary_.not_quantized_yet.push_back(layer + " " + sdk::quant_type_name(type));
        }
      }
    }
    return model;
  }

 private:
  // ---- values -------------------------------------------------------------------------------
  const at::Tensor& tensor_of(const jit::Value* v) const {
    const auto it = values_.find(v);
    LITHE_CHECK(it != values_.end() && it->second.defined(), sdk::Errc::kUnsupported,
                "cannot export to ONNX: value %", v->debugName(), " made by ",
                v->node()->kind().toQualString(), " has no tensor on the export input; nothing was written");
    return it->second;
  }

  // ---- ops::OnnxWriter: what the op table's emissions write through --------------------------
  int64_t opset() const override { return options_.opset; }
  const at::Tensor& tensor(const jit::Value* v) const override { return tensor_of(v); }
  std::string value(const jit::Value* v, const jit::Node* reader) override {
    return name_of(v, reader);
  }
  std::string initializer(const std::string& stem, const at::Tensor& value) override {
    return named_initializer(fresh(stem), value);
  }
  std::string emit(const jit::Node* source, const std::string& type,
                   const std::vector<std::string>& inputs,
                   const std::vector<ops::OnnxAttribute>& attributes) override {
    onnx::NodeProto* made = emit_as(source, type, inputs, source->output(0));
    set_attributes(made, attributes);
    return made->output(0);
  }
  std::string step(const jit::Node* source, const std::string& type,
                   const std::vector<std::string>& inputs,
                   const std::vector<ops::OnnxAttribute>& attributes) override {
    const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(source);
    const std::string name = fresh(source->outputs().empty() ? std::string("step")
                                                             : source->output(0)->debugName());
    set_attributes(node(type, inputs, name, scope ? scope->module : std::string("model")),
                   attributes);
    return name;
  }
  void emit_each(const jit::Node* source, const std::string& type,
                 const std::vector<std::string>& inputs,
                 const std::vector<const jit::Value*>& outputs,
                 const std::vector<ops::OnnxAttribute>& attributes) override {
    const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(source);
    std::vector<std::string> names;
    for (const jit::Value* out : outputs) {
      names.push_back(fresh(out->debugName()));
      names_[out] = names.back();
    }
    onnx::NodeProto* made = node(type, inputs, names.front(), scope ? scope->module : "model");
    for (size_t i = 1; i < names.size(); ++i) {
      made->add_output(names[i]);
    }
    set_attributes(made, attributes);
  }
  [[noreturn]] void unsupported(const jit::Node* n, const std::string& why) const override {
    lithe::host::unsupported(n, why);
  }

  static void set_attributes(onnx::NodeProto* n, const std::vector<ops::OnnxAttribute>& list) {
    for (const ops::OnnxAttribute& a : list) {
      if (const auto* i = std::get_if<int64_t>(&a.value)) {
        attr(n, a.name, *i);
      } else if (const auto* f = std::get_if<double>(&a.value)) {
        attr_f(n, a.name, *f);
      } else if (const auto* text = std::get_if<std::string>(&a.value)) {
        onnx::AttributeProto* attribute = n->add_attribute();
        attribute->set_name(a.name);
        attribute->set_type(onnx::AttributeProto_AttributeType_STRING);
        attribute->set_s(*text);
      } else {
        attr(n, a.name, std::get<std::vector<int64_t>>(a.value));
      }
    }
  }

  void flatten_output(const jit::Value* v, std::vector<const jit::Value*>& out) const {
    for (auto alias = aliases_.find(v); alias != aliases_.end(); alias = aliases_.find(v)) {
      v = alias->second;  // what an unpacked tuple element was packed from
    }
    const jit::Node* maker = v->node();
    const c10::optional<c10::IValue> constant = jit::toIValue(v);
    if (v->type()->kind() == c10::TypeKind::NoneType || (constant && constant->isNone())) {
      return;  // an optional output that is None (GoogLeNet's auxiliary logits in eval)
    }
    if (maker->kind() == c10::prim::TupleConstruct || maker->kind() == c10::prim::ListConstruct) {
      for (const jit::Value* part : maker->inputs()) {
        flatten_output(part, out);
      }
      return;
    }
    if (v->type()->kind() != c10::TypeKind::TensorType) {
      unsupported(graph_->return_node(), "the model returns a " + v->type()->str() +
                                             ", not tensors");
    }
    out.push_back(v);
  }

  void add_value_info(onnx::ValueInfoProto* info, const std::string& name, const at::Tensor& t) {
    info->set_name(name);
    onnx::TypeProto_Tensor* type = info->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto_DataType_FLOAT);
    for (const int64_t d : t.sizes()) {
      type->mutable_shape()->add_dim()->set_dim_value(d);
    }
  }

  std::string named_initializer(const std::string& name, const at::Tensor& value) {
    onnx::TensorProto* t = graph_proto_->add_initializer();
    t->set_name(name);
    const at::Tensor c = value.detach().cpu().contiguous();
    for (const int64_t d : c.sizes()) {
      t->add_dims(d);
    }
    const int64_t data_type = ops::onnx_data_type(c.scalar_type());
    LITHE_CHECK(data_type != 0, sdk::Errc::kUnsupported, "cannot export to ONNX: '", name,
                "' is a ", c.scalar_type(),
                " tensor; Lithe exports float models; nothing was written");
    // BOOL is one byte per element, as torch's.
    t->set_data_type(static_cast<int32_t>(data_type));
    const bool integer = !c.is_floating_point();
    const at::Tensor data = integer ? c : c.to(at::kFloat);
    t->set_raw_data(std::string(static_cast<const char*>(data.data_ptr()),
                                static_cast<size_t>(data.numel()) * data.element_size()));
    return name;
  }

  std::string fresh(const std::string& stem) { return stem + "_" + std::to_string(counter_++); }

  // The ONNX name of tensor value `v` as `user` reads it: its raw name (raw_name_of), through
  // the QDQ pairs of the quantized module calls it crosses on the way. Leaving calls it was
  // made in: their output quantization, innermost first; entering calls `user` sits in: their
  // input quantization, outermost first, for the first outside tensor each call reads (Lithe
  // quantizes a module's first input at its call site).
  std::string name_of(const jit::Value* v, const jit::Node* user) {
    std::string name = raw_name_of(v, user);
    const jit::Node* maker = v->node();
    if (quantized_.empty() || v->type()->kind() != c10::TypeKind::TensorType ||
        maker->kind() == c10::prim::GetAttr || maker->kind() == c10::prim::Constant) {
      return name;
    }
    const std::vector<graph_trace::Scope> from = graph_trace::scopes_of(maker);
    const std::vector<graph_trace::Scope> to = graph_trace::scopes_of(user);
    size_t common = 0;
    while (common < from.size() && common < to.size() && from[common].call == to[common].call) {
      ++common;
    }
    for (size_t i = from.size(); i-- > common;) {
      name = quantize_activation(name, from[i], sdk::QuantType::kOutput);
    }
    for (size_t i = common; i < to.size(); ++i) {
      const auto first = first_input_.emplace(to[i].call, v).first;
      if (first->second == v) {
        name = quantize_activation(name, to[i], sdk::QuantType::kInput);
      }
    }
    return name;
  }

  // ---- quantization (QDQ) -------------------------------------------------------------------
  const onnx_quantization::LinearGrid* grid(const std::string& module, sdk::QuantType type) const {
    const auto layer = quantized_.find(module);
    if (layer == quantized_.end()) {
      return nullptr;
    }
    const auto found = layer->second.types.find(type);
    return found == layer->second.types.end() || !found->second ? nullptr : &*found->second;
  }

  // The scale and zero-point initializers of `grid` (0-d per tensor, 1-d per channel).
  std::pair<std::string, std::string> grid_initializers(const std::string& stem,
                                                        const onnx_quantization::LinearGrid& g) {
    const bool per_tensor = g.scale.numel() == 1;
    const at::Tensor scale = per_tensor ? g.scale.reshape({}) : g.scale;
    const at::Tensor zero = (per_tensor ? g.zero_point.reshape({}) : g.zero_point)
                                .to(g.is_signed() ? at::kChar : at::kByte);
    return {named_initializer(stem + "_scale", scale), named_initializer(stem + "_zero_point", zero)};
  }

  // QuantizeLinear + DequantizeLinear of activation `name` with `scope`'s grid for `type` (a
  // Clip first when the grid is narrower than its 8-bit storage); `name` itself when that
  // type of the module does not quantize. One pair per value, call and type.
  std::string quantize_activation(const std::string& name, const graph_trace::Scope& scope,
                                  sdk::QuantType type) {
    const onnx_quantization::LinearGrid* g = grid(scope.module, type);
    if (g == nullptr) {
      return name;
    }
    const std::string key = name + "|" + scope.call + "|" + sdk::quant_type_name(type);
    if (const auto done = qdq_names_.find(key); done != qdq_names_.end()) {
      return done->second;
    }
    const std::string stem = fresh(scope.module + "." + sdk::quant_type_name(type));
    std::string x = name;
    if (g->narrower_than_storage()) {
      const float s = g->scale.item<float>();
      const float z = g->zero_point.item<float>();
      x = stem + "_clipped";
      node("Clip",
           {name, named_initializer(stem + "_min", at::scalar_tensor((g->quant_min - z) * s, at::kFloat)),
            named_initializer(stem + "_max", at::scalar_tensor((g->quant_max - z) * s, at::kFloat))},
           x, scope.module);
    }
    const auto [scale, zero] = grid_initializers(stem, *g);
    node("QuantizeLinear", {x, scale, zero}, stem + "_quantized", scope.module);
    node("DequantizeLinear", {stem + "_quantized", scale, zero}, stem + "_dequantized",
         scope.module);
    ++summary_.quantized_activations;
    return qdq_names_[key] = stem + "_dequantized";
  }

  // A quantized weight: its integer codes as the initializer, then DequantizeLinear (per
  // channel along axis 0 when the grid has a scale per output channel). Named like the
  // state_dict key, as float weights are.
  std::string quantized_weight(const std::string& key, const std::string& module,
                               const at::Tensor& weight, const onnx_quantization::LinearGrid& g) {
    const std::string codes = named_initializer(key + "_quantized", onnx_quantization::weight_codes(weight, g));
    const auto [scale, zero] = grid_initializers(key, g);
    onnx::NodeProto* dq = node("DequantizeLinear", {codes, scale, zero}, key, module);
    if (g.scale.numel() != 1) {
      attr(dq, "axis", int64_t{0});
    }
    ++summary_.quantized_weights;
    return key;
  }

  // The module whose attribute op `n` reads as its weight (input 1), or nullopt.
  static std::optional<std::string> weight_owner(const jit::Node* n) {
    const jit::Node* getter = n->input(1)->node();
    return getter->kind() == c10::prim::GetAttr ? graph_trace::module_path(getter->input())
                                                : std::nullopt;
  }

  // Whether attribute read `getter` of module `owner` gives the quantized weight: the runtime
  // quantizes a weight where its own module's code reads it; a read from elsewhere (a tied
  // weight) computes with the float tensor.
  const onnx_quantization::LinearGrid* quantized_read(const jit::Node* getter,
                                                      const std::string& owner) const {
    const std::optional<graph_trace::Scope> reader = graph_trace::innermost_scope(getter);
    return getter->s(c10::attr::name) == "weight" && reader && reader->module == owner
               ? grid(owner, sdk::QuantType::kWeight)
               : nullptr;
  }

  // Whether raw_name_of gives op `n`'s weight as a DequantizeLinear output.
  bool weight_is_quantized(const jit::Node* n) const override {
    const std::optional<std::string> owner = weight_owner(n);
    return owner && quantized_read(n->input(1)->node(), *owner) != nullptr;
  }

  // The ONNX name of a tensor value: an activation already emitted, a module parameter or
  // buffer (an initializer named like the state_dict key), or a constant.
  std::string raw_name_of(const jit::Value* v, const jit::Node* user) {
    if (const auto it = names_.find(v); it != names_.end()) {
      return it->second;
    }
    if (const auto alias = aliases_.find(v); alias != aliases_.end()) {
      return raw_name_of(alias->second, user);
    }
    const jit::Node* maker = v->node();
    if (maker->kind() == c10::prim::GetAttr) {
      const std::optional<std::string> owner = graph_trace::module_path(maker->input());
      if (owner) {
        const std::string attr = maker->s(c10::attr::name);
        const c10::IValue value = submodule(module_, *owner).attr(attr);
        if (value.isTensor()) {
          const std::string key = owner->empty() ? attr : *owner + "." + attr;
          const onnx_quantization::LinearGrid* g = quantized_read(maker, *owner);
          // A float read of a weight quantized elsewhere gets its own name.
          const bool tied = g == nullptr && attr == "weight" &&
                            grid(*owner, sdk::QuantType::kWeight) != nullptr;
          const std::string name = tied ? key + "_float" : key;
          // One initializer per tensor, however many calls read it.
          if (const auto done = tensor_names_.find(name); done != tensor_names_.end()) {
            return names_[v] = done->second;
          }
          return names_[v] = tensor_names_[name] =
                     g != nullptr ? quantized_weight(key, *owner, value.toTensor(), *g)
                                  : named_initializer(name, value.toTensor());
        }
      }
    }
    if (const c10::optional<c10::IValue> constant = jit::toIValue(v)) {
      if (constant->isTensor()) {
        return names_[v] = named_initializer(fresh("constant"), constant->toTensor());
      }
      if (constant->isDouble() || constant->isInt()) {
        return names_[v] = named_initializer(fresh("scalar"), at::scalar_tensor(constant->toScalar(),
                                                                         at::kFloat));
      }
    }
    unsupported(user, "its input %" + v->debugName() + " (made by " +
                          std::string(maker->kind().toQualString()) +
                          ") is not an exported tensor");
  }

  // Whether an optional tensor argument (bias: Optional[Tensor]) is given.
  bool present(const jit::Value* v) const override {
    if (v->type()->kind() == c10::TypeKind::NoneType) {
      return false;
    }
    const c10::optional<c10::IValue> constant = jit::toIValue(v);
    if (constant && constant->isNone()) {
      return false;
    }
    // A module attribute typed Optional[Tensor] (Conv2d without bias holds None).
    const jit::Node* maker = v->node();
    if (maker->kind() == c10::prim::GetAttr) {
      if (const std::optional<std::string> owner = graph_trace::module_path(maker->input())) {
        return !submodule(module_, *owner).attr(maker->s(c10::attr::name)).isNone();
      }
    }
    return true;
  }

  std::vector<int64_t> ints(const jit::Node* node, size_t index) const override {
    std::optional<std::vector<int64_t>> value = ops::constant_ints(node->input(index));
    if (!value) {
      unsupported(node, "argument " + std::to_string(index) + " is not a constant int list");
    }
    return std::move(*value);
  }

  c10::IValue constant(const jit::Node* node, size_t index) const override {
    const c10::optional<c10::IValue> value = jit::toIValue(node->input(index));
    if (!value) {
      unsupported(node, "argument " + std::to_string(index) + " is not a constant");
    }
    return *value;
  }

  onnx::NodeProto* node(const std::string& type, const std::vector<std::string>& inputs,
                        const std::string& output, const std::string& name) {
    onnx::NodeProto* n = graph_proto_->add_node();
    n->set_op_type(type);
    n->set_name(name + "/" + type + "_" + std::to_string(counter_++));
    for (const std::string& i : inputs) {
      n->add_input(i);
    }
    n->add_output(output);
    return n;
  }

  static void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INTS);
    for (const int64_t x : v) {
      a->add_ints(x);
    }
  }
  static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto* n, const std::string& name, double v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    a->set_f(static_cast<float>(v));
  }

  // Emits `type` on the given inputs as the value `out` of `node`.
  onnx::NodeProto* emit_as(const jit::Node* source, const std::string& type,
                           const std::vector<std::string>& inputs, const jit::Value* out) {
    const std::string name = fresh(out->debugName());
    names_[out] = name;
    const std::optional<graph_trace::Scope> scope = graph_trace::innermost_scope(source);
    return node(type, inputs, name, scope ? scope->module : std::string("model"));
  }

  // ---- ops ----------------------------------------------------------------------------------
  void emit_node(const jit::Node* n) {
    const c10::Symbol kind = n->kind();
    // Every node, those written as aliases below included, so that what comes out of a
    // quantized layer stays marked through tuples, lists and items.
    const bool quantization_touched = touched_by_quantization(n);
    bool tensor_output = false;
    for (const jit::Value* out : n->outputs()) {
      tensor_output = tensor_output || out->type()->kind() == c10::TypeKind::TensorType;
    }
    // Unpacking a tuple or list built in the graph (a forward returning several values): the
    // parts are the values that were packed.
    if (kind == c10::prim::TupleUnpack || kind == c10::prim::ListUnpack) {
      const jit::Node* pack = n->input(0)->node();
      // a, b = x.chunk(2, 1): the op that made the list is written here, one output per item.
      const ops::OpSpec* maker = ops::find_op(pack->kind());
      if (kind == c10::prim::ListUnpack && maker != nullptr && maker->onnx_unpacked != nullptr) {
        maker->onnx_unpacked(*this, pack, n);
        return;
      }
      if ((pack->kind() == c10::prim::TupleConstruct || pack->kind() == c10::prim::ListConstruct) &&
          pack->inputs().size() == n->outputs().size()) {
        for (size_t i = 0; i < n->outputs().size(); ++i) {
          aliases_[n->output(i)] = pack->input(i);
        }
        return;
      }
    }
    // (a, w)[0] (nn.TransformerEncoderLayer's `self.self_attn(...)[0]`): the item packed there.
    if (kind == c10::prim::TupleIndex && n->input(0)->node()->kind() == c10::prim::TupleConstruct) {
      const jit::Node* pack = n->input(0)->node();
      const c10::optional<c10::IValue> index = jit::toIValue(n->input(1));
      if (index && index->isInt() && index->toInt() >= 0 &&
          static_cast<size_t>(index->toInt()) < pack->inputs().size()) {
        aliases_[n->output()] = pack->input(static_cast<size_t>(index->toInt()));
        return;
      }
    }
    // parts[0], features["out"]: the tensor stored in a list or dict built in the graph.
    if (tensor_output && ops::find_op(kind) != nullptr &&
        ops::find_op(kind)->channels == ops::Channels::kItem) {
      const jit::Value* source = ops::item_value(n);
      if (source == nullptr) {
        unsupported(n, "it reads a list or dict whose contents the graph does not show");
      }
      aliases_[n->output()] = source;
      return;
    }
    if (!tensor_output) {
      return;  // constants, attribute reads, shape checks, list building: read by their users
    }
    if (kind == c10::prim::GetAttr || kind == c10::prim::Constant) {
      return;  // parameters and constants become initializers when something reads them
    }
    // What no input reaches is the same on every input of the export's shape: written as what
    // it held at the end of the run (Swin's attention mask, built by new_zeros and a loop of
    // slice fills; MViT's positional embedding, repeat_interleave then add_). Every such value
    // is, not only those of ops without an emission: a value written as a constant already
    // holds the in-place writes into it, which must then not be emitted once more. Except what
    // a quantized layer computes or what is computed from it: the run that captured the
    // contents was in float, the QDQ model quantizes there.
    if (!quantization_touched && fold_input_free(n)) {
      return;
    }
    const ops::OpSpec* spec = ops::find_op(kind);
    if (spec == nullptr || spec->onnx == nullptr || !n->blocks().empty()) {
      // Inside a quantized layer too, a value nothing else can write is written as it was.
      if (quantization_touched && fold_input_free(n)) {
        return;
      }
      unsupported(n, "this op is not supported by Lithe's ONNX export");
    }
    spec->onnx(*this, n);
    const jit::Value* x = n->inputs().empty() ? nullptr : n->input(0);
    const jit::Value* y = n->output(0);
    // An in-place op changed its input: later readers of that value read the new one.
    // Unless the op read x through an input quantization: the runtime gives the module a
    // quantized copy, and the caller's x stays as it was.
    if (ops::writes_input(n, 0) && name_of(x, n) == raw_name_of(x, n)) {
      names_[x] = names_.at(y);
      write_through_view(n, x);
    }
  }

  // Whether `v` is a view of its maker's first input: the op's schema says its result aliases
  // that input (slice, select, view, transpose, ...) without writing it.
  static bool is_view(const jit::Value* v) {
    const jit::Node* maker = v->node();
    const c10::FunctionSchema* schema = maker->maybeSchema();
    return schema != nullptr && !schema->returns().empty() && !maker->inputs().empty() &&
           schema->returns()[0].alias_info() != nullptr && !ops::writes_input(maker, 0);
  }

  // Whether a node after `writer` reads `v`.
  static bool read_after(const jit::Value* v, const jit::Node* writer) {
    return std::any_of(v->uses().begin(), v->uses().end(),
                       [&](const jit::Use& use) { return use.user->isAfter(writer); });
  }

  // An in-place op `n` wrote `x`, a view of another tensor: the write lands in that tensor too
  // (MViT's `attn[:, :, 1:, 1:] += rel_pos`). Through a chain of unit-step slices it is written
  // as Where(region, Pad(new slice), base): exact, the region a constant of the static shapes.
  // Through any other view, a base read later is refused rather than written stale.
  void write_through_view(const jit::Node* n, const jit::Value* x) {
    std::vector<const jit::Node*> chain;  // base first
    const jit::Value* base = x;
    while (is_view(base)) {
      chain.insert(chain.begin(), base->node());
      base = base->node()->input(0);
    }
    if (chain.empty()) {
      return;
    }
    bool later = read_after(base, n);
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      later = later || read_after(chain[i]->output(), n);
    }
    if (!later) {
      return;
    }
    const at::Tensor& whole = tensor(base);
    std::vector<int64_t> begin(static_cast<size_t>(whole.dim()), 0);
    std::vector<int64_t> end(whole.sizes().begin(), whole.sizes().end());
    const c10::Symbol slice = c10::Symbol::fromQualString("aten::slice");
    for (size_t i = 0; i < chain.size(); ++i) {
      const jit::Node* view = chain[i];
      if (view->kind() != slice || view->inputs().size() < 5 ||
          (i + 1 < chain.size() && read_after(view->output(), n))) {
        unsupported(n, "it writes in place into " + std::string(view->kind().toQualString()) +
                           " of a tensor read later, which the export does not write");
      }
      const c10::optional<c10::IValue> dim = jit::toIValue(view->input(1));
      const c10::optional<c10::IValue> step = jit::toIValue(view->input(4));
      if (!dim || !dim->isInt() || !step || !step->isInt() || step->toInt() != 1) {
        unsupported(n, "it writes in place into a slice whose axis is not constant or whose "
                       "step is not 1, of a tensor read later");
      }
      const size_t d = static_cast<size_t>(ops::normalized_axis(dim->toInt(), whole.dim()));
      // The slice's offset within its input: its result starts where the data pointer moved.
      const at::Tensor& input = tensor(view->input(0));
      const at::Tensor& output = tensor(view->output());
      const int64_t offset =
          input.stride(static_cast<int64_t>(d)) == 0 || output.numel() == 0
              ? 0
              : (output.storage_offset() - input.storage_offset()) /
                    input.stride(static_cast<int64_t>(d));
      begin[d] += offset;
      end[d] = begin[d] + output.size(static_cast<int64_t>(d));
    }
    std::vector<int64_t> pads(begin);
    for (size_t d = 0; d < end.size(); ++d) {
      pads.push_back(whole.size(static_cast<int64_t>(d)) - end[d]);
    }
    at::Tensor region = at::zeros(whole.sizes(), at::kBool);
    at::Tensor inside = region;
    for (size_t d = 0; d < begin.size(); ++d) {
      inside = inside.narrow(static_cast<int64_t>(d), begin[d], end[d] - begin[d]);
    }
    inside.fill_(true);
    const std::string padded = step(n, "Pad",
                                    {names_.at(x), initializer("pads", at::tensor(pads, at::kLong)),
                                     initializer("zero", at::scalar_tensor(0, whole.scalar_type()))},
                                    {});
    names_[base] =
        step(n, "Where", {initializer("region", region), padded, name_of(base, n)}, {});
  }

  // Whether `n` runs inside a quantized layer's call or reads a value that did (directly or
  // through other ops); records its outputs as such. Nodes are visited in program order.
  bool touched_by_quantization(const jit::Node* n) {
    if (quantized_.empty()) {
      return false;
    }
    bool touched = std::any_of(n->inputs().begin(), n->inputs().end(),
                               [&](const jit::Value* v) { return touched_.count(v) != 0; });
    for (const graph_trace::Scope& scope : graph_trace::scopes_of(n)) {
      touched = touched || quantized_.count(scope.module) != 0;
    }
    if (touched) {
      touched_.insert(n->outputs().begin(), n->outputs().end());
    }
    return touched;
  }

  // Folding writes a value's contents even when every reader was folded too: such initializers
  // are left out (ONNX Runtime warns about each).
  void drop_unread_initializers() {
    std::unordered_set<std::string> read;
    for (const onnx::NodeProto& n : graph_proto_->node()) {
      read.insert(n.input().begin(), n.input().end());
    }
    for (const onnx::ValueInfoProto& out : graph_proto_->output()) {
      read.insert(out.name());
    }
    auto* initializers = graph_proto_->mutable_initializer();
    for (int i = initializers->size() - 1; i >= 0; --i) {
      if (read.count(initializers->Get(i).name()) == 0) {
        initializers->DeleteSubrange(i, 1);
      }
    }
  }

  // Writes every tensor output of `n` as the initializer of what it held on the export input,
  // when no input's contents reach any of them. False (nothing written) otherwise.
  bool fold_input_free(const jit::Node* n) {
    for (const jit::Value* out : n->outputs()) {
      if (out->type()->kind() == c10::TypeKind::TensorType &&
          (!input_free_->foldable(out) || values_.count(out) == 0)) {
        return false;
      }
    }
    for (const jit::Value* out : n->outputs()) {
      if (out->type()->kind() == c10::TypeKind::TensorType) {
        names_[out] = named_initializer(fresh(out->debugName()), values_.at(out).contiguous());
      }
    }
    return true;
  }

  const jit::Module& module_;
  OnnxExportOptions options_;
  std::shared_ptr<jit::Graph> graph_;
  graph_trace::ValueTensors values_;
  std::unique_ptr<InputFreeValues> input_free_;
  onnx::GraphProto* graph_proto_ = nullptr;
  std::unordered_map<const jit::Value*, std::string> names_;
  std::unordered_map<const jit::Value*, const jit::Value*> aliases_;  // unpacked -> packed
  std::map<std::string, std::string> tensor_names_;  // state_dict key -> ONNX name
  std::map<std::string, onnx_quantization::QuantizedLayer> quantized_;
  std::unordered_set<const jit::Value*> touched_;  // computed in or from a quantized layer
  std::map<std::string, std::string> qdq_names_;  // value|call|type -> dequantized name
  std::map<std::string, const jit::Value*> first_input_;  // call -> first outside tensor read
  OnnxExportSummary summary_;

 public:
  const OnnxExportSummary& summary() const { return summary_; }

 private:
  int counter_ = 0;
};

void validate(const onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
    onnx::ModelProto inferred = model;  // shape inference annotates; the written model stays lean
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true,
                                                                   /*error_mode=*/1));
  } catch (const std::exception& e) {
    throw sdk::Error(sdk::Errc::kInternal,
                     std::string("the exported ONNX model fails the ONNX checker (a Lithe bug; "
                                 "nothing was written): ") +
                         e.what());
  }
}

}  // namespace

void check_onnx_export_options(const OnnxExportOptions& options,
                               const std::string& opset_option) {
  LITHE_CHECK(options.opset >= 13 && options.opset <= 17, sdk::Errc::kInvalidConfig,
              opset_option, " must be between 13 and 17 (what this ONNX library validates), got ",
              options.opset);
  LITHE_CHECK(!options.input_shape.empty(), sdk::Errc::kInvalidConfig,
              "the ONNX export needs the input shape");
}

namespace {

// One protobuf message holds at most 2 GiB (and the graph needs some room beside the weights).
constexpr size_t kOneFileWeights = (size_t{2} << 30) - (size_t{64} << 20);

size_t weight_bytes(const onnx::ModelProto& model) {
  size_t bytes = 0;
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    bytes += t.raw_data().size();
  }
  return bytes;
}

// The validated model, initializers inline.
onnx::ModelProto build_model(const torch::jit::Module& module, const OnnxExportOptions& options,
                             OnnxExportSummary* summary) {
  check_onnx_export_options(options);
  onnx::ModelProto model;
  try {
    Emitter emitter(module, options);
    model = emitter.run();
    if (summary != nullptr) {
      *summary = emitter.summary();
    }
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kUnsupported, std::string("cannot export to ONNX: ") +
                                                  e.what_without_backtrace() +
                                                  "; nothing was written");
  }
  validate(model);
  return model;
}

std::string serialized(const onnx::ModelProto& model) {
  std::string bytes;
  LITHE_CHECK(model.SerializeToString(&bytes), sdk::Errc::kInternal,
              "the ONNX model could not be serialized");
  return bytes;
}

// Moves every initializer of at least 1 KiB into one blob (ONNX external data: the tensor keeps
// its name, type and shape, and says where its bytes are in `location`, a file beside the
// model). Returns the blob.
std::string externalize(onnx::ModelProto& model, const std::string& location) {
  std::string blob;
  for (onnx::TensorProto& t : *model.mutable_graph()->mutable_initializer()) {
    if (t.raw_data().size() < 1024) {
      continue;
    }
    const size_t offset = blob.size();
    blob += t.raw_data();
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    for (const auto& [key, value] :
         {std::pair<std::string, std::string>{"location", location},
          {"offset", std::to_string(offset)},
          {"length", std::to_string(blob.size() - offset)}}) {
      onnx::StringStringEntryProto* entry = t.add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
  }
  return blob;
}

}  // namespace

std::string export_onnx(const torch::jit::Module& module, const OnnxExportOptions& options,
                        OnnxExportSummary* summary) {
  const onnx::ModelProto model = build_model(module, options, summary);
  const size_t bytes = weight_bytes(model);
  LITHE_CHECK(bytes < kOneFileWeights, sdk::Errc::kUnsupported,
              "cannot export to ONNX: the model's weights take ", bytes / (1 << 20),
              " MiB, more than one ONNX file can hold (2 GiB); save_onnx (lithe export-onnx) "
              "writes them as external data; nothing was written");
  return serialized(model);
}

std::filesystem::path onnx_external_data_path(const std::filesystem::path& model_path) {
  return model_path.parent_path() / (model_path.filename().string() + ".data");
}

void save_onnx(const torch::jit::Module& module, const OnnxExportOptions& options,
               const std::filesystem::path& path, OnnxExportSummary* summary) {
  onnx::ModelProto model = build_model(module, options, summary);
  if (!options.external_data && weight_bytes(model) < kOneFileWeights) {
    write_file_atomic(path, serialized(model));
    return;
  }
  // Both files are staged before either is committed: a failure leaves both as they were.
  const std::filesystem::path data_path = onnx_external_data_path(path);
  StagedFile data(data_path, "the ONNX external data file");
  StagedFile onnx_file(path, "--output");
  data.write(externalize(model, data_path.filename().string()));
  onnx_file.write(serialized(model));
  data.commit();
  onnx_file.commit();
}

}  // namespace lithe::host
