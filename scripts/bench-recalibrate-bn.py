#!/usr/bin/env python3
"""What BatchNorm re-estimation (lithe compress --recalibrate-bn N) buys after one-shot filter
pruning on Fashion-MNIST (issue: int8 + PTQ), every figure from one run of this script:

  model      the small ResNet of bench-int8-fashion.py (three BasicBlocks, 16/32/64 channels,
             BatchNorm), trained here by lithe train for EPOCHS epochs (seed 0)
  pruning    l1_filter with dependency_aware on every Conv2d but the first, at each sparsity of
             SPARSITIES, one-shot (no fine-tuning)
  compared   the pruned model's accuracy as pruned, and after --recalibrate-bn N for each N of
             BATCHES (64 training images a batch); then both after the same one epoch of
             fine-tuning (lr 0.01), to show whether the head start survives training
Accuracies are lithe compress's own evaluation on the 10,000 test images.

Usage: .venv/bin/python scripts/bench-recalibrate-bn.py [--lithe build/bin/lithe]
           [--work build/bench-recalibrate-bn] [--epochs 3] [--threads 2]
           [--sparsities 0.3,0.5,0.7] [--batches 5,20]
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from fashion_bench import accuracy, add_common_arguments, lithe, small_resnet  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "bench-recalibrate-bn")
    parser.add_argument("--sparsities", default="0.3,0.5,0.7")
    parser.add_argument("--batches", default="5,20")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731

    small_resnet(w("resnet.pt"))
    dense = w("resnet.dense.pt")
    lithe(args, "train", "--model", w("resnet.pt"), "--epochs", str(args.epochs), "--output",
          dense)
    print("dense accuracy %.4f" % accuracy(args, dense))
    import torch
    convs = [n for n, m in torch.jit.load(dense).named_modules()
             if m.original_name == "Conv2d" and n != "conv1"]
    batches = [int(b) for b in args.batches.split(",")]

    header = ["sparsity", "as pruned"] + ["recalibrated %d" % b for b in batches] + [
        "+1 epoch", "recalibrated %d, +1 epoch" % batches[-1]]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for sparsity in map(float, args.sparsities.split(",")):
        config = w("l1_%g.json" % sparsity)
        with open(config, "w") as f:
            json.dump({"algorithm": "l1_filter", "options": {"dependency_aware": True},
                       "config_list": [{"sparsity": sparsity, "op_names": convs}]}, f)

        def run(*extra):
            out = lithe(args, "compress", "--model", dense, "--config", config, "--output",
                        w("pruned.pt"), "--json", *extra)
            summary = json.loads(out[out.index("{"):])
            recal = summary.get("batchnorm_recalibration")
            right_after = recal["accuracy"]["accuracy"] if recal else None
            return right_after, summary["accuracy_after"]["accuracy"]

        # One-shot pruning reads no data, so it evaluates nothing: "as pruned" is lithe eval
        # of the pruned model.
        lithe(args, "compress", "--model", dense, "--config", config, "--output",
              w("pruned.pt"))
        as_pruned = accuracy(args, w("pruned.pt"))
        row = [sparsity, as_pruned]
        for b in batches:
            row.append(run("--recalibrate-bn", str(b))[0])
        row.append(run("--epochs", "1", "--lr", "0.01")[1])
        row.append(run("--recalibrate-bn", str(batches[-1]), "--epochs", "1", "--lr", "0.01")[1])
        print("| " + " | ".join("%g" % row[0] if i == 0 else "%.4f" % v
                                for i, v in enumerate(row)) + " |", flush=True)


if __name__ == "__main__":
    main()
