// apply_compression_results: every entry of a mask file validated against the model, then the
// weights masked through the kernels' exact-zero masking.

#include "lithe/host/model/apply_compression_results.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>

#include <utility>
#include <vector>

#include "lithe/kernels/masking.h"
#include "lithe/sdk/error.h"

namespace lithe::host {

namespace fs = std::filesystem;

void apply_compression_results(Model& model, const NamedMasks& masks, const std::string& source) {
  // Validate everything first: a bad file must leave the model untouched.
  std::vector<std::pair<const ModuleRecord*, const sdk::Masks*>> plan;
  for (const auto& [name, m] : masks) {
    const ModuleRecord* record = model.find_module(name);
    LITHE_CHECK(record != nullptr, sdk::Errc::kShapeMismatch, "mask file '", source,
                "': the model has no module named '", name, "'");
    LITHE_CHECK(record->weight.has_value(), sdk::Errc::kShapeMismatch, "mask file '", source,
                "': module '", name, "' (", record->op_type, ") has no weight");
    LITHE_CHECK(m.weight.sizes() == record->weight->sizes(), sdk::Errc::kShapeMismatch,
                "mask file '", source, "', layer '", name, "': weight mask shape ",
                m.weight.sizes(), " does not match the weight shape ", record->weight->sizes());
    if (m.bias.has_value() && record->bias.has_value()) {
      LITHE_CHECK(m.bias->sizes() == record->bias->sizes(), sdk::Errc::kShapeMismatch,
                  "mask file '", source, "', layer '", name, "': bias mask shape ",
                  m.bias->sizes(), " does not match the bias shape ", record->bias->sizes());
    }
    plan.emplace_back(record, &m);
  }
  at::NoGradGuard no_grad;
  // The sessions' masking kernel: a pruned entry becomes exactly 0, whatever it held.
  for (const auto& [record, m] : plan) {
    kernels::apply_mask_(*record->weight, m->weight.to(record->weight->options()));
    if (m->bias.has_value() && record->bias.has_value()) {
      kernels::apply_mask_(*record->bias, m->bias->to(record->bias->options()));
    }
  }
}

void apply_compression_results(Model& model, const fs::path& masks_file) {
  apply_compression_results(model, load_masks(masks_file), masks_file.string());
}

}  // namespace lithe::host
