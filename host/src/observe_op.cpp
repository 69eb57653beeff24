// The host-owned TorchScript op `lithe::observe(Tensor(a) x, str tap) -> Tensor(a)`, inserted
// after a submodule's call to observe its output. It returns an alias of its input, so values
// and gradients pass through untouched. The op lives in liblithe_host (never unloaded);
// plugins never register torch ops themselves: unloading such a library crashes libtorch.
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>

#include "lithe/sdk/error.h"
#include "tap_dispatch.h"

namespace lithe::host::detail {
namespace {

struct TapTargets {
  std::mutex mutex;
  int64_t next_id = 1;
  std::map<int64_t, std::shared_ptr<TapCallback>> callbacks;
};

TapTargets& targets() {
  static auto* instance = new TapTargets();  // outlives every model, even at exit
  return *instance;
}

at::Tensor observe(const at::Tensor& x, const std::string& tap) {
  if (!tap.empty() && !UnobservedForwards::active()) {
    dispatch_tap(tap, x);
  }
  return x.alias();
}

}  // namespace

int64_t register_tap_target(TapCallback callback) {
  TapTargets& t = targets();
  std::lock_guard<std::mutex> lock(t.mutex);
  const int64_t id = t.next_id++;
  t.callbacks[id] = std::make_shared<TapCallback>(std::move(callback));
  return id;
}

void unregister_tap_target(int64_t id) {
  TapTargets& t = targets();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.callbacks.erase(id);
}

std::string make_tap_string(int64_t id, const std::string& module) {
  return std::to_string(id) + ":" + module;
}

void dispatch_tap(const std::string& tap, const at::Tensor& output) {
  const size_t colon = tap.find(':');
  LITHE_CHECK(colon != std::string::npos, sdk::Errc::kInvalidModel,
              "lithe::observe: malformed tap '", tap, "' (expected '<id>:<module>')");
  const int64_t id = std::stoll(tap.substr(0, colon));
  std::shared_ptr<TapCallback> callback;
  {
    TapTargets& t = targets();
    std::lock_guard<std::mutex> lock(t.mutex);
    const auto it = t.callbacks.find(id);
    if (it == t.callbacks.end()) {
      return;
    }
    callback = it->second;
  }
  (*callback)(tap.substr(colon + 1), output);
}

}  // namespace lithe::host::detail

TORCH_LIBRARY(lithe, m) {
  m.def("observe(Tensor(a) x, str tap) -> Tensor(a)", &lithe::host::detail::observe);
}
