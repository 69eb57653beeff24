#pragma once
// Internal to the conformance runner: one golden case's inputs, verdicts, and the comparisons
// every replay shares (mask comparison with the departure-1 tie rule, tolerant output
// comparison). Each replay family lives in its own conformance_*.cpp.

#include <ATen/core/Tensor.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/session/pruning_session.h"
#include "lithe/conformance/conformance.h"
#include "lithe/host/model/model.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/host/session/quantization_session.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/quantizer.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace lithe::host::conformance_detail {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Outcome = CaseResult::Outcome;

/// Raised inside a case to end it with a verdict.
struct Verdict {
  Outcome outcome;
  std::string reason;
};

[[noreturn]] void fail(const std::string& reason);
[[noreturn]] void unsupported(const std::string& reason);

/// Everything a replay reads of one golden case folder.
struct CaseContext {
  fs::path golden_dir;
  fs::path case_dir;
  json config;   ///< config.json
  json summary;  ///< summary.json
  std::map<std::string, at::Tensor> tensors;  ///< tensors.pt
};

/// The tensors of a torch pickle dict file (tensors.pt, NAME_state.pt).
std::map<std::string, at::Tensor> load_tensor_dict(const fs::path& file);
/// The case's TorchScript model with its state and `init.*` overrides, in eval mode.
torch::jit::Module load_case_model(const CaseContext& c);
/// Copies `state` entries starting with `prefix` into the module's parameters/buffers.
void load_state(torch::jit::Module& module, const std::map<std::string, at::Tensor>& state,
                const std::string& prefix);
/// The golden tensor `key` (fails the case when missing).
const at::Tensor& tensor(const CaseContext& c, const std::string& key);
/// The case's config as a Lithe compression config: NNI kwargs become options, minus the
/// arguments the host owns (optimizer, lr_scheduler).
CompressionConfig case_compression_config(const CaseContext& c, const std::string& algorithm);
/// Whether a line of the case's `procedure` contains `text`.
bool procedure_mentions(const json& config, const std::string& text);

/// |actual − expected| <= 1e-5·max(1, |expected|) everywhere (README: goldens used another
/// BLAS); `detail` says the worst difference otherwise.
bool close_enough(const at::Tensor& actual, const at::Tensor& expected, std::string* detail);
int64_t count_zeros(const at::Tensor& t);
/// Copies of every module weight, to check rules against what a pruner saw.
std::map<std::string, at::Tensor> snapshot_weights(const Model& model);

/// How a layer's NNI sparsity is read from its recorded config (default: "sparsity").
using SparsityOf = std::function<double(const std::string& layer, const json& layer_config)>;

/// Compares Lithe's masks with NNI's recorded ones (`expected`: {layer: {weight: key, bias:
/// key|null, config}}, keys into the case's tensors). A difference explained by NNI's tie
/// over-pruning while Lithe prunes exactly k (departure 1) is returned as a note; any other
/// difference fails the case. `global_k`: k is checked over all layers together (Slim).
/// With `differing` given, layers whose weight mask differs in a way departure 1 does not
/// explain are listed there (their bias masks unchecked) instead of failing the case; every
/// other difference (layer selection, bias masks of matching layers) still fails.
std::vector<std::string> compare_masks(const CaseContext& c,
                                       const std::vector<std::pair<std::string, sdk::Masks>>& ours,
                                       const json& expected,
                                       const std::map<std::string, at::Tensor>& weights_before,
                                       bool global_k, const SparsityOf& sparsity_of = {},
                                       std::vector<std::string>* differing = nullptr);

/// compare_masks for a dependency-aware case: where Lithe differs from NNI, Lithe's own rule
/// (departure 5: exact num_prune per layer, coupled layers share the common channels) is
/// checked instead and a note returned; a broken rule fails the case.
std::vector<std::string> compare_masks_dependency_aware(
    const CaseContext& c, const std::vector<std::pair<std::string, sdk::Masks>>& ours,
    const std::map<std::string, at::Tensor>& weights_before);

/// The case's final masks against NNI's `results.masks` (compare_masks, or
/// compare_masks_dependency_aware when the case's kwargs set dependency_aware). Returns the
/// DEVIATION reason naming the departure, empty when Lithe matches NNI; fails the case otherwise.
std::string final_masks_deviation(const CaseContext& c,
                                  const std::vector<std::pair<std::string, sdk::Masks>>& ours,
                                  const std::map<std::string, at::Tensor>& weights_before,
                                  bool global_k);

