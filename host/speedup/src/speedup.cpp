// Speedup: masked copy -> channel plan -> unique-type copy with smaller layers -> checks against
// the masked model, with the BatchNorm shift measured separately so that a difference is
// explained, not hidden.
#include "lithe/host/speedup/speedup.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attention_heads.h"
#include "channel_flow.h"
#include "encoder_layers.h"
#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/model/apply_compression_results.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "module_rebuild.h"
#include "window_attention_heads.h"
#include "lithe/host/graph/submodule.h"

namespace lithe::host {
namespace {

namespace jit = torch::jit;
using speedup_detail::ChannelPlan;
using speedup_detail::LayerKind;
using speedup_detail::LayerPlan;


void collect_tensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      collect_tensors(entry.value(), out);
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      collect_tensors(element, out);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      collect_tensors(element, out);
    }
  }
}

std::vector<at::Tensor> run(jit::Module& module, const at::Tensor& input, const char* which) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> outputs;
  try {
    collect_tensors(module.forward({input}), outputs);
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kInternal, std::string("the ") + which +
                                               " model failed on the example input: " +
                                               e.what_without_backtrace());
  } catch (const std::exception& e) {  // the interpreter's JITException
    throw sdk::Error(sdk::Errc::kInternal, std::string("the ") + which +
                                               " model failed on the example input: " +
                                               graph_trace::interpreter_message(e));
  }
  LITHE_CHECK(!outputs.empty(), sdk::Errc::kUnsupported, "the ", which,
              " model returns no tensor, so the smaller model cannot be checked against it");
  return outputs;
}

double max_abs_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  LITHE_CHECK(a.size() == b.size(), sdk::Errc::kInternal, "the smaller model returns ", a.size(),
              " tensors, the masked one ", b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    LITHE_CHECK(a[i].sizes() == b[i].sizes(), sdk::Errc::kInternal,
                "output ", i, " of the smaller model has shape ", a[i].sizes(),
                ", the masked model's ", b[i].sizes());
    if (a[i].numel() > 0) {
      worst = std::max(worst, (a[i].to(at::kDouble) - b[i].to(at::kDouble)).abs().max().item<double>());
    }
  }
  return worst;
}

std::vector<int64_t> removed(const LayerPlan& plan) {
  std::vector<int64_t> out;
  size_t k = 0;
  for (int64_t i = 0; i < plan.out_channels; ++i) {
    if (k < plan.keep_out.size() && plan.keep_out[k] == i) {
      ++k;
    } else {
      out.push_back(i);
    }
  }
  return out;
}

double constant_of(const jit::Module& module, const std::string& name, double fallback) {
  if (module.type()->hasConstant(name)) {
    const c10::IValue v = module.type()->getConstant(name);
    return v.isDouble() ? v.toDouble() : fallback;
  }
  if (module.hasattr(name) && module.attr(name).isDouble()) {
    return module.attr(name).toDouble();
  }
  return fallback;
}

// β − μ·γ/√(σ²+ε) on the channels a BatchNorm loses; also zeroes γ and β there in `reference`,
// so that its output no longer carries the shift.
BatchNormShift measure_shift(const std::string& name, const LayerPlan& plan,
                             const jit::Module& masked, jit::Module& reference) {
  BatchNormShift shift{name, 0, 0};
  const std::vector<int64_t> gone = removed(plan);
  if (gone.empty()) {
    return shift;
  }
  const jit::Module bn = submodule(masked, name);
  const at::Tensor idx = at::tensor(gone, at::kLong);
  const c10::IValue mean_v = bn.attr("running_mean", c10::IValue());
  const c10::IValue var_v = bn.attr("running_var", c10::IValue());
  const c10::IValue gamma_v = bn.attr("weight", c10::IValue());
  const c10::IValue beta_v = bn.attr("bias", c10::IValue());
  const auto pick = [&idx](const c10::IValue& v, double absent) {
    return v.isTensor() && v.toTensor().defined()
               ? v.toTensor().detach().index_select(0, idx).to(at::kDouble)
               : at::full({idx.numel()}, absent, at::kDouble);
  };
  const at::Tensor gamma = pick(gamma_v, 1.0);  // affine=False: γ = 1, β = 0
  const at::Tensor beta = pick(beta_v, 0.0);
  at::Tensor value = beta;  // batch statistics: a constant channel normalises to 0, leaving β
  if (mean_v.isTensor() && var_v.isTensor() && mean_v.toTensor().defined()) {
    const double eps = constant_of(bn, "eps", 1e-5);
    value = beta - pick(mean_v, 0.0) * gamma / at::sqrt(pick(var_v, 1.0) + eps);
  }
  shift.channels = value.ne(0).sum().item<int64_t>();
  shift.max_abs_shift = value.abs().max().item<double>();
  // In the reference, μ = γ = β = 0 there makes the channel exactly zero.
  jit::Module ref_bn = submodule(reference, name);
  at::NoGradGuard no_grad;
  for (const char* tensor : {"weight", "bias", "running_mean"}) {
    const c10::IValue v = ref_bn.attr(tensor, c10::IValue());
    if (v.isTensor() && v.toTensor().defined()) {
      v.toTensor().index_fill_(0, idx, 0.0);
    }
  }
  return shift;
}

}  // namespace

