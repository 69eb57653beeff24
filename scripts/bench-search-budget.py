#!/usr/bin/env python3
"""`lithe search` to a measured latency budget and to a FLOPs budget on a ResNet-style model
(issue: search). One run makes every figure:

  model     a ResNet-8 for 28x28 grey images (stem 16, three BasicBlock stages of 16/32/64
            channels, the last two with strided 1x1 downsampling), scripted here and trained one
            epoch by `lithe train` (seed 0, SGD lr 0.05; --dense-epochs N, --dense-lr-step K:
            N epochs, the lr divided by 10 every K)
            (--model resnet18: torchvision's ResNet-18, 10 classes, one-channel stem, trained
            the same way)
  data      training images 0..54,999 train; 55,000..59,999 are the validation set the search
            scores trials on; the 10,000 test images are touched only by the final evaluation;
            the final fine-tune runs one epoch over training images 0..9,999
  searches  l1_filter over every Conv2d, annealing, seed 0, 12 trials, batch-16 input, 2 threads,
            BatchNorm re-estimated on 20 batches before each trial is scored, every candidate
            timed in a fresh process: --latency-budget 0.5x, then --flops-budget 0.5x, then
            NetAdapt at --flops-budget 0.5x (rounds of 0.1, at most 60 trials), then AMC at
            --flops-budget 0.5x (24 trials, 8 of them warm-up), then the uniform arm
            (--flops-budget 0.5x --trials 1: trial 0 alone), then AutoCompress at
            --flops-budget 0.5x (3 rounds of 4 trials, ADMM 2 iterations of 1 epoch per round)
            and uniform_long, the uniform arm fine-tuned as many epochs in all (7)
  check     a fresh `lithe latency` process times the dense model and the three results
            alternately (batch 16, 2 threads, 300 rounds, medians): the latency-budget model's
            ratio to the dense model must be within +-7% of 0.5; FLOPs ratios from `lithe flops`;
            every result fine-tuned the same way (1 epoch over 10,000 images, lr 0.01) and
            evaluated on the test set

--finetune-seeds N: each search writes its chosen model without fine-tuning (--epochs 0), and
`lithe train` fine-tunes it N times, shuffling seeds 0..N-1, with the same settings (seed 0 is
the search's own fine-tune); the test column is then the mean and standard deviation over the
seeds, and each gain over uniform is a difference of means, with the seed-to-seed spread beside
it.

Usage: .venv/bin/python scripts/bench-search-budget.py [--work DIR] [--trials N]
           [--trial-epochs N] [--dense-epochs 1] [--dense-lr-step 0] [--finetune-seeds N]
           [--arms latency,flops,netadapt,amc,uniform,auto_compress,...]
           [--model resnet8|resnet18] [--netadapt-trials 60] [--reuse-dense]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from fashion_bench import fashion_idx  # noqa: E402

LITHE = ROOT / "build" / "bin" / "lithe"
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
BATCH = 16
THREADS = 2


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential()
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.downsample(x))


class ResNet8(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = Block(16, 16, 1)
        self.layer2 = Block(16, 32, 2)
        self.layer3 = Block(32, 64, 2)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet18():
    """torchvision's ResNet-18 with 10 classes and a stem convolution taking one channel (every
    other layer torchvision's; at 28x28 its stages run at 7, 4, 2 and 1 pixels)."""
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    stem = model.conv1
    model.conv1 = nn.Conv2d(1, stem.out_channels, stem.kernel_size, stem.stride, stem.padding,
                            bias=False)
    return model


