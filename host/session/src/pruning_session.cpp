#include <torch/torch.h>

#include <cmath>

#include "lithe/host/session/pruning_session.h"
#include "lithe/kernels/masking.h"
#include "lithe/host/runtime/invoke_plugin.h"
#include "lithe/sdk/error.h"
#include "session_support.h"

namespace lithe::host {
namespace {

using detail::invoke_plugin;

// Multiplies the optimizer's per-parameter state for `param` by `mask`, so that momentum and
// Adam moments cannot push pruned weights away from zero (libtorch-notes §Q6).
void mask_state_of(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                   const at::Tensor& mask) {
  auto& state = optimizer.state();
  const auto it = state.find(param.unsafeGetTensorImpl());
  if (it == state.end()) {
    return;
  }
  const at::Tensor m = mask.to(param.scalar_type());
  auto mask_if_defined = [&](const at::Tensor& t) {
    if (t.defined() && t.sizes() == m.sizes()) {
      t.mul_(m);
    }
  };
  torch::optim::OptimizerParamState* raw = it->second.get();
  if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(raw)) {
    mask_if_defined(sgd->momentum_buffer());
  } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(raw)) {
    mask_if_defined(adam->exp_avg());
    mask_if_defined(adam->exp_avg_sq());
    mask_if_defined(adam->max_exp_avg_sq());
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(raw)) {
    mask_if_defined(adamw->exp_avg());
    mask_if_defined(adamw->exp_avg_sq());
    mask_if_defined(adamw->max_exp_avg_sq());
  } else if (auto* rms = dynamic_cast<torch::optim::RMSpropParamState*>(raw)) {
    mask_if_defined(rms->square_avg());
    mask_if_defined(rms->momentum_buffer());
    mask_if_defined(rms->grad_avg());
  } else if (auto* adagrad = dynamic_cast<torch::optim::AdagradParamState*>(raw)) {
    mask_if_defined(adagrad->sum());
  }
}

}  // namespace

PruningSession::PruningSession(Model& model, const PluginRegistry& registry,
                               const CompressionConfig& config)
    : SessionCore(model, registry, config, "pruner") {
  pruner_ = registry.make_pruner(algorithm(), options());
  select_layers([&](const ConfigEntry& entry) {
    invoke_plugin(owner(), [&] {
      pruner_->validate_config(entry.options);
      return 0;
    }, "validate_config");
  });
  register_gradient_hooks();
}

PruningSession::~PruningSession() {
  for (auto& [tensor, index] : gradient_hooks_) {
    tensor.remove_hook(index);
  }
}

void PruningSession::register_gradient_hooks() {
  for (const auto& layer : views()) {
    const sdk::LayerView* view = layer.get();
    at::Tensor weight = view->weight();
    if (weight.requires_grad()) {
      const unsigned index = weight.register_hook(
          [view](const at::Tensor& grad) { return grad * view->masks().weight.to(grad.dtype()); });
      gradient_hooks_.emplace_back(weight, index);
    }
    if (view->bias().has_value() && view->bias()->requires_grad()) {
      at::Tensor bias = *view->bias();
      const unsigned index = bias.register_hook(
          [view](const at::Tensor& grad) { return grad * view->masks().bias->to(grad.dtype()); });
      gradient_hooks_.emplace_back(bias, index);
    }
  }
}

void PruningSession::compress() { update_masks(); }

void PruningSession::update_masks() {
  LITHE_CHECK(attach_failure_.empty(), sdk::Errc::kInvalidConfig,
              "this pruning session cannot continue: ", attach_failure_);
  LITHE_CHECK(!in_update_, sdk::Errc::kInternal, owner(),
              ": update_masks() was called from attach or calc_mask, which would recurse; "
              "this is a bug in the plugin");
  const detail::FlagScope updating(in_update_);
  if (!attached_) {
    attached_ = true;  // never twice: a second attach would register collectors twice
    try {
      invoke_plugin(owner(), [&] {
        pruner_->attach(*this);
        return 0;
      }, "attach");
    } catch (const std::exception& e) {
      attach_failure_ = e.what();
      // Whatever the half-attached pruner registered must not keep running on later forwards
      // and steps of a session that can no longer be used.
      drop_plugin_registrations();
      throw;
    }
  }
  run_mask_pass();
}

void PruningSession::run_mask_pass() {
  const detail::FlagScope in_pass(in_calc_mask_);
  for (const auto& layer : views()) {
    const std::string context = owner() + " on layer '" + layer->name() + "'";
    std::optional<sdk::Masks> masks =
        invoke_plugin(context, [&] { return pruner_->calc_mask(*layer); }, "calc_mask");
    if (masks.has_value()) {
      invoke_plugin(context, [&] {
        layer->set_masks(std::move(*masks));
        return 0;
      });
      masks_may_prune_ = true;
    }
  }
  apply_masks();
}

void PruningSession::apply_masks() {
  at::NoGradGuard no_grad;
  // Masks are float32; weights of other dtypes get a converted copy of the mask.
  auto apply = [](const at::Tensor& param, const at::Tensor& mask) {
    kernels::apply_mask_(param, mask.scalar_type() == param.scalar_type()
                                    ? mask
                                    : mask.to(param.scalar_type()));
  };
  for (const auto& layer : views()) {
    apply(layer->weight(), layer->masks().weight);
    if (layer->bias().has_value() && layer->masks().bias.has_value()) {
      apply(*layer->bias(), *layer->masks().bias);
    }
  }
  record_weight_fingerprints();
}

void PruningSession::record_weight_fingerprints() {
  weight_fingerprints_ = detail::weight_fingerprints(views());
}

