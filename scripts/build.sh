#!/usr/bin/env bash
# Configures and builds Lithe into build/ (or $LITHE_BUILD_DIR), with extra CMake arguments
# passed through. Uses both cores; ccache makes rebuilds take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${LITHE_BUILD_DIR:-build}"
# Relative paths in ccache keys: a clone elsewhere (e.g. CI) reuses earlier compilations.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)"