/// "a, b, c".
std::string join(const std::vector<std::string>& parts);

/// A quantizer case's model under a compressed QuantizationSession that records every
/// quantization (the tensor the quantizer saw and what the model used).
struct QuantizedCase {
  torch::jit::Module module;
  std::unique_ptr<Model> model;
  std::unique_ptr<QuantizationSession> session;
};

/// Starts the case's quantization. Fails unless Lithe quantizes exactly the layers NNI wrapped
/// (`results.wrappers`), each with NNI's quant types and bits.
QuantizedCase start_quantized_case(const CaseContext& c, const PluginRegistry& registry,
                                   const std::string& algorithm);
/// NNI's get_bits_length: `quant_bits` of an NNI layer config, an int or {type: bits}; -1 when
/// the config gives none for `type`.
int64_t nni_quant_bits(const json& layer_config, sdk::QuantType type);
/// The live tensor attribute `key` of quantized layer `layer` (fails when missing).
at::Tensor layer_state(QuantizationSession& session, const std::string& layer,
                       const std::string& key);
/// The latest quantization of `layer`'s `type` (fails when none was recorded).
const QuantRecord& record_of(const QuantizationSession& session, const std::string& layer,
                             sdk::QuantType type);
/// Where two tensors that must be bit-identical differ: "k of n values differ, max |diff| d".
std::string bitwise_difference(const at::Tensor& actual, const at::Tensor& expected);

// Replay procedures, one per sdk::NniCounterpart::replay value (conformance.cpp dispatches).
/// "epoch_schedule" (conformance_schedules.cpp): masks and targets at every epoch.
Verdict replay_agp(const CaseContext& c, const PluginRegistry& registry,
                   const std::string& algorithm);
/// "rewind_rounds" (conformance_schedules.cpp): masks of each stored round, weights rewound.
Verdict replay_lottery_ticket(const CaseContext& c, const PluginRegistry& registry,
                              const std::string& algorithm);
/// "activation_statistics" / "gradient_statistics" (conformance_data_driven.cpp).
Verdict replay_data_driven(const CaseContext& c, const PluginRegistry& registry,
                           const std::string& algorithm, bool gradients);
/// NNI's optimizer as a case's `trainer` spells it ("Adam" or "SGD" with lr, momentum,
/// weight_decay), over `params` (conformance_training.cpp).
std::unique_ptr<torch::optim::Optimizer> case_optimizer(const json& trainer,
                                                        std::vector<at::Tensor> params);
/// "training_batches" (conformance_training.cpp): a pruner that trains while it compresses
/// (ADMM), over the case's recorded batches with NNI's optimizer; trained weights and masks.
Verdict replay_training(const CaseContext& c, const PluginRegistry& registry,
                        const std::string& algorithm);
/// "evaluator_search" (conformance_search.cpp): a search over candidates scored by an
/// evaluator (SimulatedAnnealing seeded with NumPy's seed; NetAdapt fine-tuning each candidate
/// with the case's trainer): every candidate's metric in order, then the final masks.
Verdict replay_evaluator_search(const CaseContext& c, const PluginRegistry& registry,
                                const std::string& algorithm);
/// "eval_forwards" (conformance_quantizers.cpp): quantized weights and outputs of eval forwards.
Verdict replay_eval_forwards(const CaseContext& c, const PluginRegistry& registry,
                             const std::string& algorithm);
/// "training_steps" (conformance_qat.cpp): weights, scales and outputs over training steps.
Verdict replay_qat(const CaseContext& c, const PluginRegistry& registry,
                   const std::string& algorithm);
/// count_flops_params cases (conformance_flops.cpp): per-layer counts in both modes, with the
/// case's recorded masks for the masked ones.
Verdict replay_flops(const CaseContext& c, const PluginRegistry& registry);
/// SensitivityAnalysis cases (conformance_sensitivity.cpp): the metric of every (layer,
/// sparsity) NNI reached, with its early stop.
Verdict replay_sensitivity(const CaseContext& c, const PluginRegistry& registry);
/// ModelSpeedup cases (conformance_speedup.cpp): the smaller model's state and output against
/// NNI's, from the case's own mask.pth.
Verdict replay_speedup(const CaseContext& c);

}  // namespace lithe::host::conformance_detail
