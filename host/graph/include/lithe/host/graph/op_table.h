#pragma once
// Internal to the host: the one table of the TorchScript ops Lithe's graph passes understand.
//
// Each op is stated once, in the file of its family under host/graph/src/ops/: how it moves
// channels (what speedup's channel flow applies) and how it is written as ONNX (what the
// exporter emits). Supporting a new op is one entry in one family file; the passes only read
// the table. Structural nodes (prim::Constant, GetAttr, list and tuple building, If, Loop) are
// not ops and stay with the passes.

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace lithe::host::ops {

/// How an op's tensor result relates to the channels (dim 1) of its tensor inputs.
enum class Channels {
  kUnknown,         ///< not described: every channel it touches is kept, and the op is named
  kNone,            ///< makes no activation (asserts, scalar arithmetic, formatting)
  kShapeQuery,      ///< reads a shape (size, dim, numel): the reader decides if channels matter
  kFresh,           ///< a new tensor shaped by its size arguments; its tensor input gives only
                    ///< the dtype and device (x.new_zeros(shape)): no channel flows through
  kZeroPreserving,  ///< output channel c comes from input channel c only, and 0 stays 0
                    ///< (ReLU, pooling, resampling, dropout in eval)
  kAligned,         ///< output channel c from input channel c, but 0 does not stay 0 (sigmoid)
  kInsertAxis,      ///< unsqueeze: a new axis at argument `dim_arg`; zero preserving
  kRemoveAxis,      ///< squeeze: removes the axis at argument `dim_arg`; zero preserving
  kSpatial,         ///< per channel over the axes after dim 1, 0 stays 0 (pooling, resampling):
                    ///< the channels must be at dim 1
  kReduction,       ///< reduces the axes it is given (mean, sum, amax): per channel unless one
                    ///< of them is the channel axis
  kBroadcast,       ///< element-wise over its tensor inputs, broadcast (add, mul, ...)
  kConvolution,     ///< a convolution: input channels to output channels through its weight
  kLinear,          ///< a Linear layer: last dimension in to out through its weight
  kBatchNorm,       ///< per-channel affine normalisation with running statistics
  kLayerNorm,       ///< normalisation over the trailing axes: over the channels when they are
                    ///< among them (then it keeps every channel), else per channel
  kConcat,          ///< concatenation of a tensor list
  kReshape,         ///< view / reshape / flatten: the channel axis may be merged or split
  kItem,            ///< one tensor of a list or dict built in the graph (x = parts[0],
                    ///< features["out"]): that tensor itself, when item_value() finds it
  kLayout,          ///< permute / transpose: the channel axis moves where the permutation sends
                    ///< it (channel-last blocks: ConvNeXt, Swin, ViT)
};

/// Where an element-wise binary op's result is zero, given where its operands are.
enum class ZeroRule {
  kBoth,    ///< only where both are (add, sub, maximum, minimum): never with a constant
  kEither,  ///< where either is (mul): a gate's zero or the tensor's own
  kFirst,   ///< where the first is (div: 0 / k)
};

/// One ONNX attribute: an int, a float, an int list or a string.
struct OnnxAttribute {
  std::string name;
  std::variant<int64_t, double, std::vector<int64_t>, std::string> value;
};

/// ONNX's TensorProto.DataType code for a tensor of torch dtype `type` as the export writes it:
/// every floating type as FLOAT (1; the export writes float models), INT64, INT32, INT8, UINT8
/// and BOOL for those integer types; 0 for a dtype the export does not write. The exporter's
/// initializers and an op's Cast use this one mapping.
int64_t onnx_data_type(at::ScalarType type);

/// What an op's ONNX emission writes through; the exporter implements it. Names are ONNX value
/// names; everything a node reads must already have one (inputs are emitted in program order).
class OnnxWriter {
 public:
  virtual ~OnnxWriter() = default;
  /// The exported opset (13..17).
  virtual int64_t opset() const = 0;
  /// The ONNX name of tensor `value` as `reader` reads it (a parameter becomes an initializer).
  virtual std::string value(const torch::jit::Value* value, const torch::jit::Node* reader) = 0;
  /// value() of input `index` of `node`.
  std::string input(const torch::jit::Node* node, size_t index) {
    return value(node->input(index), node);
  }
  /// The tensor a value took on the export input (shapes are static).
  virtual const at::Tensor& tensor(const torch::jit::Value* value) const = 0;
  /// Constant argument `index` of `node`; unsupported() when it is not a constant.
  virtual c10::IValue constant(const torch::jit::Node* node, size_t index) const = 0;
  /// Constant int-list argument (a constant or a list of int constants).
  virtual std::vector<int64_t> ints(const torch::jit::Node* node, size_t index) const = 0;
  /// Whether an optional tensor argument (a bias) is given.
  virtual bool present(const torch::jit::Value* value) const = 0;
  /// Whether `node`'s weight (input 1) is exported quantized (a DequantizeLinear output).
  virtual bool weight_is_quantized(const torch::jit::Node* node) const = 0;
  /// A new initializer holding `value`; returns its name.
  virtual std::string initializer(const std::string& stem, const at::Tensor& value) = 0;
  /// Writes `type` on `inputs` (an empty name: an optional input left out) as the value of
  /// `node`'s output 0; returns its name.
  virtual std::string emit(const torch::jit::Node* node, const std::string& type,
                           const std::vector<std::string>& inputs,
                           const std::vector<OnnxAttribute>& attributes = {}) = 0;
  /// Writes `type` on `inputs` as an intermediate value of `node`'s emission; returns its name.
  virtual std::string step(const torch::jit::Node* node, const std::string& type,
                           const std::vector<std::string>& inputs,
                           const std::vector<OnnxAttribute>& attributes = {}) = 0;
  /// Writes `type` on `inputs` with one output per value of `outputs` (the items of a list the
  /// graph unpacks), naming each.
  virtual void emit_each(const torch::jit::Node* node, const std::string& type,
                         const std::vector<std::string>& inputs,
                         const std::vector<const torch::jit::Value*>& outputs,
                         const std::vector<OnnxAttribute>& attributes = {}) = 0;
  /// Gives up on the export: names the op, where it is, and `why`.
  [[noreturn]] virtual void unsupported(const torch::jit::Node* node,
                                        const std::string& why) const = 0;
};

/// One call of an op on a traced forward, for counting its FLOPs: the node and the tensors its
/// values took (null for a value that is not a tensor or was not recorded).
struct OpCall {
  const torch::jit::Node* node = nullptr;
  std::function<const at::Tensor*(const torch::jit::Value*)> tensor;
  const at::Tensor* input(size_t index) const {
    return index < node->inputs().size() ? tensor(node->input(index)) : nullptr;
  }
  const at::Tensor* output(size_t index) const {
    return index < node->outputs().size() ? tensor(node->output(index)) : nullptr;
  }
};

/// One op, with every variant that shares its behaviour (its in-place form, its aliases).
struct OpSpec {
  std::vector<const char*> names;  ///< qualified names: "aten::relu", "aten::relu_"
  Channels channels = Channels::kUnknown;
  /// Writes the op as ONNX; null when the export does not support it.
  void (*onnx)(OnnxWriter& writer, const torch::jit::Node* node) = nullptr;
  /// The argument naming the axis (or axes) the op works along: along the channel axis a
  /// kAligned op mixes channels (softmax's dim), a kReduction reduces them; for kInsertAxis /
  /// kRemoveAxis, the axis added or removed. -1: none.
  int dim_arg = -1;
  /// kReduction: its keepdim argument (-1: the axes go).
  int keepdim_arg = -1;
  /// kZeroPreserving ops whose keeping 0 at 0 depends on their arguments (hardtanh's range);
  /// null: always.
  bool (*keeps_zero)(const torch::jit::Node* node) = nullptr;
  /// kBroadcast: where the result is zero.
  ZeroRule zeros = ZeroRule::kBoth;
  /// An op that makes a list of tensors (chunk, split) is written where the list is unpacked
  /// (`a, b = x.chunk(2, 1)`): `unpack` is the prim::ListUnpack of `node`'s output.
  void (*onnx_unpacked)(OnnxWriter& writer, const torch::jit::Node* node,
                        const torch::jit::Node* unpack) = nullptr;
  /// FLOPs of one call (a multiply-accumulate counts once, as NNI counts convolutions and
  /// Linear); null: the rule of its channel kind (op_flops).
  int64_t (*flops)(const OpCall& call) = nullptr;
  /// kZeroPreserving ops that select part of the axis `dim_arg` (slice): along any other axis
  /// they keep every channel; along the channel axis only when selects_whole_axis() says so
  /// (torch 2.x scripts `s[:, :, None, None]` as two full-range slices, of dims 0 and 1, and
  /// two unsqueezes). The dependency analysis ends its walk at them, as at other cutting ops.
  bool selects = false;
};

/// FLOPs of one call of a listed op: the spec's own rule, else by its channel kind: one per
/// output value for element-wise ops (activations, add, mul, ...), one per input value for
/// pooling and reductions, two per input value for BatchNorm and LayerNorm (NNI's BatchNorm
/// count), none for shape reads, views, layout changes, copies and data movement (cat, slice,
/// pad, index, ...). 0 when a tensor the rule reads was not recorded.
int64_t op_flops(const OpSpec& spec, const OpCall& call);
/// A rule for ops that compute nothing (dropout in evaluation, expand).
int64_t no_flops(const OpCall& call);

/// `d` as an axis of a rank-`rank` tensor (a negative one counts from the end).
inline int64_t normalized_axis(int64_t d, int64_t rank) { return (d % rank + rank) % rank; }

/// An int list known before running: a constant int or int list, or a list literal of int
/// constants ((2, 3)); nullopt otherwise.
std::optional<std::vector<int64_t>> constant_ints(const torch::jit::Value* value);

/// The axis permutation (normalized) that aten::permute or aten::transpose applies to a
/// rank-`rank` input; nullopt when its arguments are not constants.
std::optional<std::vector<int64_t>> layout_permutation(const torch::jit::Node* node, int64_t rank);

/// Whether `user` may write into its input number `index` (aten::append(list, x), x.add_(y),
/// aten::_set_item(list, i, v)): its schema marks that argument written. False for an op
/// without a schema (prim ops, calls); callers that must assume the worst there (constant
/// folding, list_items) check the schema themselves.
bool writes_input(const torch::jit::Node* user, size_t index);

/// Whether `node` reads its tensor inputs only for their shape, dtype or device, never their
/// contents: the table's shape queries and fresh tensors (x.size(), x.new_zeros(...)), and
/// prim::is_cuda / prim::is_nested. The analyses that follow contents (dependency walk,
/// shape folding, export's input-free tensors) all stop there.
bool reads_only_metadata(const torch::jit::Node* node);

/// Whether aten::slice `node` keeps every index of an axis of `size` whatever that size
/// becomes after channels go: start a constant None or 0 (or <= -size), end a constant None or
/// >= size, step a constant 1. A bound computed at run time is not trusted, even when one trace
/// saw the whole axis.
bool selects_whole_axis(const torch::jit::Node* node, int64_t size);

/// The table's entry for `kind`, or null for an op it does not describe.
const OpSpec* find_op(c10::Symbol kind);

/// The tensors of a list value as `reader` sees it: the items of its prim::ListConstruct plus
/// those appended (aten::append in the same block) before `reader`. Nullopt when the list is
/// made or changed any other way (then what it holds at `reader` is not known from the graph).
std::optional<std::vector<const torch::jit::Value*>> list_items(const torch::jit::Value* list,
                                                                const torch::jit::Node* reader);

/// The value `getitem` (aten::__getitem__ with a constant index or key) reads: an item of a list
/// (list_items) or the last value stored under that key in a dict made by prim::DictConstruct
/// or aten::dict() (OrderedDict()) and changed only by aten::_set_item with constant keys in its
/// own block before `getitem`.
/// Null when the container is anything else.
const torch::jit::Value* item_value(const torch::jit::Node* getitem);

}  // namespace lithe::host::ops
