#!/usr/bin/env bash
# Configures and builds Lithe into build/ (or $LITHE_BUILD_DIR), with extra CMake arguments
# passed through. Uses both cores; ccache makes rebuilds take seconds.
set -euo pipefail
# Plugins are refused from group- or world-writable directories (ssh StrictModes rule): build
# with a umask that gives the plugin folders safe permissions whatever the caller's umask is.
umask 022
cd "$(dirname "$0")/.."
BUILD_DIR="${LITHE_BUILD_DIR:-build}"
# Relative paths in ccache keys: a clone elsewhere (e.g. CI) reuses earlier compilations.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)"
