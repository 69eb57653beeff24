// Out-of-line destructors and default hooks: they anchor each interface's vtable and typeinfo
// in liblithe_sdk, so host and plugins agree on one copy.
#include "lithe/sdk/context.h"

#include <string>

#include "lithe/sdk/error.h"
#include "lithe/sdk/masker.h"
#include "lithe/sdk/pruner.h"
#include "lithe/sdk/quantizer.h"
#include "lithe/sdk/registry.h"

namespace lithe::sdk {

WeightMasker::~WeightMasker() = default;
void WeightMasker::attach(CompressionContext&) {}

CompressionContext::~CompressionContext() = default;
void CompressionContext::reduce_over_processes(std::vector<at::Tensor>&, Reduction) {}
int64_t CompressionContext::add_end_of_data_callback(std::function<void()>) { return 0; }
void CompressionContext::remove_end_of_data_callback(int64_t) {}
void CompressionContext::require_epoch_updates() {}

namespace {
[[noreturn]] void unsupported(const char* what) {
  throw Error(Errc::kUnsupported,
              std::string("this host offers no ") + what +
                  " (SDK 1.7+; Lithe's host does, a test double or an older host may not)");
}
}  // namespace

int64_t CompressionContext::add_loss_term(std::function<at::Tensor()>) {
  unsupported("loss terms");
}
void CompressionContext::remove_loss_term(int64_t) { unsupported("loss terms"); }
int64_t CompressionContext::add_before_optimizer_step_callback(std::function<void()>) {
  unsupported("before-optimizer-step callbacks");
}
void CompressionContext::remove_before_optimizer_step_callback(int64_t) {
  unsupported("before-optimizer-step callbacks");
}
bool CompressionContext::can_evaluate() const { return false; }
double CompressionContext::evaluate() { unsupported("evaluator"); }
bool CompressionContext::can_fine_tune() const { return false; }
void CompressionContext::fine_tune(int64_t) { unsupported("fine-tuner"); }
int64_t CompressionContext::save_snapshot() { unsupported("snapshots"); }
void CompressionContext::restore_snapshot(int64_t) { unsupported("snapshots"); }
void CompressionContext::release_snapshot(int64_t) { unsupported("snapshots"); }
std::vector<ModuleSummary> CompressionContext::weighted_modules() {
  throw Error(Errc::kUnsupported,
              "this host does not list the model's weighted modules (SDK 1.9+; Lithe's host "
              "does, a test double or an older host may not)");
}
bool CompressionContext::can_measure_cost() const { return false; }
ModelCost CompressionContext::measure_cost() {
  throw Error(Errc::kUnsupported,
              "this host cannot measure what the masks leave of the model (SDK 1.10+; `lithe "
              "compress` on a TorchScript model with --data does; an embedder calls "
              "session.set_cost_meter)");
}

Pruner::~Pruner() = default;
void Pruner::attach(CompressionContext&) {}
void Pruner::update_epoch(int64_t) {}
void Pruner::step() {}
void Pruner::after_optimizer_step() {}

Registry::~Registry() = default;
// Not pure: registries that other code implements (test doubles, embedders' own) keep
// compiling, and a registry with no use for NNI counterparts ignores them.
void Registry::add_nni_counterpart(NniCounterpart /*counterpart*/) {}
void Registry::describe_options(const std::string& /*algorithm*/,
                                const OptionSchema& /*schema*/) {}

}  // namespace lithe::sdk
