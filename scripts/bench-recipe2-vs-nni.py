#!/usr/bin/python3
"""Recipe 2 side by side: every sub-recipe that NNI v2.0 can run, by NNI and by Lithe, in one
script, alternating rounds, medians and their ratio (shared/reference/recipes.md rules).

  (a) dense training, 2 epochs from tests/data/nni/models/lenet.pt's initial weights;
  (b) AGP level pruning to 0.8 over 3 epochs, from (a)'s dense weights;
  (c) the same to 0.9;
  (d) masked / plain epoch: (b)'s epoch over (a)'s, per side;
  (e) QAT, 8-bit weights and outputs of Conv2d/Linear, 2 epochs from (a)'s weights;
  (f) DoReFa, 4-bit weights of Conv2d/Linear, 2 epochs from (a)'s weights.

(a) also runs a third side: the same PyTorch training loop in .venv's Python, i.e. PyTorch eager
on the libtorch Lithe is built against (NNI v2.0 runs on Debian's torch 1.13, so NNI against
Lithe is also 1.13 against the new libtorch; eager against Lithe is not).

Both sides train with SGD lr 0.01, momentum 0.9, weight decay 5e-4, batches of 64 in the order of
a CPU generator seeded 0 (epoch e uses its e-th randperm), 2 torch threads,
OPENBLAS_NUM_THREADS=1; epoch time = the training loop of one epoch (no evaluation); each side
reports its test accuracy per epoch. (b), (c), (e) and (f) start both sides from the same dense
model: the one Lithe's first (a) run writes.

Needs a build (scripts/build.sh), Debian's dataset-fashion-mnist, and NNI v2.0 at
../shared/peers/nni-v2.0 (or $LITHE_NNI_DIR); without NNI it says so and exits 0.
Usage: /usr/bin/python3 scripts/bench-recipe2-vs-nni.py [rounds=3] [sub-recipes=abcef]
"""
import json
import os
import pathlib
import statistics
import sys

from nni_peer import LITHE, NNI_LENET_PRELUDE, ROOT, WORK, ready, timed

