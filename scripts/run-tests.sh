#!/usr/bin/env bash
# README command 2: install, build, and run every test (CTest: GoogleTest suites, plugin
# loading with real broken .so files, the out-of-tree plugin build, NNI conformance).
# With --sanitize, builds into build-asan/ with AddressSanitizer + UBSan instead.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build
EXTRA=()
if [ "${1:-}" = "--sanitize" ]; then
  BUILD_DIR=build-asan
  EXTRA=(-DLITHE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  export ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi
scripts/install-deps.sh
LITHE_BUILD_DIR="$BUILD_DIR" scripts/build.sh -DLITHE_BUILD_TESTS=ON "${EXTRA[@]}"
scripts/setup-ort.sh "$BUILD_DIR/ort"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 900
