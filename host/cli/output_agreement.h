#pragma once
// How far one model's outputs are from a reference model's over the same inputs: what the
// conversion certificate of `lithe convert` reports for the int8 model against the
// fake-quantized model and against ONNX Runtime.

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "lithe/sdk/error.h"

namespace lithe::cli {

/// Accumulated over calls of add(): one per batch of inputs.
struct OutputAgreement {
  double max_abs = 0;
  double reference_max = 0;
  int64_t agree = 0;  // rows with the same argmax (2-d outputs)
  int64_t rows = 0;
  int64_t differing = 0;  // output values that are not equal
  int64_t values = 0;

  /// `got` and `want` must have one shape and hold finite values only: a NaN would otherwise
  /// drop out of the maxima and read as agreement (sdk::Error(kUnsupported) naming `what` and
  /// `reference`).
  void add(const at::Tensor& got, const at::Tensor& want, const char* what,
           const char* reference) {
    LITHE_CHECK(want.sizes() == got.sizes(), sdk::Errc::kUnsupported, "the ", what,
                " output has shape ", got.sizes(), ", the ", reference, "'s ", want.sizes());
    LITHE_CHECK(got.isfinite().all().item<bool>(), sdk::Errc::kUnsupported, "the ", what,
                " output holds NaN or infinite values; the certificate compares finite outputs");
    LITHE_CHECK(want.isfinite().all().item<bool>(), sdk::Errc::kUnsupported, "the ", reference,
                "'s output holds NaN or infinite values; the certificate compares finite outputs");
    max_abs = std::max(max_abs, (got - want).abs().max().item<double>());
    reference_max = std::max(reference_max, want.abs().max().item<double>());
    differing += got.ne(want).sum().item<int64_t>();
    values += want.numel();
    if (want.dim() == 2) {
      agree += got.argmax(1).eq(want.argmax(1)).sum().item<int64_t>();
      rows += want.size(0);
    }
  }
  double top1() const { return static_cast<double>(agree) / static_cast<double>(rows); }
  double differing_share() const {
    return values > 0 ? static_cast<double>(differing) / static_cast<double>(values) : 0;
  }

  // "max |int8 - <reference>| = ... (... output grid steps of ...)", then top-1 agreement.
  void print(const char* reference, double step) const {
    if (step > 0) {
      std::printf("  max |int8 - %s| = %.4g (%.3g output grid steps of %.4g)\n", reference,
                  max_abs, max_abs / step, step);
    } else {
      std::printf("  max |int8 - %s| = %.4g (largest |output| %.4g)\n", reference, max_abs,
                  reference_max);
    }
    if (rows > 0) {
      std::printf("  top-1 agreement %lld of %lld (%.2f%%)\n", static_cast<long long>(agree),
                  static_cast<long long>(rows), 100.0 * top1());
    }
  }

  nlohmann::ordered_json to_json(double step) const {
    nlohmann::ordered_json out = {{"max_abs_diff", max_abs}, {"reference_max_abs", reference_max},
                {"differing_outputs", differing_share()}};
    if (step > 0) {
      out["output_grid_step"] = step;
      out["max_diff_in_steps"] = max_abs / step;
    }
    if (rows > 0) {
      out["top1_agreement"] = top1();
      out["top1_rows"] = rows;
    }
    return out;
  }
};

}  // namespace lithe::cli
