// nn.TransformerEncoderLayer without its fused inference kernel (encoder_layers.h says why).
#include "encoder_layers.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <functional>

#include "lithe/host/graph/submodule.h"
#include "lithe/sdk/error.h"
#include "module_rebuild.h"

namespace lithe::host::speedup_detail {
namespace {

namespace jit = torch::jit;

constexpr const char* kFused = "aten::_transformer_encoder_layer_fwd";

// The stock forward's non-fused path (torch.nn.TransformerEncoderLayer.forward after its
// fast-path check), with the same signature. NORM_FIRST is the layer's norm_first, written in as
// a literal so that the graph holds one path. Submodules are called through .forward: code
// compiled from C++ sees `self` as a plain class, whose module attributes have no __call__.
// CAUSAL_ARGUMENT / CAUSAL_PASS are the `is_causal` argument and its passing on where the stock
// forward and _sa_block take it (torch >= 2.0), nothing where not.
constexpr const char* kUnfusedForward = R"TS(
def _lithe_unfused_forward(self, src: Tensor, src_mask: Optional[Tensor] = None,
                           src_key_padding_mask: Optional[Tensor] = NoneCAUSAL_ARGUMENT) -> Tensor:
    x = src
    if NORM_FIRST:
        x = x + self._sa_block(self.norm1.forward(x), src_mask, src_key_padding_maskCAUSAL_PASS)
        x = x + self._ff_block(self.norm2.forward(x))
    else:
        x = self.norm1.forward(x + self._sa_block(x, src_mask, src_key_padding_maskCAUSAL_PASS))
        x = self.norm2.forward(x + self._ff_block(x))
    return x
)TS";

bool calls_fused_kernel(const jit::Block* block) {
  static const c10::Symbol fused = c10::Symbol::fromQualString(kFused);
  for (const jit::Node* node : block->nodes()) {
    if (node->kind() == fused) {
      return true;
    }
    for (const jit::Block* sub : node->blocks()) {
      if (calls_fused_kernel(sub)) {
        return true;
      }
    }
  }
  return false;
}

bool takes(const jit::Module& m, const char* method, const char* argument) {
  return m.find_method(method)
      ->function()
      .getSchema()
      .argumentIndexWithName(argument)
      .has_value();
}

}  // namespace

std::vector<std::string> fused_encoder_layers(const jit::Module& module) {
  std::vector<std::string> layers;
  for (const auto& item : module.named_modules()) {
    const jit::Module& m = item.value;
    if (!m.type()->name() || m.type()->name()->name() != "TransformerEncoderLayer" ||
        !m.find_method("forward") || !m.find_method("_sa_block") ||
        !m.find_method("_ff_block") || !m.hasattr("norm_first")) {
      continue;
    }
    const jit::Function& forward = m.get_method("forward").function();
    if (calls_fused_kernel(jit::toGraphFunction(forward).graph()->block())) {
      layers.push_back(item.name);
    }
  }
  return layers;
}

void unfuse_encoder_layers(jit::Module& module, const std::vector<std::string>& layers) {
  for (const std::string& name : layers) {
    jit::Module layer = submodule(module, name);
    // The fused kernel exists for ReLU and GELU only (activation_relu_or_gelu 1 and 2), and its
    // path runs only then: any other activation never reaches it.
    const c10::IValue activation = layer.hasattr("activation_relu_or_gelu")
                                       ? layer.attr("activation_relu_or_gelu")
                                       : c10::IValue();
    LITHE_CHECK(activation.isInt() && (activation.toInt() == 1 || activation.toInt() == 2),
                sdk::Errc::kUnsupported, "cannot rebuild encoder layer '", name,
                "': its activation is not ReLU or GELU (activation_relu_or_gelu is ",
                activation.isInt() ? std::to_string(activation.toInt()) : "missing", ")");
    std::string text = kUnfusedForward;
    substitute(text, "NORM_FIRST", layer.attr("norm_first").toBool() ? "True" : "False");
    const bool causal = takes(layer, "forward", "is_causal");
    substitute(text, "CAUSAL_ARGUMENT", causal ? ", is_causal: bool = False" : "");
    substitute(text, "CAUSAL_PASS",
               causal && takes(layer, "_sa_block", "is_causal") ? ", is_causal=is_causal" : "");
    replace_forward(layer, text, "_lithe_unfused_forward");
  }
}

}  // namespace lithe::host::speedup_detail
