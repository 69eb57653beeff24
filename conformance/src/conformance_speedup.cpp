// ModelSpeedup cases: NNI's masks file (mask.pth, as NNI wrote it) applied to the case model and
// sped up; every tensor of NNI's sped-up state_dict (`speedup.<key>`) must equal Lithe's, and
// Lithe's output must equal NNI's sped-up output. Where both differ from the masked model (the
// BatchNorm shift on removed channels, README behaviour 18) Lithe's report must explain the
// whole difference.
#include <torch/script.h>

#include <map>
#include <string>
#include <vector>

#include "conformance_case.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/speedup/speedup.h"

namespace lithe::host::conformance_detail {
namespace {

std::map<std::string, at::Tensor> state_of(const torch::jit::Module& module) {
  std::map<std::string, at::Tensor> state;
  for (const auto& p : module.named_parameters()) {
    state[p.name] = p.value;
  }
  for (const auto& b : module.named_buffers()) {
    state[b.name] = b.value;
  }
  return state;
}

}  // namespace

Verdict replay_speedup(const CaseContext& c) {
  const fs::path mask_file = c.case_dir / "mask.pth";
  if (!fs::exists(mask_file)) {
    fail("the case has no mask.pth");
  }
  const NamedMasks masks = load_masks(mask_file);
  const torch::jit::Module model = load_case_model(c);
  const at::Tensor& input = tensor(c, "input");
  const SpeedupResult result = speedup_model(model, masks, input);

  const std::map<std::string, at::Tensor> ours = state_of(*result.module);
  const std::string prefix = "speedup.";
  int compared = 0;
  std::vector<std::string> notes;
  for (const auto& [key, expected] : c.tensors) {
    if (key.rfind(prefix, 0) != 0) {
      continue;
    }
    const std::string name = key.substr(prefix.size());
    const auto found = ours.find(name);
    if (found == ours.end()) {
      fail("the smaller model has no '" + name + "' (NNI's has shape " +
           c10::str(expected.sizes()) + ")");
    }
    if (found->second.sizes() != expected.sizes()) {
      fail("'" + name + "' has shape " + c10::str(found->second.sizes()) + ", NNI's " +
           c10::str(expected.sizes()));
    }
    if (name.size() > 20 && name.compare(name.size() - 20, 20, "num_batches_tracked") == 0) {
      continue;  // a counter, not part of the layer's shape or math
    }
    if (!found->second.equal(expected)) {
      fail("'" + name + "' differs from NNI's: " + bitwise_difference(found->second, expected));
    }
    ++compared;
  }
  if (compared == 0) {
    fail("the case records no speedup.* tensors");
  }
  torch::jit::Module small = *result.module;
  at::Tensor output;
  {
    at::NoGradGuard no_grad;
    output = small.forward({input}).toTensor();
  }
  std::string detail;
  if (!close_enough(output, tensor(c, "output_speedup"), &detail)) {
    fail("the smaller model's output differs from NNI's sped-up output: " + detail);
  }
  if (result.max_abs_diff_without_bn_shift > 1e-5) {
    fail("the difference to the masked model (" + std::to_string(result.max_abs_diff) +
         ") is not explained by the BatchNorm shift: " +
         std::to_string(result.max_abs_diff_without_bn_shift) + " remains");
  }
  std::string reason = std::to_string(compared) + " tensors and the output match NNI";
  if (!result.batchnorm_shifts.empty()) {
    reason += "; max |smaller - masked| " + std::to_string(result.max_abs_diff) +
              " is the BatchNorm shift on removed channels (as NNI), " +
              std::to_string(result.max_abs_diff_without_bn_shift) + " without it";
  }
  return {Outcome::kPass, reason};
}

}  // namespace lithe::host::conformance_detail
