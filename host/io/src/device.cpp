#include "lithe/host/io/device.h"

#include <ATen/Context.h>

#include <cstddef>

#include "lithe/sdk/error.h"

namespace lithe::host {

c10::Device parse_device(const std::string& text, const std::string& option) {
  if (text == "cpu") {
    return c10::Device(c10::kCPU);
  }
  const std::string cuda = "cuda";
  bool spelled = text.compare(0, cuda.size(), cuda) == 0;
  int index = 0;
  if (spelled && text.size() > cuda.size()) {
    // "cuda:N": up to 3 digits, no sign, no spaces (c10's own parser accepts "cuda:+1").
    const std::string digits = text.substr(cuda.size() + 1);
    spelled = text[cuda.size()] == ':' && !digits.empty() && digits.size() <= 3;
    for (const char c : digits) {
      spelled = spelled && c >= '0' && c <= '9';
    }
    if (spelled) {
      index = std::stoi(digits);
    }
  }
  LITHE_CHECK(spelled, sdk::Errc::kInvalidConfig, option,
              " must be cpu, cuda or cuda:N (N a device index), got '", text, "'");
  const std::size_t count = at::hasCUDA() ? at::getNumGPUs() : 0;
  LITHE_CHECK(count > 0, sdk::Errc::kUnsupported, option, " ", text,
              ": libtorch sees no CUDA device here (a CPU-only libtorch, no GPU, or "
              "CUDA_VISIBLE_DEVICES hides them); use ", option, " cpu");
  LITHE_CHECK(static_cast<std::size_t>(index) < count, sdk::Errc::kUnsupported, option, " ",
              text, ": libtorch sees ", count, " CUDA device", count == 1 ? "" : "s",
              " (cuda:0", count == 1 ? "" : " to cuda:" + std::to_string(count - 1), ")");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace lithe::host
