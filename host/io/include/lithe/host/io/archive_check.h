#pragma once
/// \file
/// Validation of torch archives (TorchScript models from torch.jit.save, and torch.save files:
/// masks, tensor data) before libtorch reads them. libtorch 1.13 trusts an archive: a tensor
/// record shorter than the storage its pickle declares gives tensors that read and write past
/// their allocation, and zip CRCs are not checked. Every verb and the C++ loaders run these
/// checks, so a bad archive is one error naming the file, the record and the problem.

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <string>

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace lithe::host {

/// Checks the zip structure of `bytes` (end of central directory, zip64, every central and local
/// header within the file, no overlapping or duplicate records, stored or deflated entries,
/// exact sizes and CRC-32 of every entry), then every pickle libtorch reads from it
/// (`<archive>/<stem>.pkl`: data.pkl, constants.pkl; deeper ones such as extra/ files are not
/// pickles libtorch reads): each storage it declares (persistent id ('storage', type, key,
/// location, numel)) must have a record `<archive>/<stem>/<key>` (a lite-interpreter bytecode.pkl
/// uses `<archive>/constants/<key>`) of at least numel x element size bytes (an empty storage
/// needs none: libtorch reads no record for it). This layout holds for torch.jit.save,
/// torch::pickle_save and Python's torch.save (zip format) alike. Pickles are run on a bounded
/// machine that knows only the opcodes torch's Pickler and torch.save write.
/// Throws sdk::Error(kInvalidModel) whose message starts with `what` and `source` (e.g.
/// "model file 'm.pt'") and names the record; reads nothing but `bytes` (no libtorch).
void check_torch_archive(const std::string& bytes, const std::string& what,
                         const std::string& source);

/// Checks that every tensor reachable from `value` (lists, tuples, dict keys and values, objects'
/// attributes, enums; shared and cyclic containers visited once) lies within its storage:
/// storage_offset + the largest index its sizes and strides reach fits in the storage's bytes,
/// and sizes, strides and the offset are non-negative. Sparse tensors are checked through their
/// index and value tensors; tensors without a plain storage (MKL-DNN, nested) are skipped.
/// Errors name the tensor by its path from the root, e.g. "tensor 'value[\"fc1\"][0]'", after
/// "<what> '<source>': ". Iterative and bounded (visits, depth): hostile nesting cannot exhaust
/// the stack.
void check_tensor_extents(const c10::IValue& value, const std::string& what,
                          const std::string& source);

/// check_tensor_extents for every parameter and buffer ("parameter 'fc1.weight'"), every other
/// attribute of `module` and its submodules ("attribute 'encoder.cache[2]'") and the tensor
/// constants in the graphs of their methods ("tensor constant in method '...forward'").
void check_module_tensors(const torch::jit::Module& module, const std::string& what,
                          const std::string& source);

}  // namespace lithe::host
