#!/usr/bin/python3
"""Search pruners against uniform pruning on Fashion-MNIST (issue: search). One run makes every
figure:

  model     the bundled LeNet trained 3 epochs by `lithe train` (seed 0)
  data      training images 0..54,999 train (fine-tuning, NetAdapt's short-term fine-tuning);
            training images 55,000..59,999 are the validation set every search scores
            candidates on; the 10,000 test images are touched only by the final evaluation
  layers    conv1, conv2, fc1, fc2 by L1 filter (row) pruning; 50% of their weights overall
  arms      uniform            l1_filter, 0.5 in every layer
            simulated_annealing base_algo l1, temperatures 0.05 -> 0.005, cool-down 0.8,
                               seeds 1, 2, 3
            net_adapt          base_algo l1, steps of 0.1, one short-term epoch per candidate
  then      every arm's result fine-tuned the same way: 1 epoch, SGD lr 0.01 momentum 0.9,
            seed 0, batch 64; validation accuracy from `lithe compress`, test accuracy by
            `lithe eval`

Usage: /usr/bin/python3 scripts/bench-search-vs-uniform.py [--work DIR]
"""
import argparse
import gzip
import json
import os
import pathlib
import statistics
import subprocess
import sys

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
LITHE = ROOT / "build" / "bin" / "lithe"
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
LAYERS = ["conv1", "conv2", "fc1", "fc2"]


def run(*argv):
    done = subprocess.run([str(LITHE), *argv, "--threads", "2"], capture_output=True, text=True,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if done.returncode != 0:
        sys.exit(f"FAILED: lithe {' '.join(argv)}\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def idx(name, images):
    with gzip.open(FASHION / f"{name}.gz", "rb") as f:
        raw = f.read()
    if images:
        x = np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 1, 28, 28)
        return (torch.from_numpy(x.copy()).float() / 255 - 0.2860) / 0.3530
    return torch.from_numpy(np.frombuffer(raw, np.uint8, offset=8).copy()).long()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default=str(ROOT / "build" / "bench" / "search"))
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    images, labels = idx("train-images-idx3-ubyte", True), idx("train-labels-idx1-ubyte", False)
    train, val = work / "train.pt", work / "val.pt"
    torch.save({"images": images[:55000].contiguous(), "labels": labels[:55000].contiguous()},
               str(train))
    torch.save({"images": images[55000:].contiguous(), "labels": labels[55000:].contiguous()},
               str(val))
    dense = work / "dense.pt"
    run("train", "--model", str(ROOT / "samples/models/lenet.pt"), "--epochs", "3", "--seed",
        "0", "--data", str(train), "--output", str(dense))
    dense_accuracy = json.loads(run("eval", "--json", "--model", str(dense)))["accuracy"]
    selection = {"sparsity": 0.5, "op_names": LAYERS}
    arms = [("uniform", {"algorithm": "l1_filter", "config_list": [selection]})]
    for seed in (1, 2, 3):
        arms.append((f"simulated_annealing seed {seed}", {
            "algorithm": "simulated_annealing",
            "options": {"base_algo": "l1", "start_temperature": 0.05, "stop_temperature": 0.005,
                        "cool_down_rate": 0.8, "seed": seed},
            "config_list": [selection]}))
    arms.append(("net_adapt", {
        "algorithm": "net_adapt",
        "options": {"base_algo": "l1", "sparsity_per_iteration": 0.1,
                    "short_term_fine_tune_epochs": 1},
        "config_list": [selection]}))
    print(f"dense LeNet: test accuracy {dense_accuracy:.4f}")
    print("| arm | sparsity conv1, conv2, fc1, fc2 | overall | validation | test | "
          "search time |")
    print("|---|---|---|---|---|---|")
    results = {}
    for name, config in arms:
        config_path = work / (name.replace(" ", "_") + ".json")
        config_path.write_text(json.dumps(config))
        out_path = work / (name.replace(" ", "_") + ".pt")
        out = run("compress", "--json", "--model", str(dense), "--config", str(config_path),
                  "--data", str(train), "--test-data", str(val), "--epochs", "1", "--lr", "0.01",
                  "--momentum", "0.9", "--seed", "0", "--output", str(out_path))
        summary = json.loads(out[out.index("{\n"):out.rindex("}") + 1])
        layers = {l["name"]: l for l in summary["layers"]}
        sparsities = [layers[n]["pruned"] / layers[n]["params"] for n in LAYERS]
        overall = (sum(layers[n]["pruned"] for n in LAYERS) /
                   sum(layers[n]["params"] for n in LAYERS))
        test = json.loads(run("eval", "--json", "--model", str(out_path)))["accuracy"]
        seconds = summary["seconds"]["algorithm"]
        results[name] = test
        print(f"| {name} | {', '.join(f'{s:.3f}' for s in sparsities)} | {overall:.4f} | "
              f"{summary['accuracy_after']['accuracy']:.4f} | {test:.4f} | {seconds:.1f} s |",
              flush=True)
    sa = [v for k, v in results.items() if k.startswith("simulated")]
    print(f"simulated_annealing mean {statistics.mean(sa):.4f} vs uniform "
          f"{results['uniform']:.4f}: {100 * (statistics.mean(sa) - results['uniform']):+.2f} pt; "
          f"net_adapt {100 * (results['net_adapt'] - results['uniform']):+.2f} pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
