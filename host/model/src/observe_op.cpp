// The host-owned TorchScript ops. `lithe::observe(Tensor(a) x, str tap) -> Tensor(a)` is inserted
// after a submodule's call to observe its output; `lithe::quantize(Tensor x, str site, int type)`
// replaces a module's input, weight or output by what the quantization callback returns.
// observe returns an alias of its input, so values and gradients pass through untouched.
// The ops live in liblithe_host (never unloaded);
// plugins never register torch ops themselves: unloading such a library crashes libtorch.
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>

#include "lithe/sdk/error.h"
#include "tap_dispatch.h"

namespace lithe::host::detail {
namespace {

template <class Callback>
struct Targets {
  std::mutex mutex;
  int64_t next_id = 1;
  std::map<int64_t, std::shared_ptr<Callback>> callbacks;

  int64_t add(Callback callback) {
    std::lock_guard<std::mutex> lock(mutex);
    const int64_t id = next_id++;
    callbacks[id] = std::make_shared<Callback>(std::move(callback));
    return id;
  }
  void remove(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex);
    callbacks.erase(id);
  }
  // The callback a site string names and the module part of it; null when the target is gone.
  std::pair<std::shared_ptr<Callback>, std::string> find(const std::string& site) {
    const size_t colon = site.find(':');
    LITHE_CHECK(colon != std::string::npos, sdk::Errc::kInvalidModel,
                "lithe op: malformed site '", site, "' (expected '<id>:<module>')");
    const int64_t id = std::stoll(site.substr(0, colon));
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = callbacks.find(id);
    if (it == callbacks.end()) {
      return {nullptr, ""};
    }
    return {it->second, site.substr(colon + 1)};
  }
};

Targets<TapCallback>& targets() {
  static auto* instance = new Targets<TapCallback>();  // outlives every model, even at exit
  return *instance;
}

Targets<QuantCallback>& quant_targets() {
  static auto* instance = new Targets<QuantCallback>();
  return *instance;
}

thread_local std::exception_ptr op_error;

// Runs `fn`; an exception is remembered for take_op_error() and rethrown.
template <class Fn>
auto remembering_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (...) {
    op_error = std::current_exception();
    throw;
  }
}

at::Tensor observe(const at::Tensor& x, const std::string& tap) {
  if (!tap.empty() && !UnobservedForwards::active()) {
    remembering_errors([&] {
      dispatch_tap(tap, x);
      return 0;
    });
  }
  return x.alias();
}

at::Tensor quantize(const at::Tensor& x, const std::string& site, int64_t type) {
  return remembering_errors([&] { return dispatch_quant(site, type, x); });
}

}  // namespace

std::exception_ptr take_op_error() {
  std::exception_ptr error = op_error;
  op_error = nullptr;
  return error;
}

int64_t register_tap_target(TapCallback callback) { return targets().add(std::move(callback)); }
void unregister_tap_target(int64_t id) { targets().remove(id); }
int64_t register_quant_target(QuantCallback callback) {
  return quant_targets().add(std::move(callback));
}
void unregister_quant_target(int64_t id) { quant_targets().remove(id); }

std::string make_tap_string(int64_t id, const std::string& module) {
  return std::to_string(id) + ":" + module;
}

void dispatch_tap(const std::string& tap, const at::Tensor& output) {
  const auto [callback, module] = targets().find(tap);
  if (callback != nullptr) {
    (*callback)(module, output);
  }
}

at::Tensor dispatch_quant(const std::string& site, int64_t type, const at::Tensor& x) {
  if (site.empty()) {
    // An unquantized instance of a module type shared with a quantized one (the rewrite is per
    // type). The schema promises a fresh tensor, so this costs one copy of its tensor.
    return x.clone();
  }
  const auto [callback, module] = quant_targets().find(site);
  if (callback == nullptr) {
    return x.clone();
  }
  LITHE_CHECK(type >= 0 && type <= 2, sdk::Errc::kInvalidModel, "lithe::quantize: bad type ",
              type);
  at::Tensor out = (*callback)(module, static_cast<sdk::QuantType>(type), x);
  if (out.is_same(x) || (out.defined() && x.defined() && out.is_alias_of(x))) {
    out = out.clone();  // the op's schema promises a fresh tensor
  }
  return out;
}

}  // namespace lithe::host::detail

TORCH_LIBRARY(lithe, m) {
  // observe returns an alias of its input, which only FROM_SCHEMA alias analysis can express.
  m.def("observe(Tensor(a) x, str tap) -> Tensor(a)", &lithe::host::detail::observe);
  // quantize has side effects (quantizer state such as EMA ranges): CONSERVATIVE alias
  // analysis keeps the JIT from merging or dropping calls (FROM_SCHEMA would let common
  // subexpression elimination fold two calls on the same value into one).
  // A composite (catch-all) kernel: autograd records the ops the callback runs, so gradients
  // flow through the quantizer's autograd function to the float tensor.
  m.def(torch::schema("quantize(Tensor x, str site, int type) -> Tensor",
                      c10::AliasAnalysisKind::CONSERVATIVE),
        &lithe::host::detail::quantize);
}
