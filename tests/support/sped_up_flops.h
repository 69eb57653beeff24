#pragma once
// The share of a model's FLOPs (NNI's default count) that a set of masks leaves once speedup
// removed what they zero: checked independently of the session's cost meter, for tests of the
// search pruners' budgets.

#include <torch/script.h>

#include <cstdint>
#include <vector>

#include "lithe/host/graph/flops_counter.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/speedup/speedup.h"

namespace lithe::test {

inline double sped_up_flops_share(const torch::jit::Module& dense, const host::NamedMasks& masks,
                                  const std::vector<int64_t>& input_shape) {
  const host::SpeedupResult sped =
      host::speedup_model(dense, masks, at::zeros(input_shape), "the test's masks");
  const auto flops = [&](const torch::jit::Module& m) {
    return static_cast<double>(
        host::count_flops(m, input_shape, host::FlopsMode::kDefault).total_flops);
  };
  return flops(*sped.module) / flops(dense);
}

}  // namespace lithe::test
