#pragma once
/// \file
/// Writing values in torch.save's file layout, loadable by Python's `torch.load` with its
/// default `weights_only=True` (PyTorch 2.6 and later) as well as by libtorch.

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <functional>
#include <string>

namespace lithe::host {

/// Streams `value` to `sink` as torch.save's zip archive: `data.pkl` holds the structure and
/// `data/<i>` each tensor. Dicts and lists are pickled without libtorch's type tags
/// (`torch.jit._pickle.restore_type_tag`), which `weights_only` loading refuses; libtorch reads
/// such a file back with the same values. `sink` returns the bytes it took (short = failure).
void write_torch_save_archive(const c10::IValue& value,
                              const std::function<size_t(const void*, size_t)>& sink);

/// The whole archive of write_torch_save_archive() in memory.
std::string torch_save_bytes(const c10::IValue& value);

}  // namespace lithe::host
