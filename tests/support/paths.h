#pragma once
// Locations of test inputs, fixed at configure time. The two roots are compiled into one small
// file (paths.cpp) rather than into every test: a clone elsewhere then recompiles that file only,
// and ccache serves every other test object from earlier builds.

#include <filesystem>
#include <string>

namespace lithe::test {

/// The source tree's root.
std::filesystem::path source_dir();
/// The build tree's root.
std::filesystem::path binary_dir();
/// The NNI v2.0 golden cases and their models, copied into the repository (tests/data/nni,
/// README there): `golden/<case>/` and `models/<name>.pt`.
inline std::filesystem::path nni_data_dir() { return source_dir() / "tests/data/nni"; }
inline std::filesystem::path lenet_model() { return source_dir() / "samples/models/lenet.pt"; }
inline std::filesystem::path shared_blocks_model() {
  return source_dir() / "tests/data/shared_blocks.pt";
}
inline std::filesystem::path lithe_cli() { return binary_dir() / "bin/lithe"; }
/// The project's Python (.venv/bin/python from scripts/install-deps.sh, or CMake's LITHE_PYTHON):
/// torch of the release Lithe builds against, torchvision and onnxruntime.
std::filesystem::path python_executable();
/// ONNX Runtime's C library inside that Python's onnxruntime wheel; empty in a kernels-only build.
std::filesystem::path onnxruntime_library();

/// A fresh empty directory under the build tree for one test:
/// `tests/scratch/<name>/<Suite.Test>` while a GoogleTest test runs, `tests/scratch/<name>`
/// otherwise. CTest runs every test in its own process, two at a time, so tests of one fixture
/// that asked for the same name used to remove each other's files mid-run.
std::filesystem::path scratch_dir(const std::string& name);
/// Where scratch_dir(name) is in the running test, without creating or emptying it.
std::filesystem::path scratch_path(const std::string& name);

}  // namespace lithe::test
