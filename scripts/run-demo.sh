#!/usr/bin/env bash
# README command 1: install, build, then the main job on Debian's Fashion-MNIST: train the
# bundled LeNet for 2 epochs, prune it with AGP to 80% sparsity while fine-tuning for 3 epochs,
# and print the accuracy before/after, the sparsity per layer and the output files (build/demo/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DLITHE_BUILD_TESTS=OFF
out=build/demo
mkdir -p "$out"
lithe=build/bin/lithe
echo "== plugins"
"$lithe" plugins
echo "== 1/3 train the bundled LeNet on Fashion-MNIST (2 epochs)"
"$lithe" train --model samples/models/lenet.pt --epochs 2 --output "$out/lenet_trained.pt"
echo "== 2/3 AGP to 80% sparsity while fine-tuning (3 epochs; samples/configs/agp.json)"
"$lithe" compress --model "$out/lenet_trained.pt" --config samples/configs/agp.json --epochs 3 \
  --output "$out/lenet_agp80.pt" --masks "$out/lenet_agp80_masks.pt"
echo "== 3/3 evaluate the pruned model as saved"
"$lithe" eval --model "$out/lenet_agp80.pt"
echo "outputs: $out/lenet_trained.pt $out/lenet_agp80.pt $out/lenet_agp80_masks.pt"
