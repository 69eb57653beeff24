#pragma once
/// \file
/// The libtorch a process runs on, as `lithe --version` and `lithe plugins` report it.

#include <string>

namespace lithe::host {

/// One line naming the libtorch this process runs on: the release Lithe was compiled against
/// (its headers' version), the file the loaded libtorch_cpu came from, and the CUDA build and the
/// number of CUDA devices visible at run time, e.g.
/// "libtorch 2.15.0 (/venv/.../torch/lib/libtorch_cpu.so), CUDA 13.2 build, 0 CUDA devices".
/// Never throws.
std::string torch_runtime_description();

}  // namespace lithe::host
