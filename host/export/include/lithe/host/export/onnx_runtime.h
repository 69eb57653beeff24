#pragma once
/// \file
/// ONNX Runtime, opened at run time through its C API from a libonnxruntime.so the user names
/// (`lithe convert --onnxruntime`, LITHE_ONNXRUNTIME). Lithe neither links nor ships ONNX
/// Runtime: the conversion certificate uses it, when it is there, to run the QDQ ONNX file
/// beside the int8 model on the same inputs.

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <memory>
#include <string>

namespace lithe::host {

/// One ONNX model in ONNX Runtime's CPU execution provider.
class OnnxRuntimeSession {
 public:
  /// Opens `library` and creates a session on `onnx_bytes` (a serialized ModelProto without
  /// external data, as export_onnx returns) with `threads` intra-op threads, one inter-op
  /// thread and ORT's default graph optimisations.
  ///
  /// The library must be a whole ELF shared object (shared_object_problem) exporting
  /// OrtGetApiBase and offering C API version 1, which every ONNX Runtime 1.x does; it stays
  /// loaded for the life of the process (ORT's thread pools and static destructors do not
  /// survive dlclose), and one ORT environment serves every session.
  ///
  /// Throws sdk::Error(kInvalidConfig) naming `option`, the library and what is wrong with it;
  /// sdk::Error(kUnsupported) with ORT's own message when it refuses the model.
  OnnxRuntimeSession(const std::filesystem::path& library, const std::string& option,
                     const std::string& onnx_bytes, int threads);
  ~OnnxRuntimeSession();
  OnnxRuntimeSession(const OnnxRuntimeSession&) = delete;
  OnnxRuntimeSession& operator=(const OnnxRuntimeSession&) = delete;

  /// Opens `library` as the constructor does (the same checks and errors), so that a caller can
  /// refuse a bad one before any work. Returns ORT's version string.
  static std::string load_library(const std::filesystem::path& library,
                                  const std::string& option);

  /// ORT's version string, e.g. "1.30.0".
  const std::string& version() const;

  /// The model's output named "output" for `input` (converted to contiguous float32) fed to its
  /// input named "input": Lithe's exporter's names. A float32 tensor of the shape ORT gives.
  /// sdk::Error(kUnsupported) with ORT's message when the run fails or the output is not
  /// float32.
  at::Tensor run(const at::Tensor& input);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lithe::host
