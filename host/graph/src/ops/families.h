#pragma once
// The op families of the op table (op_table.h), one file each in this folder. A family returns
// its entries; op_table.cpp only concatenates them.

#include <ATen/Functions.h>  // the tensors emissions make (initializers)

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
std::vector<OpSpec> attention_ops();      // attention_ops.cpp: nn.MultiheadAttention's kernel

}  // namespace lithe::host::ops
