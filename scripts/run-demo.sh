#!/usr/bin/env bash
# README command 1: install, build, then the main job on Debian's Fashion-MNIST: train the
# bundled LeNet for 2 epochs, prune it with AGP to 80% sparsity while fine-tuning for 3 epochs,
# then quantization-aware training to int8 weights and activations (1 epoch), then half the
# convolution filters pruned (L1, 1 epoch of fine-tuning) and the model rebuilt smaller
# (speedup), and print the accuracy before/after, the sparsity per layer, the quantization
# parameters per layer, the smaller model's shapes/FLOPs/latency and the output files
# (build/demo/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DLITHE_BUILD_TESTS=OFF
out=build/demo
mkdir -p "$out"
lithe=build/bin/lithe
echo "== plugins"
"$lithe" plugins
echo "== 1/6 train the bundled LeNet on Fashion-MNIST (2 epochs)"
"$lithe" train --model samples/models/lenet.pt --epochs 2 --output "$out/lenet_trained.pt"
echo "== 2/6 AGP to 80% sparsity while fine-tuning (3 epochs; samples/configs/agp.json)"
"$lithe" compress --model "$out/lenet_trained.pt" --config samples/configs/agp.json --epochs 3 \
  --output "$out/lenet_agp80.pt" --masks "$out/lenet_agp80_masks.pt"
echo "== 3/6 evaluate the pruned model as saved"
"$lithe" eval --model "$out/lenet_agp80.pt"
echo "== 4/6 quantization-aware training of the trained model: int8 weights and outputs (1 epoch;"
echo "       samples/configs/qat.json), also exported as a QDQ ONNX model"
"$lithe" compress --model "$out/lenet_trained.pt" --config samples/configs/qat.json --epochs 1 \
  --output "$out/lenet_qat.pt" --calibration "$out/lenet_qat.calibration.json" \
  --onnx "$out/lenet_qat.onnx" --input-shape 1,1,28,28
echo "== 5/6 half of the convolution filters pruned by L1 norm, 1 epoch of fine-tuning"
echo "       (samples/configs/l1_filter.json)"
"$lithe" compress --model "$out/lenet_trained.pt" --config samples/configs/l1_filter.json \
  --epochs 1 --output "$out/lenet_l1.pt" --masks "$out/lenet_l1_masks.pt"
echo "== 6/6 speedup: rebuild it with the pruned channels removed, then evaluate the smaller model"
"$lithe" speedup --model "$out/lenet_l1.pt" --masks "$out/lenet_l1_masks.pt" \
  --dense-model "$out/lenet_trained.pt" --input-shape 64,1,28,28 \
  --output "$out/lenet_l1_small.pt"
"$lithe" eval --model "$out/lenet_l1_small.pt"
echo "outputs: $out/lenet_trained.pt $out/lenet_agp80.pt $out/lenet_agp80_masks.pt"
echo "         $out/lenet_qat.pt $out/lenet_qat.calibration.json $out/lenet_qat.onnx"
echo "         $out/lenet_l1.pt $out/lenet_l1_masks.pt $out/lenet_l1_small.pt"
