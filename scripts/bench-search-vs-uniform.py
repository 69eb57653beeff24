#!/usr/bin/env python3
"""Search pruners against uniform pruning on Fashion-MNIST (issue: search). One run makes every
figure:

  model     the bundled LeNet trained 3 epochs by `lithe train` (seed 0)
  data      training images 0..54,999 train (fine-tuning, NetAdapt's short-term fine-tuning);
            training images 55,000..59,999 are the validation set every search scores
            candidates on; the 10,000 test images are touched only by the final evaluation
  layers    conv1, conv2, fc1, fc2 by L1 filter (row) pruning; 50% of their weights overall
            (--layers conv1,conv2: the convolutions alone, the recipe NNI v2.0 can run: its L1
            pruners take Conv2d only)
  arms      uniform            l1_filter, 0.5 in every layer
            simulated_annealing base_algo l1, temperatures 0.05 -> 0.005, cool-down 0.8,
                               seeds 1, 2, 3
            net_adapt          base_algo l1, steps of 0.1, one short-term epoch per candidate
  then      every arm's result fine-tuned the same way: 1 epoch, SGD lr 0.01 momentum 0.9,
            weight decay 5e-4, seed 0, batch 64; validation accuracy from `lithe compress`,
            test accuracy by `lithe eval`
  --flops-budget B
            every arm at B of the dense model's FLOPs after speedup instead of a weight sparsity
            (NNI's count at 1x1x28x28): the searches take `flops_budget` (SDK 1.10), uniform is
            l1_filter at the one sparsity that `lithe search --trials 1` bisects to the budget
  --sa-fine-tune N
            also simulated_annealing with short_term_fine_tune_epochs N (each candidate
            fine-tuned before it is scored, as NetAdapt's are; the result still starts its
            fine-tuning from the original weights), seeds 1, 2, 3
  --nni     also NNI v2.0's own SimulatedAnnealingPruner (the same temperatures, seeds 1, 2, 3
            of numpy's generator) and NetAdaptPruner (the same step, one short-term epoch),
            base_algo l1, the same validation evaluator, run end to end in NNI: its search,
            then the same fine-tuning recipe in PyTorch (its masks kept by NNI's wrappers) and
            the same test images. Its search time is wall time of compress(), beside
            `lithe compress`'s algorithm time.
  --finetune-seeds N
            each arm's search runs without fine-tuning (`lithe compress` one-shot); its
            sped-up model is then fine-tuned by `lithe train` N times with the same recipe and
            shuffling seeds 0..N-1, and the test column is their mean (each seed's accuracy and
            the spread printed below the row); with N > 1 each arm's gain over uniform is
            also printed paired by seed (seed k shuffles the same batches for every arm)
  --search-strategies annealing,amc,amc:nofill
            with --flops-budget and --finetune-seeds: also `lithe search --strategy S` over the
            same layers at the same budget (--search-trials trials, 48 by default; `:nofill`
            adds --no-fill), its best model (pruned and sped up) fine-tuned like every arm;
            --no-plugin-arms leaves out the simulated_annealing and net_adapt plugins
  --search-trial-epochs N
            the searches score every trial after N epochs of fine-tuning (`--trial-epochs`,
            the fine-tuning recipe, seed 0) instead of as pruned; the best trial's filters are
            then pruned from the dense weights afresh (`lithe compress` l1_filter per layer,
            `lithe speedup`), so its fine-tuning starts where every other arm's does

Usage: .venv/bin/python scripts/bench-search-vs-uniform.py [--work DIR] [--layers L1,L2]
           [--nni | --flops-budget 0.5] [--sa-fine-tune 1] [--finetune-seeds N]
           [--search-strategies S,...] [--search-trials 48] [--search-trial-epochs N]
           [--no-plugin-arms]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from fashion_bench import fashion_idx  # noqa: E402
from nni_peer import NNI_LENET_PRELUDE, ready, timed  # noqa: E402

LITHE = ROOT / "build" / "bin" / "lithe"

# NNI's side of --nni: argv dense.pt train.pt val.pt sa|netadapt SEED LAYERS WORKDIR; prints
# one JSON line (per-layer weight sparsity, validation and test accuracy, search seconds).
NNI_SEARCH = NNI_LENET_PRELUDE + r"""
import os
from nni.algorithms.compression.pytorch.pruning import NetAdaptPruner, SimulatedAnnealingPruner
dense, train_pt, val_pt, algo, seed, layers, workdir = sys.argv[1:8]
layers = layers.split(",")
np.random.seed(int(seed))
torch.manual_seed(int(seed))
train, val = torch.load(train_pt), torch.load(val_pt)
folder = "/usr/share/datasets/fashion-mnist/"
test_x = idx(folder + "t10k-images-idx3-ubyte.gz", True)
test_y = idx(folder + "t10k-labels-idx1-ubyte.gz", False)

