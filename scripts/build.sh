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
# libtorch: the pinned wheel's in .venv/ (scripts/install-deps.sh), unless the caller names one
# (-DTorch_DIR=... or -DCMAKE_PREFIX_PATH=...).
torch_args=()
if [[ " $* " != *" -DTorch_DIR="* && " $* " != *" -DCMAKE_PREFIX_PATH="* ]]; then
  torch_cmake=$(ls -d .venv/lib/python3*/site-packages/torch/share/cmake 2> /dev/null | head -1)
  if [ -z "$torch_cmake" ]; then
    echo "build: no libtorch in .venv/ (run scripts/install-deps.sh, or pass -DTorch_DIR=...)" >&2
    exit 1
  fi
  torch_args=(-DCMAKE_PREFIX_PATH="$PWD/$torch_cmake")
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${torch_args[@]}" "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)"
