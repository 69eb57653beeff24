#!/usr/bin/python3
"""Recipe 2 (b) side by side: AGP level pruning to 0.8 over 3 epochs of Fashion-MNIST training
of the conformance LeNet, by NNI v2.0 and by Lithe, in one script, alternating rounds, medians
and their ratio (shared/reference/recipes.md rules).

Both sides start from tests/data/nni/models/lenet.pt's weights with SGD lr 0.01, momentum 0.9,
weight decay 5e-4, batches of 64 in the order of a CPU generator seeded 0 (epoch e uses its e-th
randperm), AGP initial 0, final 0.8, start 0, end 3, frequency 1, op_types ["default"], 2 torch
threads, OPENBLAS_NUM_THREADS=1. Epoch time = the training loop of one epoch (no evaluation);
each side also reports its test accuracy per epoch and the whole process time.

Needs a build (scripts/build.sh), Debian's dataset-fashion-mnist, and NNI v2.0 at
../shared/peers/nni-v2.0 (or $LITHE_NNI_DIR); without NNI it says so and exits 0.
Usage: /usr/bin/python3 scripts/bench-recipe2-vs-nni.py [rounds=3]
"""
import json
import os
import pathlib
import statistics
import sys

from nni_peer import LITHE, ROOT, WORK, ready, timed

DATA = pathlib.Path(os.environ.get("LITHE_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
MODEL = ROOT / "tests" / "data" / "nni" / "models" / "lenet.pt"
EPOCHS = 3

NNI_RUN = r"""
import gzip, json, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.set_num_threads(2)
from nni.algorithms.compression.pytorch.pruning import AGPPruner

def idx(path, images):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if images:
        x = np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 1, 28, 28)
        return (torch.from_numpy(x.copy()).float() / 255 - 0.2860) / 0.3530
    return torch.from_numpy(np.frombuffer(raw, np.uint8, offset=8).copy()).long()

class LeNet(nn.Module):  # the layers of tests/data/nni/models/lenet.pt, by name
    def __init__(self):
        super().__init__()
        self.conv1, self.relu1, self.pool1 = nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2)
        self.conv2, self.relu2, self.pool2 = nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2)
        self.fc1, self.relu3 = nn.Linear(256, 120), nn.ReLU()
        self.fc2, self.relu4 = nn.Linear(120, 84), nn.ReLU()
        self.fc3 = nn.Linear(84, 10)
    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.relu3(self.fc1(torch.flatten(x, 1)))
        return self.fc3(self.relu4(self.fc2(x)))

model_path, data = sys.argv[1], sys.argv[2]
train_x, train_y = idx(data + "/train-images-idx3-ubyte.gz", True), idx(data + "/train-labels-idx1-ubyte.gz", False)
test_x, test_y = idx(data + "/t10k-images-idx3-ubyte.gz", True), idx(data + "/t10k-labels-idx1-ubyte.gz", False)
model = LeNet()
model.load_state_dict(torch.jit.load(model_path).state_dict())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
config = [{"initial_sparsity": 0.0, "final_sparsity": 0.8, "start_epoch": 0, "end_epoch": 3,
           "frequency": 1, "op_types": ["default"]}]
pruner = AGPPruner(model, config, optimizer, pruning_algorithm="level")
model = pruner.compress()
generator = torch.Generator().manual_seed(0)
epochs = []
for epoch in range(%d):
    pruner.update_epoch(epoch)
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
""" % EPOCHS


def run_nni():
    wall, out = timed(["/usr/bin/python3", "-c", NNI_RUN, str(MODEL), str(DATA)], nni=True)
    epochs = json.loads(out.strip().splitlines()[-1])
    return wall, [e["seconds"] for e in epochs], [e["accuracy"] for e in epochs]


def run_lithe(config):
    wall, out = timed(
        [str(LITHE), "compress", "--model", str(MODEL), "--config", str(config), "--epochs",
         str(EPOCHS), "--data", str(DATA), "--optimizer", "sgd", "--lr", "0.01", "--momentum",
         "0.9", "--weight-decay", "5e-4", "--batch-size", "64", "--seed", "0", "--threads", "2",
         "--output", str(WORK / "recipe2_vs_nni_agp.pt"), "--json"])
    epochs = json.loads(out)["epochs"]
    return wall, [e["seconds"] for e in epochs], [e["test"]["accuracy"] for e in epochs]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if (code := ready()) is not None:
        return code
    config = WORK / "recipe2_vs_nni_agp80.json"
    config.write_text(json.dumps({
        "algorithm": "agp", "options": {"pruning_algorithm": "level"},
        "config_list": [{"initial_sparsity": 0.0, "final_sparsity": 0.8, "start_epoch": 0,
                         "end_epoch": 3, "frequency": 1, "op_types": ["default"]}]}) + "\n")
    nni, lithe = [], []
    for i in range(rounds):
        sides = [("NNI", run_nni, nni), ("Lithe", lambda: run_lithe(config), lithe)]
        for name, fn, runs in (sides if i % 2 == 0 else sides[::-1]):
            runs.append(fn())
            wall, seconds, accuracy = runs[-1]
            print(f"round {i + 1} {name:5}: whole {wall:.2f} s, epochs "
                  + ", ".join(f"{s:.2f} s" for s in seconds) + ", test accuracy "
                  + ", ".join(f"{a:.4f}" for a in accuracy), flush=True)
    epoch_nni = statistics.median(s for r in nni for s in r[1])
    epoch_lithe = statistics.median(s for r in lithe for s in r[1])
    whole_nni = statistics.median(r[0] for r in nni)
    whole_lithe = statistics.median(r[0] for r in lithe)
    print(f"\nmedians over {rounds} alternating rounds x {EPOCHS} epochs "
          "(2 torch threads, OPENBLAS_NUM_THREADS=1)")
    print(f"epoch (training loop): NNI {epoch_nni:.3f} s, Lithe {epoch_lithe:.3f} s, "
          f"Lithe/NNI {epoch_lithe / epoch_nni:.2f}")
    print(f"whole process:         NNI {whole_nni:.2f} s, Lithe {whole_lithe:.2f} s, "
          f"Lithe/NNI {whole_lithe / whole_nni:.2f}")
    print(f"final test accuracy:   NNI {nni[-1][2][-1]:.4f}, Lithe {lithe[-1][2][-1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
