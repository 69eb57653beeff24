#pragma once
// AGP's sparsity schedule (Zhu & Gupta 2017, NNI v2.0 AGPPruner.compute_target_sparsity,
// reference §2.9). Separate from the pruner so that unit tests can check the formula alone.

#include <lithe/sdk/option_spec.h>
#include <lithe/sdk/options.h>

#include <cstdint>

namespace lithe::plugins::agp {

/// One config_list entry's schedule.
struct Schedule {
  double initial_sparsity = 0.0;  ///< [0, 1)
  double final_sparsity = 0.0;    ///< [initial_sparsity, 1)
  int64_t start_epoch = 0;        ///< >= 0
  int64_t end_epoch = 1;          ///< > start_epoch
  int64_t frequency = 1;          ///< > 0, and end_epoch - start_epoch - 1 >= frequency
};

/// Every key agp reads: its options (pruning_algorithm, masker_options) and each entry's
/// schedule keys, with their types, defaults and single-key ranges.
const sdk::OptionSchema& option_keys();

/// Reads and checks a config_list entry's schedule keys: final_sparsity and end_epoch are
/// required; initial_sparsity (0), start_epoch (0) and frequency (1) have defaults (NNI v2.0
/// requires all five; its docstring gives these defaults). Throws sdk::Error(kInvalidConfig)
/// naming entry.path() + key, the rule and the value.
Schedule read_schedule(const sdk::Options& entry);

/// Whether masks are recomputed at `epoch`: epoch >= start_epoch and on the frequency grid.
bool is_pruning_epoch(const Schedule& schedule, int64_t epoch);

/// NNI's target at `epoch` on a pruning epoch: final + (initial − final)·(1 − (epoch −
/// start)/span)³ with span = ((end − start − 1) / frequency)·frequency, and final from
/// epoch >= end_epoch on. So the final sparsity is reached at epoch start + span (epoch 9 for
/// start 0, end 10, frequency 1). Not meaningful off the pruning epochs.
double target_sparsity(const Schedule& schedule, int64_t epoch);

}  // namespace lithe::plugins::agp
