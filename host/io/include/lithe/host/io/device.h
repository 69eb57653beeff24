#pragma once
/// \file
/// Where a command computes: `--device cpu`, `cuda` or `cuda:N`, checked against the devices
/// libtorch sees before any work, so that a machine without a GPU gets one line saying so
/// instead of an error from deep inside a forward.

#include <c10/core/Device.h>

#include <string>

namespace lithe::host {

/// Parses `text` (given as option `option`, e.g. "--device") into a device this process can
/// use: "cpu"; "cuda" (= cuda:0) or "cuda:N" with N a decimal device index (of the devices
/// CUDA_VISIBLE_DEVICES leaves visible). Throws sdk::Error(kInvalidConfig) naming the option,
/// the rule and the value for any other spelling, and kUnsupported when libtorch sees no CUDA
/// device (a CPU-only libtorch, or no GPU on this machine) or fewer than N + 1 of them.
c10::Device parse_device(const std::string& text, const std::string& option = "--device");

}  // namespace lithe::host
