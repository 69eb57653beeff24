#pragma once
/// \file
/// How far one model's outputs are from a reference model's over the same inputs: what the
/// conversion certificate (run_conversion, `lithe convert`) reports for the int8 model against
/// the fake-quantized model and against ONNX Runtime.

#include <ATen/ATen.h>

#include <cstdint>

namespace lithe::host {

/// Accumulated over calls of add(): one per batch of inputs.
struct OutputAgreement {
  double max_abs = 0;        ///< largest |got - want|
  double reference_max = 0;  ///< largest |want|
  int64_t agree = 0;         ///< rows with the same argmax (2-d outputs)
  int64_t rows = 0;          ///< rows compared (2-d outputs)
  int64_t differing = 0;     ///< output values that are not equal
  int64_t values = 0;        ///< output values compared

  /// `got` and `want` must have one shape and hold finite values only: a NaN would otherwise
  /// drop out of the maxima and read as agreement (sdk::Error(kUnsupported) naming `what` and
  /// `reference`).
  void add(const at::Tensor& got, const at::Tensor& want, const char* what,
           const char* reference);
  /// Share of compared rows with the same argmax (0 without rows).
  double top1() const {
    return rows > 0 ? static_cast<double>(agree) / static_cast<double>(rows) : 0;
  }
  /// Share of output values that are not equal.
  double differing_share() const {
    return values > 0 ? static_cast<double>(differing) / static_cast<double>(values) : 0;
  }
};

}  // namespace lithe::host
