#include "schedule.h"

#include <lithe/sdk/error.h>

#include <cmath>

namespace lithe::plugins::agp {

Schedule read_schedule(const sdk::Options& entry) {
  Schedule s;
  s.initial_sparsity = entry.get_or<double>("initial_sparsity", 0.0);
  s.final_sparsity = entry.require<double>("final_sparsity");
  s.start_epoch = entry.get_or<int64_t>("start_epoch", 0);
  s.end_epoch = entry.require<int64_t>("end_epoch");
  s.frequency = entry.get_or<int64_t>("frequency", 1);
  const std::string& at = entry.path();
  LITHE_CHECK(s.initial_sparsity >= 0.0 && s.initial_sparsity < 1.0, sdk::Errc::kInvalidConfig,
              at, "/initial_sparsity must be a number in [0, 1), got ", s.initial_sparsity);
  LITHE_CHECK(s.final_sparsity >= 0.0 && s.final_sparsity < 1.0, sdk::Errc::kInvalidConfig, at,
              "/final_sparsity must be a number in [0, 1), got ", s.final_sparsity);
  LITHE_CHECK(s.initial_sparsity <= s.final_sparsity, sdk::Errc::kInvalidConfig, at,
              "/initial_sparsity must not exceed final_sparsity (AGP only prunes more over "
              "time), got ", s.initial_sparsity, " > ", s.final_sparsity);
  LITHE_CHECK(s.start_epoch >= 0, sdk::Errc::kInvalidConfig, at,
              "/start_epoch must be >= 0, got ", s.start_epoch);
  LITHE_CHECK(s.frequency > 0, sdk::Errc::kInvalidConfig, at, "/frequency must be > 0, got ",
              s.frequency);
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
