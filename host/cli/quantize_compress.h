#pragma once
// `lithe compress` with a quantizer: fake-quantize, optionally calibrate ranges and/or train
// (quantization-aware training), then write the model (float weights plus the quantization
// state as buffers, restorable by a later session) and the calibration JSON, atomically.

#include "compress_request.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "rank_run.h"

namespace lithe::cli {

/// `ranks`: the data-parallel run this process is part of (only its writer writes).
int compress_with_quantizer(const CompressRequest& request, const host::CompressionConfig& config,
                            const host::PluginRegistry& registry, const RankRun& ranks);

}  // namespace lithe::cli
