#pragma once
// What `lithe compress` prints once the job ran: the per-layer table and the timing lines, or
// the same as one JSON document (--json).

#include <string>

#include <nlohmann/json.hpp>

#include "lithe/host/jobs/compression_job.h"

namespace lithe::cli {

/// What --json prints for `result` of `request`.
nlohmann::ordered_json compress_result_json(const host::CompressionRequest& request,
                                            const host::CompressionResult& result);

/// Prints `result` of `request` to standard output; `input_shape` is --input-shape as given.
void print_compress_result(const host::CompressionRequest& request,
                           const host::CompressionResult& result, const std::string& input_shape,
                           bool json);

}  // namespace lithe::cli