def accuracy(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            correct += (model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    return correct / len(x)

def evaluator(model):
    return accuracy(model, val["images"], val["labels"])

def train_epoch(model):  # lithe compress's recipe: SGD, batches of 64, a seeded shuffle
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    order = torch.randperm(len(train["images"]), generator=torch.Generator().manual_seed(0))
    for i in range(0, len(order), 64):
        batch = order[i:i + 64]
        opt.zero_grad()
        F.cross_entropy(model(train["images"][batch]), train["labels"][batch]).backward()
        opt.step()

model = LeNet()
model.load_state_dict(torch.jit.load(dense).state_dict())
config = [{"sparsity": 0.5, "op_types": ["Conv2d"], "op_names": layers}]
start = time.perf_counter()
if algo == "sa":
    pruner = SimulatedAnnealingPruner(model, config, evaluator, base_algo="l1",
                                      start_temperature=0.05, stop_temperature=0.005,
                                      cool_down_rate=0.8, experiment_data_dir=workdir)
else:
    pruner = NetAdaptPruner(model, config, short_term_fine_tuner=train_epoch, evaluator=evaluator,
                            base_algo="l1", sparsity_per_iteration=0.1, experiment_data_dir=workdir)
pruned = pruner.compress()
seconds = time.perf_counter() - start
train_epoch(pruned)
val_accuracy = evaluator(pruned)  # the forward also writes the masks into the weights
modules = dict(pruned.named_modules())
sparsity = {}
for name in layers:
    m = modules[name]
    w = m.module.weight if hasattr(m, "module") else m.weight
    sparsity[name] = (w == 0).float().mean().item()
print(json.dumps({"sparsity": sparsity, "validation": val_accuracy,
                  "test": accuracy(pruned, test_x, test_y), "seconds": seconds}))
"""


def run(*argv):
    done = subprocess.run([str(LITHE), *argv, "--threads", "2"], capture_output=True, text=True,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if done.returncode != 0:
        sys.exit(f"FAILED: lithe {' '.join(argv)}\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def flops_of(model):
    """NNI's FLOPs count of `model` at 1x1x28x28 (`lithe flops`)."""
    return json.loads(run("flops", "--json", "--model", str(model), "--input-shape",
                          "1,1,28,28"))["total_flops"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default=str(ROOT / "build" / "bench" / "search"))
    parser.add_argument("--layers", default="conv1,conv2,fc1,fc2")
    parser.add_argument("--nni", action="store_true")
    parser.add_argument("--flops-budget", type=float)
    parser.add_argument("--sa-fine-tune", type=int, default=0)
    parser.add_argument("--finetune-seeds", type=int, default=0,
                        help="fine-tune every arm's sped-up result with this many shuffling "
                             "seeds instead of once inside lithe compress")
    parser.add_argument("--search-strategies", default="",
                        help="also `lithe search --strategy S` for each S (annealing, amc, "
                             "random; S:nofill with --no-fill), at --flops-budget, fine-tuned "
                             "with --finetune-seeds")
    parser.add_argument("--search-trials", type=int, default=48)
    parser.add_argument("--search-trial-epochs", type=int, default=0,
                        help="`lithe search --trial-epochs N`: every trial fine-tuned N epochs "
                             "(the fine-tuning recipe, seed 0) before it is scored; the best "
                             "trial's sparsities are then applied to the dense model afresh")
    parser.add_argument("--no-plugin-arms", action="store_true",
                        help="leave out the simulated_annealing and net_adapt plugins' arms")
    args = parser.parse_args()
    if args.search_strategies and not (args.flops_budget and args.finetune_seeds):
        sys.exit("--search-strategies needs --flops-budget and --finetune-seeds")
    if args.nni and args.flops_budget:
        sys.exit("--nni compares at a weight sparsity: NNI's searches take no FLOPs budget")
    layers = args.layers.split(",")
    trial_tuning = ["--trial-epochs", str(args.search_trial_epochs), "--lr", "0.01",
                    "--momentum", "0.9", "--seed", "0"] if args.search_trial_epochs else []
    status = ready() if args.nni else None
    if status is not None:
        return status
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    images = fashion_idx("train-images-idx3-ubyte", True)
    labels = fashion_idx("train-labels-idx1-ubyte", False)
    train, val = work / "train.pt", work / "val.pt"
    torch.save({"images": images[:55000].contiguous(), "labels": labels[:55000].contiguous()},
               str(train))
    torch.save({"images": images[55000:].contiguous(), "labels": labels[55000:].contiguous()},
               str(val))
    dense = work / "dense.pt"
    run("train", "--model", str(ROOT / "samples/models/lenet.pt"), "--epochs", "3", "--seed",
        "0", "--data", str(train), "--output", str(dense))
    dense_accuracy = json.loads(run("eval", "--json", "--model", str(dense)))["accuracy"]
    selection = {"sparsity": 0.5, "op_names": layers}
    target = {}
    uniform = 0.5
    if args.flops_budget:
        selection = {"op_names": layers}
        target = {"flops_budget": args.flops_budget}
        state = work / "uniform_search.json"
        if state.exists():
            state.unlink()
        run("search", "--model", str(dense), "--algorithm", "l1_filter", "--op-types",
            "Conv2d,Linear", "--layers", ",".join(layers), "--flops-budget",
            f"{args.flops_budget}x", "--trials", "1", "--input-shape", "1,1,28,28",
            "--data", str(train), "--test-data", str(val), "--state", str(state), "--output",
            str(work / "uniform_search.pt"))
        uniform = json.loads(state.read_text())["trials"][0]["sparsities"][0]
    arms = [("uniform", {"algorithm": "l1_filter",
                         "config_list": [dict(selection, sparsity=uniform)]})]
    for seed in () if args.no_plugin_arms else (1, 2, 3):
        arms.append((f"simulated_annealing seed {seed}", {
            "algorithm": "simulated_annealing",
            "options": {"base_algo": "l1", "start_temperature": 0.05, "stop_temperature": 0.005,
                        "cool_down_rate": 0.8, "seed": seed, **target},
            "config_list": [selection]}))
    for seed in (1, 2, 3) if args.sa_fine_tune else ():
        arms.append((f"simulated_annealing fine-tuned seed {seed}", {
            "algorithm": "simulated_annealing",
            "options": {"base_algo": "l1", "start_temperature": 0.05, "stop_temperature": 0.005,
                        "cool_down_rate": 0.8, "seed": seed,
                        "short_term_fine_tune_epochs": args.sa_fine_tune, **target},
            "config_list": [selection]}))
    if not args.no_plugin_arms:
        arms.append(("net_adapt", {
            "algorithm": "net_adapt",
            "options": {"base_algo": "l1", "sparsity_per_iteration": 0.1,
                        "short_term_fine_tune_epochs": 1, **target},
            "config_list": [selection]}))
    for spec in filter(None, args.search_strategies.split(",")):
        strategy, _, fill = spec.partition(":")
        arms.append((f"search {strategy}" + (" no fill" if fill == "nofill" else ""),
                     {"search": strategy, "fill": fill != "nofill"}))
    print(f"dense LeNet: test accuracy {dense_accuracy:.4f}")
    dense_flops = flops_of(dense)
    weights = {n: m.weight for n, m in torch.jit.load(str(dense)).named_modules() if n in layers}
    rows = {n: w.shape[0] for n, w in weights.items()}
    params = {n: w.numel() for n, w in weights.items()}
    print(f"| arm | sparsity {', '.join(layers)} | overall | FLOPs after speedup | validation | "
          "test | search time |")
    print("|---|---|---|---|---|---|---|")
    results = {}
    seed_tests = {}
    for name, config in arms:
        config_path = work / (name.replace(" ", "_") + ".json")
        config_path.write_text(json.dumps(config))
        out_path = work / (name.replace(" ", "_") + ".pt")
        masks_path = work / (name.replace(" ", "_") + ".masks.pt")
        small_path = work / (name.replace(" ", "_") + ".small.pt")
        if "search" in config:
            # `lithe search` writes its best model pruned and sped up, not fine-tuned (the
            # trials are scored as pruned, as the plugins' are).
            state = work / (name.replace(" ", "_") + ".state.json")
            if state.exists():
                state.unlink()
            run("search", "--model", str(dense), "--algorithm", "l1_filter", "--op-types",
                "Conv2d,Linear", "--layers", ",".join(layers), "--flops-budget",
                f"{args.flops_budget}x", "--strategy", config["search"], "--trials",
                str(args.search_trials), *([] if config["fill"] else ["--no-fill"]),
                "--input-shape", "1,1,28,28", "--data", str(train), "--test-data", str(val),
                "--epochs", "0", *trial_tuning, "--state", str(state), "--output",
                str(small_path))
            record = json.loads(state.read_text())
            best = max((t for t in record["trials"] if t["feasible"]),
                       key=lambda t: (t["accuracy"], -t["use"]["flops"], -t["index"]))
            config.update(best=best, dense_flops=record["dense"]["flops"],
                          seconds=sum(t["seconds"] for t in record["trials"]))
            if args.search_trial_epochs:
                # The search's output carries its trial's fine-tuning: the same filters pruned
                # from the dense weights instead, so that every arm starts the same training.
                rebuilt = {"algorithm": "l1_filter", "config_list": [
                    {"sparsity": s, "op_names": [n]}
                    for s, n in zip(best["sparsities"], layers) if int(s * rows[n]) > 0]}
                config_path.write_text(json.dumps(rebuilt))
                run("compress", "--model", str(dense), "--config", str(config_path), "--output",
                    str(out_path), "--masks", str(masks_path))
                run("speedup", "--model", str(out_path), "--masks", str(masks_path), "--output",
                    str(small_path), "--input-shape", "1,1,28,28")
        # With --finetune-seeds the search alone (one-shot compress: no --epochs).
        # (lithe compress refuses data that a one-shot l1_filter would not read).
        training = [] if args.finetune_seeds else ["--epochs", "1", "--lr", "0.01",
                                                   "--momentum", "0.9", "--seed", "0"]
        data = [] if args.finetune_seeds and config.get("algorithm") == "l1_filter" else [
            "--data", str(train), "--test-data", str(val)]
        if "search" in config:
            # The best trial's sparsities are of filters; the weights they remove, per layer.
            sparsities = [int(s * rows[n]) / rows[n] for s, n in
                          zip(config["best"]["sparsities"], layers)]
            overall = (sum(s * params[n] for s, n in zip(sparsities, layers)) /
                       sum(params[n] for n in layers))
            summary = {"seconds": {"algorithm": config["seconds"]},
                       "accuracy_after": {"accuracy": config["best"]["accuracy"]}}
        else:
            out = run("compress", "--json", "--model", str(dense), "--config", str(config_path),
                      *data, *training, "--output", str(out_path), "--masks", str(masks_path))
            # The compressed model, not the dense one: net_adapt's result carries the weights
            # of its short-term fine-tuning (as NNI's does).
            run("speedup", "--model", str(out_path), "--masks", str(masks_path), "--output",
                str(small_path), "--input-shape", "1,1,28,28")
            summary = json.loads(out[out.index("{\n"):out.rindex("}") + 1])
            by_name = {entry["name"]: entry for entry in summary["layers"]}
            sparsities = [by_name[n]["pruned"] / by_name[n]["params"] for n in layers]
            overall = (sum(by_name[n]["pruned"] for n in layers) /
                       sum(by_name[n]["params"] for n in layers))
        flops = flops_of(small_path) / dense_flops
        if args.finetune_seeds:
            # The sped-up model trains as the masked one would (its pruned filters and their
            # inputs are gone instead of held at zero), once per shuffling seed.
            tests = []
            for seed in range(args.finetune_seeds):
                tuned = work / (name.replace(" ", "_") + f".seed{seed}.pt")
                run("train", "--model", str(small_path), "--data", str(train), "--test-data",
                    str(val), "--epochs", "1", "--lr", "0.01", "--momentum", "0.9", "--seed",
                    str(seed), "--output", str(tuned))
                tests.append(json.loads(run("eval", "--json", "--model", str(tuned)))["accuracy"])
            seed_tests[name] = tests
            test = statistics.mean(tests)
        else:
            test = json.loads(run("eval", "--json", "--model", str(out_path)))["accuracy"]
        seconds = summary["seconds"]["algorithm"]
        validation = ("%.4f" % summary["accuracy_after"]["accuracy"]
                      if "accuracy_after" in summary else "-")
        results[name] = test
        print(f"| {name} | {', '.join(f'{s:.3f}' for s in sparsities)} | {overall:.4f} | "
              f"{flops:.4f} | {validation} | {test:.4f} | "
              f"{seconds:.1f} s |", flush=True)
        if name in seed_tests:
            print(f"|  | test over fine-tuning seeds: "
                  f"{', '.join(f'{t:.4f}' for t in seed_tests[name])} (sd "
                  f"{statistics.stdev(seed_tests[name]):.4f}) | | | | | |", flush=True)
    if args.nni:
        for name, algo, seed in [("NNI SimulatedAnnealingPruner seed 1", "sa", 1),
                                 ("NNI SimulatedAnnealingPruner seed 2", "sa", 2),
                                 ("NNI SimulatedAnnealingPruner seed 3", "sa", 3),
                                 ("NNI NetAdaptPruner", "netadapt", 0)]:
            nni_work = work / ("nni-" + algo + str(seed))
            nni_work.mkdir(exist_ok=True)
            _, out = timed(["/usr/bin/python3", "-c", NNI_SEARCH, str(dense), str(train), str(val),
                            algo, str(seed), ",".join(layers), str(nni_work)], nni=True)
            r = json.loads(out.strip().splitlines()[-1])
            overall = sum(r["sparsity"][n] * params[n] for n in layers) / sum(params.values())
            results[name] = r["test"]
            shares = ", ".join("%.3f" % r["sparsity"][n] for n in layers)
            print(f"| {name} | {shares} | "
                  f"{overall:.4f} | | {r['validation']:.4f} | {r['test']:.4f} | "
                  f"{r['seconds']:.1f} s |", flush=True)

    def mean_of(prefix):
        return statistics.mean(v for k, v in results.items() if k.startswith(prefix))
    uniform = results["uniform"]
    if not args.no_plugin_arms:
        print(f"simulated_annealing mean {mean_of('simulated_annealing seed'):.4f} vs uniform "
              f"{uniform:.4f}: {100 * (mean_of('simulated_annealing seed') - uniform):+.2f} pt; "
              f"net_adapt {100 * (results['net_adapt'] - uniform):+.2f} pt")
    if args.finetune_seeds > 1:
        n = args.finetune_seeds
        for arm in [a for a in seed_tests if a != "uniform"]:
            se = 100 * (statistics.variance(seed_tests[arm]) / n +
                        statistics.variance(seed_tests["uniform"]) / n) ** 0.5
            # Seed k shuffles the same batches for every arm: the per-seed differences are
            # paired, and their spread leaves out what the shuffle does to every arm alike.
            paired = [a - u for a, u in zip(seed_tests[arm], seed_tests["uniform"])]
            paired_se = 100 * (statistics.variance(paired) / n) ** 0.5
            better = sum(d > 0 for d in paired)
            print(f"{arm}: {100 * (results[arm] - uniform):+.2f} +- {se:.2f} pt over uniform "
                  f"(means over {n} fine-tuning seeds, standard error); paired by seed "
                  f"+- {paired_se:.2f} pt, ahead on {better} of {n} seeds")
    if args.sa_fine_tune:
        tuned = mean_of("simulated_annealing fine-tuned")
        print(f"simulated_annealing with fine-tuned candidates mean {tuned:.4f}: "
              f"{100 * (tuned - uniform):+.2f} pt")
    if args.nni:
        print(f"Lithe - NNI: simulated annealing (means) "
              f"{100 * (mean_of('simulated_annealing seed') - mean_of('NNI Simulated')):+.2f} pt; "
              f"NetAdapt {100 * (results['net_adapt'] - results['NNI NetAdaptPruner']):+.2f} pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
