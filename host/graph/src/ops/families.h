#pragma once
// The op families of the op table (op_table.h), one file each in this folder. A family returns
// its entries; op_table.cpp only concatenates them.

#include <ATen/Functions.h>  // the tensors emissions make (initializers)

#include <string>
#include <vector>

#include "lithe/host/graph/op_table.h"

namespace lithe::host::ops {

std::vector<OpSpec> activation_ops();     // activation_ops.cpp: ReLU family, GELU, SiLU, ...
std::vector<OpSpec> convolution_ops();    // convolution_ops.cpp: convolutions and Linear
std::vector<OpSpec> normalization_ops();  // normalization_ops.cpp: BatchNorm, LayerNorm
std::vector<OpSpec> elementwise_ops();    // elementwise_ops.cpp: add, mul, ... (broadcast)
std::vector<OpSpec> pooling_ops();        // pooling_ops.cpp: pooling, resampling, reductions
std::vector<OpSpec> shape_ops();          // shape_ops.cpp: reshape, layout, shape and scalar reads
std::vector<OpSpec> concat_ops();         // concat_ops.cpp: cat
std::vector<OpSpec> attention_ops();      // attention_ops.cpp: attention kernels, SDPA

// Emissions other families reuse inside their own (a fused kernel written as its parts). Each
// writes through `w` as part of `n`'s emission and returns the name of its result; with `last`
// that result is `n`'s output (OnnxWriter::emit), otherwise an intermediate (OnnxWriter::step).

/// LayerNorm of `x` (rank `rank`) over its trailing `shape`: LayerNormalization from opset 17,
/// before it (x - mean) / sqrt(var + eps) * weight + bias. An empty weight or bias: none.
std::string layer_norm_steps(OnnxWriter& w, const torch::jit::Node* n, const std::string& x,
                             int64_t rank, const std::vector<int64_t>& shape, double eps,
                             const std::string& weight, const std::string& bias, bool last);
/// The exact GELU of `x`, x * (1 + erf(x / sqrt(2))) / 2 (ONNX has Gelu only from opset 20).
std::string gelu_steps(OnnxWriter& w, const torch::jit::Node* n, const std::string& x, bool last);

}  // namespace lithe::host::ops
