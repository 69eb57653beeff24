#!/usr/bin/env python3
"""`lithe speedup` against Torch-Pruning on the same channels, in one script, alternating.

Usage: .venv/bin/python scripts/bench-speedup-vs-tp.py [--models resnet18,resnet50,...]
       [--rounds 3] [--runs 15] [--threads 2] [--lithe build/bin/lithe] [--keep]
(peers: scripts/install-bench-peers.sh)

Torch-Pruning (DepGraph) is the one maintained peer that removes channels physically. Per
torchvision model (random weights from a fixed seed, BatchNorm statistics from a few
training-mode passes, evaluation mode, 1x3x224x224):
- Torch-Pruning picks and removes the channels: MagnitudePruner, group L1 importance, pruning
  ratio 0.5 per group, the classifier kept. Its own pruned model is its result.
- The channels it removed become an NNI mask file (the weight rows and bias entries of every
  Conv2d and hidden Linear it pruned are zero), applied to the dense model; `lithe speedup`
  reads that masked TorchScript model and the masks in a fresh process and writes its smaller
  model (it checks its own parity on the way).
Then, alternating ROUNDS times: Torch-Pruning's pruning call on a fresh copy of the model
(DepGraph tracing, importance, pruning) and the `lithe speedup` process (its report's speedup
time and the process wall time). Then the outputs: Lithe's smaller model against Torch-Pruning's
on 4 random images (the same channels removed should give the same function), parameter
counts, and the latency at batch 1 of dense, Torch-Pruning's model (scripted) and Lithe's
(torch.jit.load), alternating per round, medians. A model that either tool cannot handle is
reported as such with its error's first line.
"""
import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torchvision  # noqa: E402

from bench_models import torchvision_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = "resnet18,resnet50,mobilenet_v2,densenet121,efficientnet_b0,regnet_x_400mf,vgg16_bn"


def first_line(error):
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:160]


def classifier(model):
    """The last Linear or Conv2d (SqueezeNet's): its outputs are the classes, which no one
    prunes."""
    return [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))][-1]


def tp_prune(model, example, record=None):
    """Torch-Pruning's magnitude pruning of `model` in place; with `record`, the pruned output
    channels of every Conv2d and Linear go into it (module name -> indices)."""
    import torch_pruning as tp
    pruner = tp.pruner.MagnitudePruner(
        model, example, importance=tp.importance.GroupMagnitudeImportance(p=1),
        pruning_ratio=0.5, ignored_layers=[classifier(model)])
    if record is None:
        pruner.step()
        return
    graph = pruner.DG
    names = {module: name for name, module in model.named_modules()}
    for group in pruner.step(interactive=True):
        for dep, idxs in group:
            module = dep.target.module
            if (isinstance(module, (torch.nn.Conv2d, torch.nn.Linear))
                    and graph.is_out_channel_pruning_fn(dep.handler)):
                picked = {int(getattr(i, "idx", i)) for i in idxs}
                record.setdefault(names[module], set()).update(picked)
        group.prune()


def masks_for(model, pruned):
    masks = {}
    for name, module in model.named_modules():
        if name in pruned:
            weight = torch.ones_like(module.weight)
            weight[sorted(pruned[name])] = 0
            masks[name] = {"weight": weight}
            if module.bias is not None:
                bias = torch.ones_like(module.bias)
                bias[sorted(pruned[name])] = 0
                masks[name]["bias"] = bias
    return masks


def main_output(y):
    """The logits: scripted GoogLeNet / Inception return a tuple with the logits first."""
    return y[0] if isinstance(y, tuple) else y


def latency(module, x, runs):
    with torch.no_grad():
        module(x)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            module(x)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def params(module):
    return sum(p.numel() for p in module.parameters())


