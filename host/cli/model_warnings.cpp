#include "model_warnings.h"

#include <c10/util/Exception.h>

#include <iostream>
#include <mutex>
#include <set>
#include <string>

namespace lithe::cli {
namespace {

// libtorch 2.15 deprecates its quantized tensors (torch.quint8/qint8), which the native int8
// models of `lithe convert` are made of; the warning comes from Lithe's own calls, not from the
// user's model, and README's int8 section says so.
bool is_quantized_tensor_deprecation(const std::string& message) {
  return message.rfind("torch.quantize_per_tensor, torch.quantize_per_channel and other quantized "
                       "tensor creation functions",
                       0) == 0;
}

class OncePerMessage final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    const std::string& message = warning.msg();
    if (is_quantized_tensor_deprecation(message)) {
      return;
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    if (seen_.insert(message).second) {
      std::cerr << "lithe: warning: " << message << " (the model's own warning; shown once)\n";
    }
  }

 private:
  std::mutex mutex_;
  std::set<std::string> seen_;
};

}  // namespace

void print_model_warnings_once() {
  static OncePerMessage handler;
  c10::WarningUtils::set_warning_handler(&handler);
}

}  // namespace lithe::cli
