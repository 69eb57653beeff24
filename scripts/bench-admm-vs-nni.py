#!/usr/bin/python3
"""ADMM to 80% on the Fashion-MNIST LeNet, NNI v2.0's ADMMPruner and Lithe's admm, side by side
in one script: alternating rounds, medians and their ratio (shared/reference/recipes.md rules).

Both sides start from the same dense model (2 epochs of SGD from tests/data/nni/models/lenet.pt,
written by Lithe once), then run ADMM with NNI's fixed optimizer (Adam, lr 1e-3, weight decay
5e-5, cross-entropy, batches of 64): ITERATIONS iterations of one epoch each, row 1e-4, base
masker level, sparsity 0.8 on every Conv2d/Linear. Data order: the k-th ADMM iteration shuffles
with a CPU generator seeded 1000003·k (Lithe's fine-tuner seeds each fine-tune call so, from
--seed 0; NNI's trainer here does the same). Each side reports the time of the ADMM compression
itself (NNI: pruner.compress(); Lithe: the `algorithm` seconds of `lithe compress --json`,
which leave out reading the data and evaluating), the
sparsity of every layer, and the test accuracy of the pruned model before and after one epoch
of fine-tuning with SGD (lr 0.01, momentum 0.9, weight decay 5e-4). 2 torch threads,
OPENBLAS_NUM_THREADS=1.

Known difference: Lithe's fine-tuner makes a fresh Adam per iteration; NNI keeps one Adam for
all iterations.

Needs a build (scripts/build.sh), Debian's dataset-fashion-mnist, and NNI v2.0 at
../shared/peers/nni-v2.0 (or $LITHE_NNI_DIR); without NNI it says so and exits 0.
Usage: /usr/bin/python3 scripts/bench-admm-vs-nni.py [rounds=3] [iterations=3]
"""
import json
import os
import pathlib
import statistics
import sys

from nni_peer import LITHE, NNI_LENET_PRELUDE, ROOT, WORK, ready, timed

