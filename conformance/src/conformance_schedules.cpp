// Replays of NNI's schedule cases: AGP (masks over epochs) and Lottery Ticket (pruning rounds
// with weight rewinding). Weights never train in these cases (SGD with lr 0, or stored
// perturbations standing in for training), so every mask is fully determined; each recorded
// event's zero counts and every stored mask snapshot are compared.
#include <torch/torch.h>

#include <string>

#include "conformance_case.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/pruner.h"

namespace lithe::host::conformance_detail {
namespace {

// Lithe's exact count for a layer at `target`: int(numel · target) weights for the Level
// masker, int(F · target) whole filters for the filter maskers.
int64_t exact_zeros(const at::Tensor& mask, double target, bool filters) {
  if (!filters) {
    return sdk::prune_count(mask.numel(), target);
  }
  return sdk::prune_count(mask.size(0), target) * (mask.numel() / mask.size(0));
}

// Zero counts per layer against NNI's `zeros` object. A layer where NNI pruned more than Lithe
// while Lithe holds exactly the schedule's count is NNI's tie over-pruning (departure 1):
// returned as a note. Any other difference fails the case.
std::vector<std::string> compare_zero_counts(const PruningSession& session, const json& nni_zeros,
                                             const std::map<std::string, int64_t>& exact,
                                             const std::string& event) {
  std::vector<std::string> notes;
  for (const auto& [name, masks] : session.masks()) {
    if (!nni_zeros.contains(name)) {
      fail(event + ": Lithe compresses layer '" + name + "', NNI does not");
    }
    const int64_t ours = count_zeros(masks.weight);
    const auto theirs = nni_zeros.at(name).get<int64_t>();
    if (ours == theirs) {
      continue;
    }
    if (ours < theirs && ours == exact.at(name)) {
      notes.push_back(event + " " + name + " (NNI " + std::to_string(theirs) + ", Lithe " +
                      std::to_string(ours) + ")");
      continue;
    }
    fail(event + ": layer '" + name + "' has " + std::to_string(ours) + " pruned weights, NNI " +
         std::to_string(theirs) + ", Lithe's exact count " + std::to_string(exact.at(name)));
  }
  return notes;
}

// Fails unless every layer holds exactly its exact count.
void require_exact_counts(const PruningSession& session, const std::map<std::string, int64_t>& exact,
                          const std::string& event) {
  for (const auto& [name, masks] : session.masks()) {
    if (count_zeros(masks.weight) != exact.at(name)) {
      fail(event + ": layer '" + name + "' has " + std::to_string(count_zeros(masks.weight)) +
           " pruned weights; Lithe's exact count is " + std::to_string(exact.at(name)));
    }
  }
}

// AGP layer configs have no "sparsity": the epoch's target (recorded per event) is what the
// masker was asked for, used only to check Lithe's exact-k rule if masks ever differ.
SparsityOf agp_target(double target) {
  return [target](const std::string&, const json&) { return target; };
}

}  // namespace

Verdict replay_agp(const CaseContext& c, const PluginRegistry& registry,
                   const std::string& algorithm) {
  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  const auto weights_before = snapshot_weights(*model);
  PruningSession session(*model, registry, case_compression_config(c, algorithm));
  auto params = model->parameters();
  torch::optim::SGD optimizer(params, torch::optim::SGDOptions(0.0));
  const json& results = c.summary.at("results");
  // NNI's AGPPruner option (its value names an NNI masker, default "level"), not a Lithe plugin.
  const std::string nni_masker =
      c.config.value("kwargs", json::object()).value("pruning_algorithm", "level");  // nni-name
  const bool filters = nni_masker != "level";  // nni-name
  std::map<std::string, int64_t> exact;  // Lithe's count since the last pruning event
  for (const auto& [name, masks] : session.masks()) {
    exact[name] = 0;
  }
  int snapshots = 0;
  int events = 0;
  std::vector<std::string> deviations;
  for (const json& event : results.at("schedule")) {
    const std::string name = event.at("event").get<std::string>();
    const double target = event.value("target_sparsity", 0.0);
    const bool is_compress = !event.contains("epoch");
    if (is_compress) {
      session.compress();
    } else {
      session.update_epoch(event.at("epoch").get<int64_t>());
      session.optimizer_step(optimizer);  // no gradients: SGD changes nothing, masks update
    }
    if (event.value("would_prune_this_epoch", is_compress && target >= 0)) {
      for (const auto& [layer, masks] : session.masks()) {
        exact[layer] = exact_zeros(masks.weight, target, filters);
      }
    }
    ++events;
    if (!deviations.empty()) {
      // Masks parted from NNI's at a tie; from here on Lithe's own rule is what is checked.
      require_exact_counts(session, exact, name);
      continue;
    }
    const std::vector<std::string> notes =
        compare_zero_counts(session, event.at("zeros"), exact, name);
    if (!notes.empty()) {
      deviations.insert(deviations.end(), notes.begin(), notes.end());
      continue;
    }
    const std::string key =
        is_compress ? "masks_compress" : "masks_epoch" + std::to_string(event.at("epoch").get<int64_t>());
    if (results.contains(key)) {
      const auto tie_notes = compare_masks(c, session.masks(), results.at(key), weights_before,
                                           /*global_k=*/false, agp_target(target));
      deviations.insert(deviations.end(), tie_notes.begin(), tie_notes.end());
      ++snapshots;
    }
  }
  if (!deviations.empty()) {
    return {Outcome::kDeviation,
            "departure 1: NNI over-prunes tied weights; Lithe prunes exactly the epoch's k: " +
                join(deviations)};
  }
  std::string detail;
  if (c.tensors.count("output_final") != 0) {
    model->train(false);
    at::NoGradGuard no_grad;
    if (!close_enough(model->forward(tensor(c, "input")), tensor(c, "output_final"), &detail)) {
      fail("output after the schedule differs from NNI: " + detail);
    }
  }
  return {Outcome::kPass, std::to_string(events) + " schedule events and " +
                              std::to_string(snapshots) + " mask snapshots match NNI"};
}

Verdict replay_lottery_ticket(const CaseContext& c, const PluginRegistry& registry,
                              const std::string& algorithm) {
  torch::jit::Module module = load_case_model(c);
  auto model = make_torchscript_model(module);
  const auto initial = snapshot_weights(*model);
  PruningSession session(*model, registry, case_compression_config(c, algorithm));
  session.compress();
  const json& results = c.summary.at("results");
  const json& rounds = results.at("prune_iterations");
  std::vector<std::string> deviations;
  int compared_rounds = 0;
  for (const json& round_json : rounds) {
    const auto round = round_json.get<int64_t>();
    if (round > 0) {
      // The stored perturbation stands in for a round of training (added to the raw weight).
      at::NoGradGuard no_grad;
      for (const auto& [name, masks] : session.masks()) {
        const auto it = c.tensors.find("perturb" + std::to_string(round) + "." + name);
        if (it != c.tensors.end()) {
          model->find_module(name)->weight->add_(it->second);
        }
      }
      session.accept_weight_changes();  // the "training" happened outside the session
    }
    const auto seen_by_masker = snapshot_weights(*model);  // scores for the departure-1 check
    session.update_epoch(round);  // epochs_per_iteration 1: round r starts at epoch r
    const std::string event = "round " + std::to_string(round);
    if (round == 0) {
      for (const auto& [name, masks] : session.masks()) {
        if (count_zeros(masks.weight) != 0) {
          fail(event + ": layer '" + name + "' is pruned; NNI's round 0 keeps every weight");
        }
      }
    } else if (!results.contains("masks_iter" + std::to_string(round))) {
      // The format lets a case store the masks of some rounds only: the round still runs (the
      // schedule and the rewinding are checked), its masks are not compared.
    } else {
      ++compared_rounds;
      const double sparsity = results.at("sequence").at(round).at("sparsity").begin()->get<double>();
      const auto notes =
          compare_masks(c, session.masks(), results.at("masks_iter" + std::to_string(round)),
                        seen_by_masker, /*global_k=*/false,
                        [&](const std::string& layer, const json&) {
                          return results.at("sequence").at(round).at("sparsity").value(layer,
                                                                                       sparsity);
                        });
      deviations.insert(deviations.end(), notes.begin(), notes.end());
    }
    // Weights are rewound to their initial values (Lithe keeps pruned ones at zero in place).
    for (const auto& [name, masks] : session.masks()) {
      const at::Tensor expected = initial.at(name) * masks.weight;
      if (!model->find_module(name)->weight->detach().equal(expected)) {
        fail(event + ": layer '" + name + "' was not rewound to its initial weights");
      }
    }
  }
  if (!deviations.empty()) {
    return {Outcome::kDeviation,
            "departure 1: NNI over-prunes tied weights; Lithe prunes exactly k: " +
                join(deviations)};
  }
  if (compared_rounds == 0) {
    unsupported("the case stores no masks_iter<N> for any of its " +
                std::to_string(rounds.size()) + " rounds: nothing to compare");
  }
  return {Outcome::kPass, std::to_string(rounds.size()) + " rounds (masks of " +
                              std::to_string(compared_rounds) +
                              " stored and compared): masks match NNI, weights rewound each round"};
}

}  // namespace lithe::host::conformance_detail
