#!/usr/bin/env bash
# Installs everything Lithe needs to build, test and benchmark, from Debian's archive only.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# libopenblas0-pthread makes OpenBLAS the system BLAS (about 40x faster GEMM than Debian's
# reference BLAS); python3-torch is only used to cross-check our files with Python's loaders,
# python3-torchvision only to build the model zoo's architectures (scripts/zoo.py).
# clang and libclang-rt-14-dev (libFuzzer, ASan/UBSan runtimes) build the fuzz harnesses
# (tests/fuzz, scripts/fuzz.sh).
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build ccache git clang libclang-rt-14-dev \
  libtorch-dev libboost-dev libboost-program-options-dev nlohmann-json3-dev \
  libgtest-dev libgmock-dev googletest libopenblas0-pthread zlib1g-dev \
  python3-torch python3-torchvision dataset-fashion-mnist libonnx-dev libgloo-dev > /dev/null
