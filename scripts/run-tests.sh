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
# lithe refuses plugins under a directory others may write to (ssh's StrictModes rule; see
# README "Untrusted inputs"). Say so up front rather than through hundreds of failing tests.
dir=$(pwd -P)
while :; do
  mode=$(stat -c '%a' "$dir"); owner=$(stat -c '%u' "$dir")
  # A root-owned sticky directory such as /tmp is fine, as lithe itself accepts it.
  if { [ $((8#$mode & 8#022)) -ne 0 ] && ! { [ $((8#$mode & 8#1000)) -ne 0 ] && [ "$owner" -eq 0 ]; }; } ||
     { [ "$owner" -ne 0 ] && [ "$owner" -ne "$(id -u)" ]; }; then
    echo "run-tests: '$dir' (mode $mode, owner $owner) is writable by others or owned by another" \
         "user; lithe will refuse the plugins built below it. Run from a checkout whose" \
         "directories are not group/world-writable (chmod go-w)." >&2
    exit 1
  fi
  [ "$dir" = / ] && break
  dir=$(dirname "$dir")
done
LITHE_BUILD_DIR="$BUILD_DIR" scripts/build.sh -DLITHE_BUILD_TESTS=ON "${EXTRA[@]}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 900
