#pragma once
// Warnings a model raises while it runs (TorchScript's warnings.warn, libtorch's TORCH_WARN):
// printed once each, however many forwards repeat them. Scripted torchvision GoogLeNet warns
// on every forward, and speedup, FLOPs counting and calibration run dozens.

namespace lithe::cli {

/// Routes this thread's libtorch warnings to stderr as "lithe: warning: <message>", the first
/// time each distinct message is seen.
void print_model_warnings_once();

}  // namespace lithe::cli
