#include "model_warnings.h"

#include <c10/util/Exception.h>

#include <iostream>
#include <mutex>
#include <set>
#include <string>

namespace lithe::cli {
namespace {

class OncePerMessage final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    const std::string& message = warning.msg();
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