DATA = pathlib.Path(os.environ.get("LITHE_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
INITIAL = ROOT / "tests" / "data" / "nni" / "models" / "lenet.pt"
DENSE = WORK / "admm_vs_nni_dense.pt"
SPARSITY = 0.8

NNI_RUN = NNI_LENET_PRELUDE + r"""
from nni.algorithms.compression.pytorch.pruning import ADMMPruner

model_path, data, iterations, sparsity = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
train_x, train_y = idx(data + "/train-images-idx3-ubyte.gz", True), idx(data + "/train-labels-idx1-ubyte.gz", False)
test_x, test_y = idx(data + "/t10k-images-idx3-ubyte.gz", True), idx(data + "/t10k-labels-idx1-ubyte.gz", False)
model = LeNet()
model.load_state_dict(torch.jit.load(model_path).state_dict())

def accuracy():
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(test_y), 1000):
            correct += int((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
    return correct / len(test_y)

calls = {"k": 0, "generator": None}
def trainer(model, optimizer, criterion, epoch, callback=None):
    if epoch == 0:  # a new ADMM iteration: Lithe's k-th fine-tune call seeds 1000003 * k
        calls["k"] += 1
        calls["generator"] = torch.Generator().manual_seed(1000003 * calls["k"])
    order = torch.randperm(len(train_y), generator=calls["generator"])
    model.train()
    for i in range(0, len(order), 64):
        batch = order[i:i + 64]
        optimizer.zero_grad()
        criterion(model(train_x[batch]), train_y[batch]).backward()
        if callback:
            callback()
        optimizer.step()

config = [{"sparsity": sparsity, "op_types": ["Conv2d", "Linear"]}]
pruner = ADMMPruner(model, config, trainer, num_iterations=iterations, training_epochs=1,
                    row=1e-4, base_algo="level")
start = time.perf_counter()
model = pruner.compress()
seconds = time.perf_counter() - start
layers = {}
for name, module in model.named_modules():
    if hasattr(module, "weight_mask"):
        layers[name] = float((module.weight_mask == 0).sum()) / module.weight_mask.numel()
pruned = accuracy()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
pruner.optimizer = optimizer
generator = torch.Generator().manual_seed(0)
order = torch.randperm(len(train_y), generator=generator)
model.train()
for i in range(0, len(order), 64):
    batch = order[i:i + 64]
    optimizer.zero_grad()
    F.cross_entropy(model(train_x[batch]), train_y[batch]).backward()
    optimizer.step()
print(json.dumps({"seconds": seconds, "layers": layers, "pruned": pruned, "tuned": accuracy()}))
"""

COMMON = ["--batch-size", "64", "--seed", "0", "--threads", "2", "--data", str(DATA), "--json"]


def run_nni(iterations):
    _, out = timed(["/usr/bin/python3", "-c", NNI_RUN, str(DENSE), str(DATA), str(iterations),
                    str(SPARSITY)], nni=True)
    r = json.loads(out.strip().splitlines()[-1])
    return r["seconds"], r["layers"], r["pruned"], r["tuned"]


def run_lithe(iterations):
    config = {"algorithm": "admm",
              "options": {"num_iterations": iterations, "training_epochs": 1, "row": 1e-4,
                          "base_algo": "level"},
              "config_list": [{"sparsity": SPARSITY, "op_types": ["Conv2d", "Linear"]}]}
    config_file = WORK / "admm_vs_nni.json"
    config_file.write_text(json.dumps(config) + "\n")
    admm = WORK / "admm_vs_nni_lithe.pt"
    # ADMM alone (its own training options: NNI's Adam), then one SGD epoch as NNI's side does.
    _, out = timed([str(LITHE), "compress", "--model", str(DENSE), "--config", str(config_file),
                    "--optimizer", "adam", "--lr", "0.001", "--weight-decay", "5e-5",
                    "--output", str(admm)] + COMMON)
    r = json.loads(out)
    layers = {l["name"]: l["pruned"] / l["params"] for l in r["layers"]}
    # The fine-tuning epoch keeps the masks: level at the same sparsity re-selects exactly the
    # zeros ADMM left (they are the smallest |w|), so the mask is ADMM's.
    tune_config = WORK / "admm_vs_nni_tune.json"
    tune_config.write_text(json.dumps(
        {"algorithm": "level",
         "config_list": [{"sparsity": SPARSITY, "op_types": ["Conv2d", "Linear"]}]}) + "\n")
    _, tuned_out = timed([str(LITHE), "compress", "--model", str(admm), "--config",
                          str(tune_config), "--epochs", "1", "--optimizer", "sgd", "--lr", "0.01",
                          "--momentum", "0.9", "--weight-decay", "5e-4",
                          "--output", str(WORK / "admm_vs_nni_tuned.pt")] + COMMON)
    tuned = json.loads(tuned_out)
    return (r["seconds"]["algorithm"], layers, r["accuracy_after"]["accuracy"],
            tuned["epochs"][-1]["test"]["accuracy"])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if (code := ready()) is not None:
        return code
    if not DENSE.is_file():
        timed([str(LITHE), "train", "--model", str(INITIAL), "--epochs", "2", "--optimizer",
               "sgd", "--lr", "0.01", "--momentum", "0.9", "--weight-decay", "5e-4",
               "--output", str(DENSE)] + COMMON)
    results = {"NNI": [], "Lithe": []}
    for i in range(rounds):
        sides = [("NNI", run_nni), ("Lithe", run_lithe)]
        for side, fn in (sides if i % 2 == 0 else sides[::-1]):
            seconds, layers, pruned, tuned = fn(iterations)
            results[side].append((seconds, pruned, tuned))
            print(f"round {i + 1} {side:5}: ADMM {seconds:.2f} s; sparsity "
                  + ", ".join(f"{name} {s:.4f}" for name, s in layers.items())
                  + f"; test accuracy {pruned:.4f} pruned, {tuned:.4f} after 1 epoch", flush=True)

    def median(side, index):
        return statistics.median(r[index] for r in results[side])

    print(f"\nmedians over {rounds} alternating rounds ({iterations} ADMM iterations of 1 epoch, "
          "2 torch threads, OPENBLAS_NUM_THREADS=1)")
    print("side  | ADMM time | accuracy pruned | after 1 epoch")
    for side in ("NNI", "Lithe"):
        print(f"{side:5} | {median(side, 0):7.2f} s | {median(side, 1):15.4f} | "
              f"{median(side, 2):.4f}")
    print(f"Lithe/NNI time {median('Lithe', 0) / median('NNI', 0):.2f}; accuracy difference "
          f"(Lithe − NNI) {100 * (median('Lithe', 1) - median('NNI', 1)):+.2f} pt pruned, "
          f"{100 * (median('Lithe', 2) - median('NNI', 2)):+.2f} pt after 1 epoch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
