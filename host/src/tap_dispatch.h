#pragma once
// Routing from the `lithe::observe` op to the callbacks of the model that inserted it. A tap
// string is "<target id>:<module name>"; an empty string means "not observed".

#include <cstdint>
#include <string>

#include "lithe/host/model.h"

namespace lithe::host::detail {

/// Registers `callback`; returns the id to put in tap strings.
int64_t register_tap_target(TapCallback callback);
/// Forgets a target; taps that still name it do nothing.
void unregister_tap_target(int64_t id);
/// "<id>:<module>"
std::string make_tap_string(int64_t id, const std::string& module);
/// Called by the op for every observed output.
void dispatch_tap(const std::string& tap, const at::Tensor& output);

}  // namespace lithe::host::detail