DATA = pathlib.Path(os.environ.get("LITHE_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
INITIAL = ROOT / "tests" / "data" / "nni" / "models" / "lenet.pt"
DENSE = WORK / "recipe2_vs_nni_dense.pt"


def agp(final):
    return {"algorithm": "agp", "options": {"pruning_algorithm": "level"},
            "config_list": [{"initial_sparsity": 0.0, "final_sparsity": final, "start_epoch": 0,
                             "end_epoch": 3, "frequency": 1, "op_types": ["default"]}]}


def quant(algorithm, types, bits):
    return {"algorithm": algorithm,
            "config_list": [{"quant_types": types, "quant_bits": bits,
                             "op_types": ["Conv2d", "Linear"]}]}


# name -> (description, epochs, start model, Lithe config or None for plain training)
SUB_RECIPES = {
    "a": ("dense", 2, INITIAL, None),
    "b": ("AGP 0.8", 3, DENSE, agp(0.8)),
    "c": ("AGP 0.9", 3, DENSE, agp(0.9)),
    "e": ("QAT w8/o8", 2, DENSE, quant("qat", ["weight", "output"], {"weight": 8, "output": 8})),
    "f": ("DoReFa w4", 2, DENSE, quant("dorefa", ["weight"], {"weight": 4})),
}

NNI_RUN = NNI_LENET_PRELUDE + r"""
model_path, data, epochs_total, spec = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
train_x, train_y = idx(data + "/train-images-idx3-ubyte.gz", True), idx(data + "/train-labels-idx1-ubyte.gz", False)
test_x, test_y = idx(data + "/t10k-images-idx3-ubyte.gz", True), idx(data + "/t10k-labels-idx1-ubyte.gz", False)
model = LeNet()
model.load_state_dict(torch.jit.load(model_path).state_dict())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
algorithm = spec and spec["algorithm"]
compressor = None
if algorithm == "agp":
    from nni.algorithms.compression.pytorch.pruning import AGPPruner
    compressor = AGPPruner(model, spec["config_list"], optimizer, pruning_algorithm="level")
elif algorithm == "qat":
    from nni.algorithms.compression.pytorch.quantization import QAT_Quantizer
    compressor = QAT_Quantizer(model, spec["config_list"], optimizer)
elif algorithm == "dorefa":
    from nni.algorithms.compression.pytorch.quantization import DoReFaQuantizer
    compressor = DoReFaQuantizer(model, spec["config_list"], optimizer)
if compressor is not None:
    model = compressor.compress()
generator = torch.Generator().manual_seed(0)
epochs = []
for epoch in range(epochs_total):
    if algorithm == "agp":
        compressor.update_epoch(epoch)
    order = torch.randperm(len(train_y), generator=generator)
    model.train()
    start = time.perf_counter()
    for i in range(0, len(order), 64):
        batch = order[i:i + 64]
        optimizer.zero_grad()
        F.cross_entropy(model(train_x[batch]), train_y[batch]).backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(test_y), 1000):
            correct += int((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum())
    epochs.append({"seconds": seconds, "accuracy": correct / len(test_y)})
print(json.dumps(epochs))
"""

SGD = ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9", "--weight-decay", "5e-4",
       "--batch-size", "64", "--seed", "0", "--threads", "2", "--data", str(DATA), "--json"]


def run_nni(name, python="/usr/bin/python3", nni=True):
    _, epochs, start, config = SUB_RECIPES[name]
    _, out = timed([python, "-c", NNI_RUN, str(start), str(DATA), str(epochs),
                    json.dumps(config)], nni=nni)
    runs = json.loads(out.strip().splitlines()[-1])
    return [e["seconds"] for e in runs], [e["accuracy"] for e in runs]


EAGER_PYTHON = ROOT / ".venv" / "bin" / "python"


def run_eager(name):
    """The NNI side's plain training loop (no NNI imported) on .venv's torch."""
    return run_nni(name, python=str(EAGER_PYTHON), nni=False)


def run_lithe(name):
    _, epochs, start, config = SUB_RECIPES[name]
    output = DENSE if name == "a" else WORK / f"recipe2_vs_nni_{name}.pt"
    if config is None:
        command = [str(LITHE), "train", "--model", str(start), "--epochs", str(epochs)]
    else:
        config_file = WORK / f"recipe2_vs_nni_{name}.json"
        config_file.write_text(json.dumps(config) + "\n")
        command = [str(LITHE), "compress", "--model", str(start), "--config", str(config_file),
                   "--epochs", str(epochs)]
    _, out = timed(command + SGD + ["--output", str(output)])
    runs = json.loads(out)["epochs"]
    return [e["seconds"] for e in runs], [e["test"]["accuracy"] for e in runs]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    chosen = sys.argv[2] if len(sys.argv) > 2 else "abcef"
    if (code := ready()) is not None:
        return code
    if "a" not in chosen and not DENSE.is_file():
        chosen = "a" + chosen  # the later sub-recipes start from (a)'s model
    results = {name: {"NNI": [], "Lithe": [], "eager": []} for name in chosen}
    for name in chosen:
        description = SUB_RECIPES[name][0]
        sides = [("NNI", run_nni), ("Lithe", run_lithe)]
        if name == "a" and EAGER_PYTHON.is_file():
            sides.append(("eager", run_eager))
        for i in range(rounds):
            # Each side goes first in turn, so none always runs on a warmer machine.
            for side, fn in sides[i % len(sides):] + sides[:i % len(sides)]:
                seconds, accuracy = fn(name)
                results[name][side].append((seconds, accuracy))
                print(f"({name}) {description:10} round {i + 1} {side:5}: epochs "
                      + ", ".join(f"{s:.2f} s" for s in seconds) + "; test accuracy "
                      + ", ".join(f"{a:.4f}" for a in accuracy), flush=True)

    def epoch(name, side):
        return statistics.median(s for seconds, _ in results[name][side] for s in seconds)

    print(f"\nmedians over {rounds} alternating rounds (2 torch threads, OPENBLAS_NUM_THREADS=1)")
    print("sub-recipe     | NNI epoch | Lithe epoch | Lithe/NNI | NNI accuracy per epoch | "
          "Lithe accuracy per epoch")
    for name in chosen:
        nni, lithe = epoch(name, "NNI"), epoch(name, "Lithe")
        accuracy = {side: ", ".join(f"{a:.4f}" for a in results[name][side][-1][1])
                    for side in ("NNI", "Lithe")}
        print(f"({name}) {SUB_RECIPES[name][0]:10} | {nni:7.3f} s | {lithe:9.3f} s | "
              f"{lithe / nni:9.2f} | {accuracy['NNI']} | {accuracy['Lithe']}")
    if "a" in chosen and "b" in chosen:
        print("(d) masked / plain epoch ((b) over (a)): NNI "
              f"{epoch('b', 'NNI') / epoch('a', 'NNI'):.2f}, Lithe "
              f"{epoch('b', 'Lithe') / epoch('a', 'Lithe'):.2f}")
    if "a" in chosen and results["a"]["eager"]:
        eager = epoch("a", "eager")
        print(f"(a) against PyTorch eager on .venv's torch: eager {eager:.3f} s, Lithe "
              f"{epoch('a', 'Lithe'):.3f} s, Lithe/eager {epoch('a', 'Lithe') / eager:.2f}; "
              "eager accuracy per epoch "
              + ", ".join(f"{a:.4f}" for a in results["a"]["eager"][-1][1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
