#pragma once
// Timing a candidate model against the dense model in a fresh `lithe latency` process, for
// `lithe search --latency-budget`: what a server that loads the model would measure, untouched
// by the search's own heap and caches.

#include <cstdint>
#include <string>
#include <vector>

#include "lithe/host/pipeline/resource_budget.h"

namespace lithe::cli {

using host::LatencyProbe;

/// A probe that saves the candidate into a private temporary folder under TMPDIR (removed when
/// the last copy of the probe goes; one a killed search left, named after a process that no
/// longer exists, is removed when the next probe is made) and runs this executable's `latency`
/// verb on it with `dense_model` as the baseline: `runs` alternating rounds after `warmup` forwards, on zeros of
/// `input_shape`, with `threads` intra-op threads. sdk::Error(kIo) with the OS reason when the
/// folder, the file or the process cannot be made, and with the child's message when it fails.
LatencyProbe fresh_process_latency_probe(const std::string& dense_model,
                                         const std::vector<int64_t>& input_shape, int runs,
                                         int warmup, int threads);

}  // namespace lithe::cli
