#include "schedule.h"

#include <lithe/sdk/error.h>

#include <cmath>

namespace lithe::plugins::agp {

const sdk::OptionSchema& option_keys() {
  using sdk::OptionType;
  static const sdk::OptionSchema schema{
      sdk::option("pruning_algorithm", OptionType::kString,
                  "the masker that chooses which weights go, by registered name (NNI's l1, l2, "
                  "taylorfo accepted)")
          .defaults_to("\"level\""),
      sdk::option("masker_options", OptionType::kObject, "options passed to the masker's factory")
          .defaults_to("{}"),
      sdk::entry_key("initial_sparsity", OptionType::kNumber, "sparsity at start_epoch")
          .defaults_to("0")
          .at_least(0)
          .below(1),
      sdk::entry_key("final_sparsity", OptionType::kNumber,
                     "sparsity reached at end_epoch; at least initial_sparsity")
          .mandatory()
          .at_least(0)
          .below(1),
      sdk::entry_key("start_epoch", OptionType::kInteger, "first epoch that prunes")
          .defaults_to("0")
          .at_least(0),
      sdk::entry_key("end_epoch", OptionType::kInteger,
                     "epoch from which final_sparsity holds; end_epoch - start_epoch - 1 must be "
                     "at least frequency")
          .mandatory(),
      sdk::entry_key("frequency", OptionType::kInteger, "epochs between two mask updates")
          .defaults_to("1")
          .above(0)};
  return schema;
}

Schedule read_schedule(const sdk::Options& entry) {
  const sdk::OptionSchema& keys = option_keys();
  Schedule s;
  s.initial_sparsity = keys.read<double>(entry, "initial_sparsity");
  s.final_sparsity = keys.read<double>(entry, "final_sparsity");
  s.start_epoch = keys.read<int64_t>(entry, "start_epoch");
  s.end_epoch = keys.read<int64_t>(entry, "end_epoch");
  s.frequency = keys.read<int64_t>(entry, "frequency");
  const std::string& at = entry.path();
  LITHE_CHECK(s.initial_sparsity <= s.final_sparsity, sdk::Errc::kInvalidConfig, at,
              "/initial_sparsity must not exceed final_sparsity (AGP only prunes more over "
              "time), got ", s.initial_sparsity, " > ", s.final_sparsity);
  LITHE_CHECK(s.end_epoch > s.start_epoch, sdk::Errc::kInvalidConfig, at,
              "/end_epoch must be greater than start_epoch (", s.start_epoch, "), got ",
              s.end_epoch);
  // NNI asserts span > 0; say which numbers to change instead.
  LITHE_CHECK(s.end_epoch - s.start_epoch - 1 >= s.frequency, sdk::Errc::kInvalidConfig, at,
              ": end_epoch - start_epoch - 1 must be at least frequency so that the schedule "
              "has a pruning step after the first, got end_epoch ", s.end_epoch,
              ", start_epoch ", s.start_epoch, ", frequency ", s.frequency);
  return s;
}

bool is_pruning_epoch(const Schedule& schedule, int64_t epoch) {
  return epoch >= schedule.start_epoch &&
         (epoch - schedule.start_epoch) % schedule.frequency == 0;
}

double target_sparsity(const Schedule& schedule, int64_t epoch) {
  if (schedule.end_epoch <= epoch) {
    return schedule.final_sparsity;
  }
  const int64_t span = ((schedule.end_epoch - schedule.start_epoch - 1) / schedule.frequency) *
                       schedule.frequency;
  // Same operation order as NNI, so targets are bit-identical (e.g. 0.23813443072702345).
  const double progress = 1.0 - static_cast<double>(epoch - schedule.start_epoch) /
                                    static_cast<double>(span);
  return schedule.final_sparsity +
         (schedule.initial_sparsity - schedule.final_sparsity) * std::pow(progress, 3);
}

}  // namespace lithe::plugins::agp
