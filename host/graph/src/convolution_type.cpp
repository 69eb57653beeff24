// A convolution module recognised by its class or, for a subclass, by its structure (see the
// header): the rebuild in speedup and the layer lists of the model and the dependency analysis
// must agree on which modules are convolutions.
#include "lithe/host/graph/convolution_type.h"

#include <ATen/core/class_type.h>

namespace lithe::host {

std::optional<std::string> convolution_type(const c10::ClassTypePtr& cls, int64_t spatial) {
  static const char* const kNames[] = {"Conv1d", "Conv2d", "Conv3d"};
  if (!cls || !cls->is_module() || !cls->name() || spatial < 1 || spatial > 3) {
    return std::nullopt;
  }
  const std::string name = kNames[spatial - 1];
  if (cls->name()->qualifiedName().rfind("__torch__.torch.nn.modules.", 0) == 0) {
    return cls->name()->name() == name ? std::optional<std::string>(name) : std::nullopt;
  }
  for (const char* required : {"in_channels", "out_channels", "groups"}) {
    if (!cls->hasAttribute(required) && !cls->hasConstant(required)) {
      return std::nullopt;
    }
  }
  if (!cls->hasAttribute("weight")) {
    return std::nullopt;
  }
  for (size_t i = 0; i < cls->numAttributes(); ++i) {
    const c10::TypePtr type = cls->getAttribute(i);
    const std::string& attribute = cls->getAttributeName(i);
    const auto child = type->cast<c10::ClassType>();
    const bool tensor = type->kind() == c10::TypeKind::TensorType || cls->is_parameter(i) ||
                        cls->is_buffer(i);
    if ((child && child->is_module()) || (tensor && attribute != "weight" && attribute != "bias")) {
      return std::nullopt;
    }
  }
  return name;
}

}  // namespace lithe::host
