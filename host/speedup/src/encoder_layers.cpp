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

// Whether the layer's non-fused path computes what its fused kernel does: the kernel runs only
// for ReLU and GELU (activation_relu_or_gelu 1 and 2; any other activation never reaches it, so
// its forward already is the non-fused path) and applies the exact GELU, so an nn.GELU module
// with approximate='tanh' would compute another function unfused (torch's two paths differ).
bool unfuses_exactly(const jit::Module& m) {
  const c10::IValue activation =
      m.hasattr("activation_relu_or_gelu") ? m.attr("activation_relu_or_gelu") : c10::IValue();
  if (!activation.isInt() || (activation.toInt() != 1 && activation.toInt() != 2)) {
    return false;
  }
  if (m.hasattr("activation") && m.attr("activation").isModule()) {
    const jit::Module gelu = m.attr("activation").toModule();
    if (gelu.hasattr("approximate")) {
      const c10::IValue approximate = gelu.attr("approximate");
      return approximate.isString() && approximate.toStringRef() == "none";
    }
    if (gelu.type()->hasConstant("approximate")) {
      const c10::IValue approximate = gelu.type()->getConstant("approximate");
      return approximate.isString() && approximate.toStringRef() == "none";
    }
  }
  return true;
}

// Whether the stock forward has the signature the rebuilt one is written with.
bool stock_signature(const jit::Module& m) {
  const c10::FunctionSchema& schema = m.get_method("forward").function().getSchema();
  const std::vector<c10::Argument>& args = schema.arguments();
  const auto named = [&](size_t i, const char* name) {
    return args.size() > i && args[i].name() == name;
  };
  return (args.size() == 4 || (args.size() == 5 && named(4, "is_causal"))) && named(1, "src") &&
         named(2, "src_mask") && named(3, "src_key_padding_mask");
}

}  // namespace

std::vector<std::string> fused_encoder_layers(const jit::Module& module) {
  std::vector<std::string> layers;
  for (const auto& item : module.named_modules()) {
    const jit::Module& m = item.value;
    if (!m.type()->name() || m.type()->name()->name() != "TransformerEncoderLayer" ||
        !m.find_method("forward") || !m.find_method("_sa_block") ||
        !m.find_method("_ff_block") || !m.hasattr("norm_first") || !unfuses_exactly(m) ||
        !stock_signature(m)) {
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
    std::string text = kUnfusedForward;
    substitute(text, "NORM_FIRST", layer.attr("norm_first").toBool() ? "True" : "False");
    const bool causal = method_takes(layer, "forward", "is_causal");
    substitute(text, "CAUSAL_ARGUMENT", causal ? ", is_causal: bool = False" : "");
    substitute(text, "CAUSAL_PASS",
               causal && method_takes(layer, "_sa_block", "is_causal") ? ", is_causal=is_causal" : "");
    replace_forward(layer, text, "_lithe_unfused_forward");
  }
}

}  // namespace lithe::host::speedup_detail
