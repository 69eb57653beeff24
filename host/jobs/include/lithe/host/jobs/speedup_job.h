#pragma once
/// \file
/// The checked speedup: what `lithe speedup` runs and what an embedder calls on a model and
/// masks in memory. run_speedup_check() makes a masked model physically smaller
/// (speedup_model), refuses a smaller model that computes something else than the masked one
/// (beyond the BatchNorm shift NNI's rule implies), and measures both: parameters, FLOPs, file
/// bytes and latency, side by side.

#include <torch/script.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "lithe/host/io/mask_file.h"
#include "lithe/host/io/field_error.h"
#include "lithe/host/jobs/job_output.h"
#include "lithe/host/jobs/model_source.h"
#include "lithe/host/speedup/speedup.h"

namespace lithe::host {

/// Outputs within this of the masked model's (relative to its largest output) count as equal:
/// float summation order only.
inline constexpr double kSpeedupTolerance = 1e-4;

/// What to make smaller and where the results go. Errors name the fields (FieldError).
struct SpeedupRequest {
  ModelSource model;  ///< the masked (or unmasked) model (file or memory)
  /// The masks (NNI mask.pth layout) in memory; when empty, read from masks_path.
  NamedMasks masks;
  std::filesystem::path masks_path;
  std::vector<int64_t> input_shape;  ///< example input, batch first: shapes, FLOPs, timing
  Output output;                     ///< the smaller model (required)
  Output report;                     ///< the report as JSON
  /// The model before masking (the same parameters and shapes), timed as the latency baseline
  /// instead of the masked model, whose zeroed channels can make data-dependent ops such as
  /// max pooling cheaper than in the dense model. Empty: the masked model is the baseline.
  ModelSource dense_model;
  int latency_runs = 50;  ///< timed forwards of each model
  int warmup = 10;        ///< untimed forwards before timing
  /// Write the smaller model even when it differs from the masked one beyond the BatchNorm
  /// shift (a Lithe bug); default: refuse, nothing written.
  bool allow_mismatch = false;
};

/// FLOPs of the masked and the smaller model in one counting mode, or why they could not be
/// counted (the first line of the error).
struct FlopsBeforeAfter {
  int64_t before = -1;
  int64_t after = -1;
  std::string problem;  ///< "" when counted
};

/// What the speedup did and what it gained.
struct SpeedupCheck {
  /// The smaller model (`module`), the masked model it was checked against, the layers shrunk
  /// and the channels kept (with why), and the check's differences.
  SpeedupResult speedup;
  int64_t params_before = 0;  ///< of the masked model
  int64_t params_after = 0;
  FlopsBeforeAfter flops;           ///< NNI's count (FlopsMode::kDefault)
  FlopsBeforeAfter flops_every_op;  ///< every op (FlopsMode::kOps)
  uintmax_t bytes_before = 0;       ///< the model as given
  uintmax_t bytes_after = 0;        ///< the smaller model's TorchScript archive
  double latency_before_ms = 0;     ///< the baseline's median forward
  double latency_after_ms = 0;
  int latency_runs = 0;
  int threads = 0;
  std::string latency_baseline;  ///< "masked model" or "dense model"
  double load_seconds = 0;       ///< model and masks read
  double speedup_seconds = 0;    ///< speedup_model: plan, build, check
  double report_seconds = 0;     ///< serialising, FLOPs and latency measured
  std::string report_json;       ///< what `report` holds
};

/// Runs the speedup, its check and its measurements, then writes the smaller model and the
/// report (both or neither). Throws FieldError naming the request field, sdk::Error naming the
/// layer or file, and sdk::Error(kInternal) when the smaller model does not compute the masked
/// one's outputs (unless allow_mismatch).
SpeedupCheck run_speedup_check(const SpeedupRequest& request);

}  // namespace lithe::host
