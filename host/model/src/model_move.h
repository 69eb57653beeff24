#pragma once
// What both Model adapters do around their module's in-place .to(device): libtorch's refusal
// (a device its tensors cannot move to in place, such as meta; an unusable or full CUDA device)
// becomes one sdk::Error naming the device. A refusal at a later tensor (out of memory halfway)
// leaves the first ones moved: they are moved back to where they were, as far as that goes.

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <string>

#include "lithe/sdk/error.h"

namespace lithe::host::detail {

/// `move(d)` moves every tensor of the model to d in place; `from` is where they were.
template <class Move>
void move_model_tensors(const c10::Device& from, const c10::Device& device, Move&& move) {
  try {
    move(device);
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    try {
      move(from);
    } catch (const c10::Error&) {  // the first error is the one to report
    }
    throw sdk::Error(sdk::Errc::kUnsupported, "cannot move the model to " + device.str() + ": " +
                                                  message.substr(0, message.find('\n')));
  }
}

}  // namespace lithe::host::detail
