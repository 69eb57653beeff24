#!/usr/bin/env python3
"""A sped-up model must load and run in plain Python (torch, no Lithe library) and compute what
the masked model computes. Usage: speedup_python_check.py LITHE MODEL.pt WORKDIR"""
import json
import os
import shutil
import subprocess
import sys

import torch


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")


def main():
    lithe, model, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    config = os.path.join(work, "l1.json")
    with open(config, "w") as f:
        json.dump({"algorithm": "l1_filter",
                   "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]}, f)
    masked, masks, small = (os.path.join(work, n) for n in ("masked.pt", "masks.pth", "small.pt"))
    run(lithe, "compress", "--model", model, "--config", config, "--output", masked,
        "--masks", masks)
    run(lithe, "speedup", "--model", masked, "--masks", masks, "--input-shape", "1,1,28,28",
        "--output", small, "--latency-runs", "3", "--warmup", "1")

    reference = torch.jit.load(masked).eval()
    smaller = torch.jit.load(small).eval()
    if smaller.conv1.weight.shape[0] != 3 or smaller.fc1.weight.shape[1] != 128:
        sys.exit(f"FAIL: unexpected shapes conv1 {tuple(smaller.conv1.weight.shape)}, "
                 f"fc1 {tuple(smaller.fc1.weight.shape)}")
    if smaller.conv2.out_channels != 8:
        sys.exit(f"FAIL: conv2.out_channels is {smaller.conv2.out_channels}, expected 8")
    x = torch.randn(16, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (smaller(x) - reference(x)).abs().max().item()
    if diff > 1e-5:
        sys.exit(f"FAIL: Python outputs differ by {diff}")
    print(f"PASS: the sped-up model loads in Python; max |smaller - masked| = {diff:.3g}")


if __name__ == "__main__":
    main()