bool SpeedupResult::explained(double tolerance) const {
  return max_abs_diff_without_bn_shift <= tolerance * std::max(1.0, reference_max_abs);
}

SpeedupResult speedup_model(const jit::Module& model, const NamedMasks& masks,
                            const at::Tensor& example_input, const std::string& masks_source) {
  // A private masked copy: the caller's model is never touched. Fused encoder layers that a mask
  // reaches get their own types there, and the forward of their module calls, which the
  // planners can follow; the others keep their fused kernel (and their speed).
  std::vector<std::string> encoder_layers;
  for (const std::string& layer : speedup_detail::fused_encoder_layers(model)) {
    const bool masked_inside = std::any_of(masks.begin(), masks.end(), [&](const auto& m) {
      return m.first.rfind(layer + ".", 0) == 0;
    });
    if (masked_inside) {
      encoder_layers.push_back(layer);
    }
  }
  jit::Module masked = speedup_detail::clone_module(
      model, std::set<std::string>(encoder_layers.begin(), encoder_layers.end()));
  speedup_detail::unfuse_encoder_layers(masked, encoder_layers);
  {
    std::unique_ptr<Model> adapter = make_torchscript_model(masked);
    apply_compression_results(*adapter, masks, masks_source);
  }
  masked.eval();
  ChannelPlan plan;
  try {
    plan = speedup_detail::plan_channels(masked, masks, example_input);
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kUnsupported, std::string("cannot plan the smaller model: ") +
                                                  e.what_without_backtrace());
  }

  SpeedupResult result;
  result.blocked = plan.blocked;
  const std::vector<speedup_detail::HeadPlan> heads =
      speedup_detail::plan_heads(masked, plan, result.blocked);
  const std::vector<speedup_detail::WindowHeadPlan> window_heads =
      speedup_detail::plan_window_heads(masked, plan, result.blocked);

  std::set<std::string> changing;
  for (const auto& [name, layer] : plan.layers) {
    if (layer.changed()) {
      changing.insert(name);
    }
  }
  for (const speedup_detail::HeadPlan& h : heads) {
    changing.insert(h.module);
    changing.insert(h.module + ".out_proj");
  }
  for (const speedup_detail::WindowHeadPlan& h : window_heads) {
    for (const std::string& name : speedup_detail::window_head_modules(h)) {
      changing.insert(name);
    }
  }
  jit::Module small = speedup_detail::clone_module(masked, changing);
  try {
    result.layers = speedup_detail::shrink_layers(small, plan);
    for (ShrunkLayer& layer : speedup_detail::remove_heads(small, heads)) {
      result.layers.push_back(std::move(layer));
    }
    for (ShrunkLayer& layer : speedup_detail::remove_window_heads(small, window_heads)) {
      result.layers.push_back(std::move(layer));
    }
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kInternal, std::string("rebuilding the smaller layers failed: ") +
                                               e.what_without_backtrace());
  }
  small.eval();

  jit::Module reference = speedup_detail::clone_module(masked);
  reference.eval();
  for (const std::string& name : plan.layer_order) {
    const LayerPlan& p = plan.layers.at(name);
    if (p.kind == LayerKind::kBatchNorm && p.changed()) {
      BatchNormShift shift = measure_shift(name, p, masked, reference);
      if (shift.channels > 0) {
        result.batchnorm_shifts.push_back(std::move(shift));
      }
    }
  }

  const std::vector<at::Tensor> expected = run(masked, example_input, "masked");
  const std::vector<at::Tensor> without_shift = run(reference, example_input, "reference");
  const std::vector<at::Tensor> actual = run(small, example_input, "smaller");
  result.max_abs_diff = max_abs_diff(actual, expected);
  result.max_abs_diff_without_bn_shift = max_abs_diff(actual, without_shift);
  for (const at::Tensor& t : expected) {
    if (t.numel() > 0 && t.is_floating_point()) {
      result.reference_max_abs =
          std::max(result.reference_max_abs, t.abs().max().item<double>());
    }
  }
  result.module = std::make_shared<jit::Module>(std::move(small));
  result.masked = std::make_shared<jit::Module>(std::move(masked));
  return result;
}

}  // namespace lithe::host
