#include "lithe/host/training_hooks.h"

namespace lithe::host {

TrainingHooks::~TrainingHooks() = default;
std::vector<at::Tensor> TrainingHooks::extra_parameters() { return {}; }

}  // namespace lithe::host
