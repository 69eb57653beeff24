#!/usr/bin/env bash
# README command 1: install, build, then prune the bundled LeNet with the Level pruner and
# print the per-layer table; the outputs land in build/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DLITHE_BUILD_TESTS=OFF
mkdir -p build/demo
build/bin/lithe plugins
build/bin/lithe compress --model samples/models/lenet.pt --config samples/configs/level.json \
  --output build/demo/lenet_pruned.pt --masks build/demo/lenet_masks.pt
