#pragma once
// What the jobs' sources share: the shorthand for fields in messages, clocks and ratios.

#include <torch/script.h>

#include <chrono>
#include <sstream>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/host/io/field_error.h"

namespace lithe::host::job_support {

/// F("output") is field_ref("output").
inline std::string F(std::string_view name) { return field_ref(name); }

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// a / b, or 0 when b is not positive (a ratio no report should print as inf or nan).
inline double ratio(double a, double b) { return b > 0 ? a / b : 0; }

inline int64_t parameter_count(const torch::jit::Module& module) {
  int64_t n = 0;
  for (const at::Tensor& p : module.parameters()) {
    n += p.numel();
  }
  return n;
}

/// The TorchScript archive `module` saves as. Through a stream, the archive's inner folder is
/// always "archive/", so identical modules give identical bytes (as Model::serialize).
inline std::string module_bytes(const torch::jit::Module& module) {
  std::ostringstream out(std::ios::binary);
  module.save(out);
  return std::move(out).str();
}

/// "4,1,28,28": a shape as the CLI's --input-shape spells it.
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (const int64_t d : shape) {
    text += (text.empty() ? "" : ",") + std::to_string(d);
  }
  return text;
}

}  // namespace lithe::host::job_support
