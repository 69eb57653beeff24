// Built instead of src/cuda/*.cu when LITHE_WITH_CUDA is off.

#include "lithe/kernels/selection.h"

namespace lithe::kernels {

bool cuda_compiled() noexcept { return false; }

}  // namespace lithe::kernels