void PruningSession::check_weights_unchanged_outside(const char* call) const {
  if (!attached_) {
    return;  // before compress(): the session has not touched the weights yet
  }
  detail::check_weights_unchanged(weight_fingerprints_, views(), owner(), call,
                                  "it runs optimizer.step(), then updates and re-applies the "
                                  "masks");
}

void PruningSession::update_epoch(int64_t epoch) {
  if (in_update_) {
    return;  // epochs of a fine_tune() the pruner asked for from attach/calc_mask: not its own
  }
  check_weights_unchanged_outside("update_epoch()");
  note_epoch_update();
  invoke_plugin(owner(), [&] {
    pruner_->update_epoch(epoch);
    return 0;
  }, "update_epoch");
}

void PruningSession::step() {
  if (in_update_) {
    return;  // as in update_epoch
  }
  check_weights_unchanged_outside("step()");
  invoke_plugin(owner(), [&] {
    pruner_->step();
    return 0;
  }, "step");
}

void PruningSession::optimizer_step(torch::optim::Optimizer& optimizer) {
  if (!in_update_) {
    check_epoch_updates("optimizer_step");
  }
  if (take_optimizer_state_reset()) {
    // A restored model starts over with a fresh optimizer state, as NNI's LotteryTicket
    // restores the optimizer's state saved before any step.
    optimizer.state().clear();
  }
  run_before_optimizer_step_callbacks();
  optimizer.step();
  if (in_update_) {
    // A fine_tune() the pruner asked for from attach or calc_mask (ADMM, Slim's sparse
    // training): the masks it has so far are held fixed; asking it for new ones would re-enter
    // the call that is running. Before the first mask update every mask is all ones (nothing
    // to re-apply), which is when such algorithms train.
    if (masks_may_prune_) {
      apply_masks();
      mask_optimizer_state(optimizer);
    }
    run_optimizer_step_callbacks();
    return;
  }
  update_masks();
  mask_optimizer_state(optimizer);
  invoke_plugin(owner(), [&] {
    pruner_->after_optimizer_step();
    return 0;
  }, "after_optimizer_step");
  run_optimizer_step_callbacks();
  // update_masks() recorded the weights' fingerprints; a plugin changes weights only through
  // the context (update_masks_now, restore_model_state), which records them again.
}

void PruningSession::mask_optimizer_state(torch::optim::Optimizer& optimizer) {
  at::NoGradGuard no_grad;
  for (const auto& layer : views()) {
    mask_state_of(optimizer, layer->weight(), layer->masks().weight);
    if (layer->bias().has_value() && layer->masks().bias.has_value()) {
      mask_state_of(optimizer, *layer->bias(), *layer->masks().bias);
    }
  }
}

std::vector<std::pair<std::string, sdk::Masks>> PruningSession::masks() const {
  std::vector<std::pair<std::string, sdk::Masks>> out;
  for (const auto& layer : views()) {
    out.emplace_back(layer->name(), layer->masks());
  }
  return out;
}

std::vector<at::Tensor> PruningSession::replicated_state() const {
  std::vector<at::Tensor> out;
  for (const auto& layer : views()) {
    const sdk::Masks masks = layer->masks();
    out.push_back(masks.weight);
    if (masks.bias && masks.bias->defined()) {
      out.push_back(*masks.bias);
    }
  }
  return out;
}

std::vector<LayerReport> PruningSession::report() const {
  std::vector<LayerReport> out;
  for (const auto& layer : views()) {
    LayerReport r;
    r.name = layer->name();
    r.op_type = layer->op_type();
    r.weight_numel = layer->weight().numel();
    r.weight_zeros = layer->masks().weight.eq(0).sum().item<int64_t>();
    if (layer->masks().bias.has_value()) {
      r.bias_numel = layer->masks().bias->numel();
      r.bias_zeros = layer->masks().bias->eq(0).sum().item<int64_t>();
    }
    // One-shot pruners state "sparsity"; schedules (AGP) their final one.
    const sdk::Options& config = layer->config();
    r.sparsity_target = config.has("sparsity")         ? config.get_or<double>("sparsity", -1.0)
                        : config.has("final_sparsity") ? config.get_or<double>("final_sparsity", -1.0)
                                                       : -1.0;
    out.push_back(r);
  }
  return out;
}

void PruningSession::update_masks_now() {
  LITHE_CHECK(!in_calc_mask_, sdk::Errc::kInternal, owner(),
              ": update_masks_now() was called from calc_mask, which would recurse; this is a "
              "bug in the plugin");
  if (in_update_) {
    run_mask_pass();  // from attach(): the pass alone (attach is running, not to be re-run)
    return;
  }
  update_masks();
}

void PruningSession::restore_snapshot(int64_t handle) {
  LITHE_CHECK(!in_calc_mask_, sdk::Errc::kInternal, owner(),
              ": restore_snapshot() was called from calc_mask, in the middle of a mask pass; "
              "this is a bug in the plugin");
  SessionCore::restore_snapshot(handle);
}

std::vector<sdk::Masks> PruningSession::capture_masks() const {
  std::vector<sdk::Masks> out;
  for (const auto& layer : views()) {
    out.push_back(layer->masks().clone());
  }
  return out;
}

void PruningSession::restore_masks(const std::vector<sdk::Masks>& masks) {
  LITHE_CHECK(masks.size() == views().size(), sdk::Errc::kInternal, owner(), ": the snapshot "
              "holds ", masks.size(), " layers' masks, the session has ", views().size());
  for (size_t i = 0; i < masks.size(); ++i) {
    views()[i]->set_masks(masks[i].clone());  // the snapshot stays restorable
  }
  masks_may_prune_ = true;
}

}  // namespace lithe::host
