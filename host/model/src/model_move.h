#pragma once
// What both Model adapters do around their module's in-place .to(device): libtorch's refusal
// (a device its tensors cannot move to in place, such as meta; an unusable CUDA device) becomes
// one sdk::Error naming the device. libtorch refuses at the first tensor, before any has moved.

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <string>

#include "lithe/sdk/error.h"

namespace lithe::host::detail {

template <class Move>
void move_model_tensors(const c10::Device& device, Move&& move) {
  try {
    move();
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    throw sdk::Error(sdk::Errc::kUnsupported, "cannot move the model to " + device.str() + ": " +
                                                  message.substr(0, message.find('\n')));
  }
}

}  // namespace lithe::host::detail
