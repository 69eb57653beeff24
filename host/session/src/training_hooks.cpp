#include "lithe/host/session/training_hooks.h"

#include "lithe/host/dist/process_group.h"

namespace lithe::host {

TrainingHooks::~TrainingHooks() = default;
std::vector<at::Tensor> TrainingHooks::extra_parameters() { return {}; }
void TrainingHooks::end_of_data() {}
at::Tensor TrainingHooks::loss_terms() { return {}; }
std::vector<at::Tensor> TrainingHooks::replicated_state() const { return {}; }

void TrainingHooks::reduce_with_group(std::vector<at::Tensor>& tensors,
                                      sdk::Reduction op) const {
  if (process_group_ != nullptr && process_group_->world_size() > 1) {
    process_group_->all_reduce(tensors, op, "an algorithm's statistics");
  }
}

}  // namespace lithe::host
