#!/usr/bin/env python3
"""Slim with sparse training against one-shot Slim at the same sparsity and the same number of
training epochs, on Fashion-MNIST (issue: training-time algorithms), every figure from one run:

  model      a VGG-style net (four 3x3 Conv2d + BatchNorm2d + ReLU blocks, 32/32/64/64 channels,
             two max-pools, global average pool, Linear), trained by lithe train for EPOCHS
             epochs (seed 0, SGD lr 0.01)
  one-shot   one more ordinary epoch of training, then slim at SPARSITY (sparsity_training_epochs
             0, NNI v2.0's SlimPruner), then FINE_TUNE epochs of fine-tuning
  sparse     slim with sparsity_training_epochs 1 and scale SCALE (the L1 penalty on gamma during
             that epoch, NNI v2.2+'s SlimPruner), then the same FINE_TUNE epochs
Both arms train the same number of epochs with the same optimizer, batches and seed; they differ
only in the penalty. Accuracies are lithe's own evaluation on the 10,000 test images, as pruned
(masks applied, before fine-tuning) and after fine-tuning.

NNI's default scale 1e-4 is meant for a hundred-odd epochs of sparse training; over one epoch of
938 SGD steps (lr 0.01, momentum 0.9) it moves gamma by about 0.01, so the default here is
larger.

Usage: .venv/bin/python scripts/bench-slim-sparse.py [--lithe build/bin/lithe]
           [--work build/bench-slim-sparse] [--epochs 3] [--threads 2]
           [--sparsities 0.5,0.7] [--scale 0.005] [--fine-tune 1]
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from fashion_bench import add_common_arguments, lithe  # noqa: E402


def vgg_bn(path):
    import torch
    from torch import nn

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True)]

    torch.manual_seed(0)
    net = nn.Sequential(*block(1, 32), *block(32, 32), nn.MaxPool2d(2), *block(32, 64),
                        *block(64, 64), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(64, 10))
    torch.jit.script(net.eval()).save(path)


def main():
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "bench-slim-sparse")
    parser.add_argument("--sparsities", default="0.5,0.7")
    parser.add_argument("--scale", type=float, default=0.005)
    parser.add_argument("--fine-tune", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731
    training = ["--lr", "0.01", "--seed", "0"]

    vgg_bn(w("vgg.pt"))
    dense = w("vgg.dense.pt")
    out = lithe(args, "train", "--model", w("vgg.pt"), "--epochs", str(args.epochs), "--output",
                dense, "--json", *training)
    print("dense accuracy %.4f after %d epochs" % (json.loads(out)["epochs"][-1]["test"]["accuracy"],
                                                  args.epochs))
    # The one-shot arm's extra ordinary epoch (the sparse arm spends it on sparse training).
    longer = w("vgg.dense_plus1.pt")
    out = lithe(args, "train", "--model", dense, "--epochs", "1", "--output", longer, "--json",
                *training)
    print("dense accuracy %.4f after %d epochs" % (json.loads(out)["epochs"][-1]["test"]["accuracy"],
                                                  args.epochs + 1))

    def slim(model, sparsity, sparse_epochs):
        config = w("slim.json")
        with open(config, "w") as f:
            json.dump({"algorithm": "slim",
                       "options": {"sparsity_training_epochs": sparse_epochs,
                                   "scale": args.scale},
                       "config_list": [{"sparsity": sparsity, "op_types": ["BatchNorm2d"]}]}, f)
        # One-shot slim does not train, so it takes no training options without --epochs.
        out = lithe(args, "compress", "--model", model, "--config", config, "--output",
                    w("pruned.pt"), "--json", "--recalibrate-bn", "1",
                    *(training if sparse_epochs > 0 else []))
        summary = json.loads(out[out.index("{"):])
        pruned = sum(l["pruned"] for l in summary["layers"])
        channels = sum(l["params"] for l in summary["layers"])
        # As pruned: re-estimating BatchNorm from one batch is part of neither arm's advantage
        # (both get it); it only makes the "as pruned" accuracy of BN nets meaningful.
        as_pruned = summary["batchnorm_recalibration"]["accuracy"]["accuracy"]
        out = lithe(args, "compress", "--model", model, "--config", config, "--output",
                    w("tuned.pt"), "--json", "--epochs", str(args.fine_tune), *training)
        tuned = json.loads(out[out.index("{"):])["accuracy_after"]["accuracy"]
        return pruned, channels, as_pruned, tuned

    print("| sparsity | channels pruned | one-shot: as pruned | one-shot: +%d epoch | "
          "sparse (scale %g): as pruned | sparse: +%d epoch |"
          % (args.fine_tune, args.scale, args.fine_tune))
    print("|---|---|---|---|---|---|")
    for sparsity in map(float, args.sparsities.split(",")):
        one = slim(longer, sparsity, 0)
        sparse = slim(dense, sparsity, 1)
        assert one[0] == sparse[0], (one, sparse)
        print("| %g | %d of %d | %.4f | %.4f | %.4f | %.4f |"
              % (sparsity, one[0], one[1], one[2], one[3], sparse[2], sparse[3]), flush=True)


if __name__ == "__main__":
    main()
