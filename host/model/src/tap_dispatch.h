#pragma once
// Routing from the `lithe::observe` and `lithe::quantize` ops to the callbacks of the model that inserted it. A tap
// string is "<target id>:<module name>"; an empty string means "not observed".

#include <cstdint>
#include <exception>
#include <string>

#include "lithe/host/model/model.h"

namespace lithe::host::detail {

/// Registers `callback`; returns the id to put in tap strings.
int64_t register_tap_target(TapCallback callback);
/// Forgets a target; taps that still name it do nothing.
void unregister_tap_target(int64_t id);
/// "<id>:<module>"
std::string make_tap_string(int64_t id, const std::string& module);
/// Called by the op for every observed output.
void dispatch_tap(const std::string& tap, const at::Tensor& output);

/// The same routing for `lithe::quantize`: sites are "<id>:<module>" strings too.
int64_t register_quant_target(QuantCallback callback);
void unregister_quant_target(int64_t id);
/// The TorchScript interpreter turns an exception thrown inside an op into a generic runtime
/// error whose first line says nothing. The ops therefore keep the original exception of the
/// failing call on this thread; Model::forward rethrows it (take_op_error returns and clears
/// it, null when none).
std::exception_ptr take_op_error();

/// The tensor to use instead of `x`; never `x` itself or an alias of it (a later in-place op
/// on the result must not change a tensor autograd saved). An empty site returns a copy.
at::Tensor dispatch_quant(const std::string& site, int64_t type, const at::Tensor& x);

}  // namespace lithe::host::detail
