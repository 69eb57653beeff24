#!/usr/bin/env python3
"""Accuracy of native int8 models on Fashion-MNIST (issue: int8 + PTQ), each figure from one run
of this script:

  models     the bundled LeNet (samples/models/lenet.pt) and a small ResNet (three stages of one
             torchvision-style BasicBlock, 16/32/64 channels, BatchNorm), both trained here by
             lithe train for EPOCHS epochs (seed 0)
  PTQ        lithe compress qat with --calibration-batches 16 (no training), BatchNorm folded,
             the zoo's int8_config (per-channel symmetric int8 weights, uint8 outputs where int8
             kernels write them), then lithe convert; accuracy of the int8 model
  QAT        the same config with one epoch of quantization-aware training (lr 0.001), then
             convert; the fake-quantized accuracy is lithe compress's own evaluation
  pipeline   (ResNet) lithe pipeline: l1_filter 0.5 on every Conv2d but the first with 2 epochs
             of fine-tuning, speedup, QAT (1 epoch, BatchNorm folded), convert, at lr 0.01;
             parameters, FLOPs, bytes, latency and accuracy after every stage
Accuracies are lithe eval's on the 10,000 test images.

Usage: .venv/bin/python scripts/bench-int8-fashion.py [--lithe build/bin/lithe]
           [--work build/bench-int8-fashion] [--epochs 3] [--threads 2]
"""
import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from fashion_bench import accuracy, add_common_arguments, lithe, trained_int8_candidates  # noqa: E402,E501


def main():
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "bench-int8-fashion")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731

    print("| model | float | PTQ int8 (Δ) | QAT fake-quant | QAT int8 (Δ to float) |")
    print("|---|---|---|---|---|")
    for name, dense, config in trained_int8_candidates(args, w):
        base = accuracy(args, dense)
        lithe(args, "compress", "--model", dense, "--config", config, "--output", w(name + ".ptq.pt"),
              "--calibration-batches", "16", "--fold-batchnorm")
        lithe(args, "convert", "--model", w(name + ".ptq.pt"), "--input-shape", "1,1,28,28",
              "--output", w(name + ".ptq.int8.pt"), "--samples", "4", "--latency-runs", "3")
        ptq = accuracy(args, w(name + ".ptq.int8.pt"))
        out = lithe(args, "compress", "--model", dense, "--config", config, "--output",
                    w(name + ".qat.pt"), "--epochs", "1", "--fold-batchnorm", "--lr", "0.001")
        # lithe compress evaluates the fake-quantized model after training (the saved model
        # runs in float until converted).
        qat_fake = float(re.search(r"([0-9.]+) quantized", out).group(1))
        lithe(args, "convert", "--model", w(name + ".qat.pt"), "--input-shape", "1,1,28,28",
              "--output", w(name + ".qat.int8.pt"), "--samples", "4", "--latency-runs", "3")
        qat = accuracy(args, w(name + ".qat.int8.pt"))
        print("| %s | %.4f | %.4f (%+.2f pt) | %.4f | %.4f (%+.2f pt) |" % (
            name, base, ptq, 100 * (ptq - base), qat_fake, qat, 100 * (qat - base)), flush=True)

    pipeline = w("pipeline.json")
    convs = [n for n in json.load(open(w("resnet.int8.json")))["config_list"][0]["op_names"]
             if n != "conv1" and n != "fc"]
    stages = [{"compress": {"algorithm": "l1_filter", "options": {"dependency_aware": True},
                            "config_list": [{"sparsity": 0.5, "op_names": convs}]}, "epochs": 2},
              {"speedup": {}},
              {"compress": json.load(open(w("resnet.int8.json"))), "epochs": 1,
               "fold_batchnorm": True},
              {"convert": {}}]
    with open(pipeline, "w") as f:
        json.dump({"stages": stages}, f)
    print()
    print(lithe(args, "pipeline", "--model", w("resnet.dense.pt"), "--config", pipeline,
                "--input-shape", "1,1,28,28", "--output", w("resnet.pipeline.int8.pt"),
                "--json", w("resnet.pipeline.json"), "--lr", "0.01"))


if __name__ == "__main__":
    main()