def bench(name, args, work):
    example = torch.randn(1, 3, 224, 224)
    dense = torchvision_model(name, passes=2, batch=4)
    row = {"model": name}
    # Torch-Pruning chooses the channels (and prunes its own copy).
    tp_model = copy.deepcopy(dense)
    pruned = {}
    try:
        tp_prune(tp_model, example, pruned)
        tp_model.eval()
        tp_scripted = torch.jit.script(tp_model)
    except Exception as e:  # noqa: BLE001 - the peer's failure is a result
        row["error"] = f"Torch-Pruning: {first_line(e)}"
        return row
    masks = masks_for(dense, pruned)
    masked = copy.deepcopy(dense)
    with torch.no_grad():
        for layer, entry in masks.items():
            module = masked.get_submodule(layer)
            for key, mask in entry.items():
                getattr(module, key).mul_(mask)
    paths = {k: os.path.join(work, f"{name}_{k}") for k in
             ("dense.pt", "masked.pt", "masks.pth", "small.pt", "report.json")}
    torch.jit.script(dense).save(paths["dense.pt"])
    torch.jit.script(masked).save(paths["masked.pt"])
    torch.save(masks, paths["masks.pth"])
    lithe_cmd = [args.lithe, "speedup", "--model", paths["masked.pt"], "--masks",
                 paths["masks.pth"], "--input-shape", "1,3,224,224", "--output", paths["small.pt"],
                 "--json", paths["report.json"], "--latency-runs", "1", "--warmup", "0",
                 "--threads", str(args.threads)]
    tp_times, lithe_call, lithe_wall = [], [], []
    for _ in range(args.rounds):
        fresh = copy.deepcopy(dense)
        start = time.perf_counter()
        tp_prune(fresh, example)
        tp_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        done = subprocess.run(lithe_cmd, capture_output=True, text=True)
        lithe_wall.append(time.perf_counter() - start)
        if done.returncode != 0:
            row["error"] = f"lithe speedup: {first_line(done.stderr)}"
            return row
        with open(paths["report.json"]) as f:
            report = json.load(f)
        lithe_call.append(report["seconds"]["speedup"])
    lithe_model = torch.jit.load(paths["small.pt"]).eval()
    dense_scripted = torch.jit.load(paths["dense.pt"]).eval()
    torch.manual_seed(1)
    images = torch.randn(4, 3, 224, 224)
    with torch.no_grad():
        ours, theirs = main_output(lithe_model(images)), main_output(tp_model(images))
    row.update({
        "channels": sum(len(v) for v in pruned.values()),
        "tp_s": statistics.median(tp_times), "lithe_call_s": statistics.median(lithe_call),
        "lithe_wall_s": statistics.median(lithe_wall),
        "params_dense": params(dense), "params_tp": params(tp_model),
        "params_lithe": params(lithe_model),
        "max_abs_diff": (ours - theirs).abs().max().item(),
        "out_scale": theirs.abs().max().item(),
    })
    runtimes = {"dense": dense_scripted, "tp": tp_scripted, "lithe": lithe_model}
    samples = {k: [] for k in runtimes}
    order = list(runtimes)
    for r in range(args.rounds * 3):
        for key in order[r % 3:] + order[:r % 3]:
            samples[key].append(latency(runtimes[key], example, args.runs))
    for key in runtimes:
        row[f"ms_{key}"] = 1000 * statistics.median(samples[key])
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lithe", default=os.path.join(ROOT, "build", "bin", "lithe"))
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    try:
        import torch_pruning
    except ImportError:
        print("bench-speedup-vs-tp: Torch-Pruning is not installed (scripts/install-bench-peers.sh);"
              " nothing measured", file=sys.stderr)
        return 2
    if not os.access(args.lithe, os.X_OK):
        print(f"bench-speedup-vs-tp: no lithe at {args.lithe} (scripts/build.sh)", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    work = tempfile.mkdtemp(prefix="lithe-speedup-vs-tp-")
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, Torch-Pruning "
          f"{torch_pruning.__version__}, {args.threads} threads, {args.rounds} rounds; work in {work}",
          flush=True)
    rows = []
    try:
        for name in args.models.split(","):
            try:
                row = bench(name, args, work)
            except Exception as e:  # noqa: BLE001 - report it and go on with the next model
                row = {"model": name, "error": f"this script: {first_line(e)}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\n| model | channels removed | params after (Lithe = TP?) | Lithe vs TP outputs: max abs "
          "diff / max abs | TP pruning call s | `lithe speedup` s (call / process) | batch-1 ms: "
          "dense / TP / Lithe | Lithe / TP latency |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['model']} | — | fails: {row['error']} | | | | | |")
            continue
        same = ("same" if row["params_tp"] == row["params_lithe"]
                else f"TP {row['params_tp'] / 1e6:.2f} M")
        print(f"| {row['model']} | {row['channels']} | {row['params_lithe'] / 1e6:.2f} M "
              f"({row['params_lithe'] / row['params_dense']:.2f}×; {same}) | "
              f"{row['max_abs_diff']:.2g} / {row['out_scale']:.2g} | {row['tp_s']:.2f} | "
              f"{row['lithe_call_s']:.2f} / {row['lithe_wall_s']:.2f} | {row['ms_dense']:.1f} / "
              f"{row['ms_tp']:.1f} / {row['ms_lithe']:.1f} | "
              f"{row['ms_lithe'] / row['ms_tp']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