def lithe(*argv, check=True):
    done = subprocess.run([str(LITHE), *argv, "--threads", str(THREADS)], capture_output=True,
                          text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if check and done.returncode != 0:
        sys.exit(f"FAILED: lithe {' '.join(argv)}\n{done.stdout}{done.stderr}")
    return done


def save_split(path, images, labels):
    torch.save({"images": images.clone(), "labels": labels.clone()}, str(path))


def eval_accuracy(model, test_dir):
    out = lithe("eval", "--json", "--model", str(model), "--data", str(test_dir)).stdout
    return json.loads(out[out.index("{"):])["accuracy"]


def flops_of(model):
    out = lithe("flops", "--json", "--input-shape", f"1,1,28,28", "--model", str(model)).stdout
    return json.loads(out)["total_flops"]


def fresh_latency(dense, models, rounds=300):
    """Medians (ms) of the dense model and `models`, timed alternately by a fresh `lithe
    latency` process."""
    argv = ["latency", "--json", "--baseline", str(dense), "--input-shape", f"{BATCH},1,28,28",
            "--runs", str(rounds)]
    for m in models:
        argv += ["--model", str(m)]
    out = json.loads(lithe(*argv).stdout)
    return out["baseline"]["ms"], [m["ms"] for m in out["models"]]


def epochs_of(arm):
    """Epochs of the final fine-tune: uniform_long gets as many as AutoCompress trains in all."""
    return "7" if arm == "uniform_long" else "1"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default=str(ROOT / "build" / "bench" / "search_budget"))
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--trial-epochs", type=int, default=0,
                        help="fine-tune every trial this many epochs before scoring it (every arm)")
    parser.add_argument("--dense-epochs", type=int, default=1,
                        help="epochs of the dense model's training (lr 0.05)")
    parser.add_argument("--dense-lr-step", type=int, default=0,
                        help="the dense training divides its lr by 10 every N epochs (0: never)")
    parser.add_argument("--arms", default="latency,flops,netadapt,amc,uniform,auto_compress,"
                        "uniform_long",
                        help="which searches to run (uniform is always run: the baseline)")
    parser.add_argument("--reuse-dense", action="store_true",
                        help="keep the dense model an earlier run left in --work (the training "
                        "is deterministic, so it is the model this run would train)")
    parser.add_argument("--netadapt-trials", type=int, default=60,
                        help="NetAdapt's cap on trials (a round makes one per unit)")
    parser.add_argument("--model", choices=("resnet8", "resnet18"), default="resnet8",
                        help="the dense model: the ResNet-8 above, or torchvision's ResNet-18 "
                        "with a one-channel stem")
    parser.add_argument("--finetune-seeds", type=int, default=0,
                        help="fine-tune every chosen model with this many shuffling seeds")
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    train_x = fashion_idx("train-images-idx3-ubyte", True)
    train_y = fashion_idx("train-labels-idx1-ubyte", False)
    save_split(work / "train.pt", train_x[:55000], train_y[:55000])
    save_split(work / "val.pt", train_x[55000:], train_y[55000:])
    save_split(work / "tune.pt", train_x[:10000], train_y[:10000])
    torch.jit.script(ResNet8() if args.model == "resnet8" else resnet18()).save(
        str(work / f"{args.model}_init.pt"))
    dense = work / f"{args.model}.pt"
    if not (args.reuse_dense and dense.exists()):  # (lithe train is deterministic)
        lithe("train", "--model", str(work / f"{args.model}_init.pt"), "--epochs",
              str(args.dense_epochs), "--lr", "0.05", "--lr-step", str(args.dense_lr_step),
              "--data", str(work / "train.pt"), "--test-data", str(work / "val.pt"),
              "--output", str(dense))

    results = {}
    arms = (("latency", ["--latency-budget", "0.5x"], args.trials),
            ("flops", ["--flops-budget", "0.5x"], args.trials),
            ("netadapt", ["--flops-budget", "0.5x", "--strategy", "netadapt"],
             args.netadapt_trials),
            ("amc", ["--flops-budget", "0.5x", "--strategy", "amc"], 24),
            ("uniform", ["--flops-budget", "0.5x"], 1),
            # AutoCompress trains with ADMM in every round (3 rounds x 2 iterations x 1 epoch):
            # uniform_long is the uniform arm with as many epochs of fine-tuning in all.
            ("auto_compress", ["--flops-budget", "0.5x", "--strategy", "auto_compress",
                               "--rounds", "3", "--round-algorithm", "admm", "--round-options",
                               '{"base_algo": "l1", "num_iterations": 2, "training_epochs": 1}'],
             4),
            ("uniform_long", ["--flops-budget", "0.5x"], 1))
    chosen = set(args.arms.split(",")) | {"uniform"}
    arms = tuple(arm for arm in arms if arm[0] in chosen)
    for name, budget, trials in arms:
        output = work / f"{name}.pt"
        state = work / f"{name}.state.json"
        if state.exists():
            state.unlink()
        start = time.perf_counter()
        done = lithe("search", "--model", str(dense), "--algorithm", "l1_filter", *budget,
                     "--input-shape", f"{BATCH},1,28,28", "--trials", str(trials),
                     "--recalibrate-bn", "20", "--trial-epochs", str(args.trial_epochs),
                     "--latency-runs", "20", "--bisection-steps", "10",
                     "--data", str(work / "tune.pt"), "--test-data", str(work / "val.pt"),
                     "--epochs", "0" if args.finetune_seeds else epochs_of(name), "--lr", "0.01",
                     "--output", str(output),
                     "--state", str(state), "--report", str(work / f"{name}.html"), "--json")
        seconds = time.perf_counter() - start
        summary = json.loads(done.stdout[done.stdout.index("{"):])
        uniform = summary["trials"][0] if "trials" in summary else {"accuracy": None}
        results[name] = {"summary": summary, "seconds": seconds, "output": output,
                         "uniform_val": uniform["accuracy"]}
        if args.finetune_seeds:
            # The same fine-tune as the search's (training options, data), one per seed.
            tests = []
            for seed in range(args.finetune_seeds):
                tuned = work / f"{name}.seed{seed}.pt"
                lithe("train", "--model", str(output), "--epochs", epochs_of(name), "--lr",
                      "0.01", "--seed", str(seed), "--data", str(work / "tune.pt"),
                      "--test-data", str(work / "val.pt"), "--output", str(tuned))
                tests.append(eval_accuracy(tuned, FASHION))
            results[name]["seed_tests"] = tests
            results[name]["output"] = work / f"{name}.seed0.pt"

    names = [arm[0] for arm in arms]
    dense_ms, measured = fresh_latency(dense, [results[n]["output"] for n in names])
    latencies = dict(zip(names, measured))
    dense_flops = flops_of(dense)
    print(f"{'ResNet-8' if args.model == 'resnet8' else 'ResNet-18'} on Fashion-MNIST, batch "
          f"{BATCH}, {THREADS} threads; dense "
          f"{dense_flops} FLOPs, {dense_ms:.3f} ms, test accuracy "
          f"{eval_accuracy(dense, FASHION):.4f}")
    print(f"{'search':<30} {'FLOPs':>7} {'latency (search)':>17} {'latency (fresh)':>16} "
          f"{'val best':>9} {'val uniform':>12} {'test':>7} {'time':>6}")
    verdicts = []
    tests = {}
    for name, ms in latencies.items():
        r = results[name]
        best = r["summary"]["best"]
        flops_ratio = flops_of(r["output"]) / dense_flops
        # The best trial's score; AutoCompress: its last round's, before the final fine-tune.
        rounds = r["summary"].get("rounds")
        scored = rounds[-1]["accuracy"] if rounds else best["trial_accuracy"]
        fresh_ratio = ms / dense_ms
        tests[name] = (statistics.mean(r["seed_tests"]) if "seed_tests" in r
                       else eval_accuracy(r["output"], FASHION))
        label = {"latency": "--latency-budget 0.5x", "flops": "--flops-budget 0.5x",
                 "netadapt": "--flops-budget 0.5x netadapt",
                 "amc": "--flops-budget 0.5x amc",
                 "uniform": "--flops-budget 0.5x --trials 1",
                 "auto_compress": "--flops-budget 0.5x auto_compress",
                 "uniform_long": "uniform, 7 epochs"}[name]
        print(f"{label:<30} {flops_ratio:>7.4f} {best['use']['latency_ratio']:>17.4f} "
              f"{fresh_ratio:>16.4f} {scored:>9.4f} "
              f"{r['uniform_val'] or 0:>12.4f} {tests[name]:>7.4f} {r['seconds']:>5.0f}s")
        if "seed_tests" in r:
            print(f"{'':<30} test over fine-tuning seeds: " +
                  ", ".join(f"{t:.4f}" for t in r["seed_tests"]) +
                  f" (mean {tests[name]:.4f}, sd {statistics.stdev(r['seed_tests']):.4f})")
        if name == "latency":
            off = fresh_ratio / 0.5 - 1
            verdicts.append(f"latency budget: fresh-process ratio {fresh_ratio:.4f}, "
                            f"{100 * off:+.1f}% from 0.5 (target within +-7%): "
                            f"{'MET' if abs(off) <= 0.07 else 'NOT MET'}")
        elif name == "flops":
            verdicts.append(f"FLOPs budget: FLOPs {flops_ratio:.4f}x but latency "
                            f"{fresh_ratio:.4f}x; FLOPs overstate the speedup by "
                            f"{100 * (fresh_ratio - flops_ratio) / fresh_ratio:.1f}%")
    if "auto_compress" in tests and "uniform_long" in tests:
        gain = 100 * (tests["auto_compress"] - tests["uniform_long"])
        verdicts.append(f"FLOPs 0.5x: auto_compress {tests['auto_compress']:.4f} vs uniform "
                        f"with as much training {tests['uniform_long']:.4f}: {gain:+.2f} pt")
    for arm in (a for a in ("flops", "netadapt", "amc") if a in tests):
        gain = 100 * (tests[arm] - tests["uniform"])
        spread = ""
        if args.finetune_seeds > 1:
            # The standard error of a difference of two means over the seeds.
            se = 100 * (statistics.variance(results[arm]["seed_tests"]) / args.finetune_seeds +
                        statistics.variance(results["uniform"]["seed_tests"]) /
                        args.finetune_seeds) ** 0.5
            spread = f" +- {se:.2f} (standard error over {args.finetune_seeds} seeds)"
        verdicts.append(f"FLOPs 0.5x: {'annealing' if arm == 'flops' else arm} "
                        f"{tests[arm]:.4f} vs uniform {tests['uniform']:.4f} after the same "
                        f"fine-tune: {gain:+.2f} pt{spread} (target >= +0.5)")
    for v in verdicts:
        print(v)


if __name__ == "__main__":
    main()
