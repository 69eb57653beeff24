#!/usr/bin/env bash
# Checks the CUDA kernels on a GPU machine against that machine's CUDA-enabled libtorch 2.x (the
# one inside its Python's PyTorch): builds the SDK library, the kernels, their tests and the
# bandwidth benchmark alone (LITHE_KERNELS_ONLY), runs the kernel tests (the CPU-vs-CUDA parity
# harness among them; none may skip) and the bandwidth benchmark.
#
#   scripts/device-cuda-check.sh OUT_DIR [GTEST_SRC] [JSON_INCLUDE_DIR]
#
# GTEST_SRC is a GoogleTest source tree and JSON_INCLUDE_DIR a directory holding
# nlohmann/json.hpp, for a machine that has neither installed (default: .devcarry/googletest and
# .devcarry/include, which a developer fills from /usr/src/googletest and /usr/include/nlohmann).
# OUT_DIR receives env.txt, configure.log, build.log, test.log and bandwidth.txt. Exit status: 0
# when everything built, every test ran and passed, and the benchmark ran; else the failing step's.
set -uo pipefail

out=${1:?usage: scripts/device-cuda-check.sh OUT_DIR [GTEST_SRC] [JSON_INCLUDE_DIR]}
gtest_src=${2:-.devcarry/googletest}
json_include=${3:-.devcarry/include}
build=${LITHE_CHECK_BUILD_DIR:-/tmp/lithe-kernels-cuda}
mkdir -p "$out" || exit 1
step() { echo "== $*" | tee -a "$out/env.txt"; }

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nvcc --version | tail -2
  g++ --version | head -1
  cmake --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI)'
} >"$out/env.txt" 2>&1

torch_prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') || {
  step "no PyTorch in python3"; exit 1; }
torch_include=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')

# The C++ standard the libtorch headers accept: 17 where they still do, else 20.
std=17
if ! echo '#include <ATen/ATen.h>' |
    g++ -std=c++17 -fsyntax-only -x c++ -I"$torch_include" - >"$out/std-probe.log" 2>&1; then
  std=20
fi
step "C++ standard: $std"

nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
step "configure (Torch from $torch_prefix, nvcc $nvcc_path)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DCMAKE_CUDA_COMPILER="$nvcc_path" \
  -DCMAKE_CXX_STANDARD="$std" -DLITHE_KERNELS_ONLY=ON -DLITHE_WITH_CUDA=ON \
  -DLITHE_CUDA_ARCHITECTURES=90 -DLITHE_WERROR=OFF \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed \
  -DLITHE_GTEST_SOURCE_DIR="$PWD/$gtest_src" -DLITHE_NLOHMANN_JSON_INCLUDE_DIR="$PWD/$json_include" \
  >"$out/configure.log" 2>&1 || { step "configure failed (configure.log)"; exit 2; }

step "build"
# -k 0: one broken file must not hide the others' errors.
cmake --build "$build" -j "$(nproc)" -- -k 0 >"$out/build.log" 2>&1 || {
  step "build failed (build.log)"; grep -m 40 -E "error|Error" "$out/build.log" >>"$out/env.txt"
  exit 3; }

step "tests"
# The test binary itself rather than ctest: CTest 4's reading of gtest_discover_tests' generated
# files differs from 3.25's (CI's), and the binary's own report is what matters here.
test_status=0
OMP_NUM_THREADS=4 timeout 300 "$build/tests/lithe_kernels_test" >"$out/test.log" 2>&1 ||
  test_status=4
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran" "$out/test.log" >>"$out/env.txt"
if grep -q '^\[  SKIPPED \]' "$out/test.log"; then
  step "some tests skipped (test.log): on a GPU machine none may"
  test_status=4
fi

step "bandwidth"
"$build/bin/lithe_bench_cuda_bandwidth" --numel $((256 << 20)) --repeats 21 \
  >"$out/bandwidth.txt" 2>&1 || { step "benchmark failed (bandwidth.txt)"; exit 5; }
cat "$out/bandwidth.txt" >>"$out/env.txt"
exit "$test_status"
