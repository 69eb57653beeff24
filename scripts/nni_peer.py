"""What the side-by-side benchmark scripts share: where NNI v2.0 and the Lithe build are, the
environment both sides run in, and one timed subprocess run."""
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORK = pathlib.Path(os.environ.get("LITHE_BENCH_DIR", ROOT / "build" / "bench"))
NNI = pathlib.Path(os.environ.get("LITHE_NNI_DIR", ROOT.parent / "shared" / "peers" / "nni-v2.0"))
LITHE = ROOT / "build" / "bin" / "lithe"


def ready():
    """None when both sides can run; else the exit code after saying why (0 without NNI: the
    scripts measure nothing rather than fail where the peer is not installed)."""
    if not (NNI / "nni").is_dir():
        print(f"NNI v2.0 not found at {NNI} (set LITHE_NNI_DIR): nothing measured")
        return 0
    if not LITHE.is_file():
        print(f"{LITHE} missing: build first (scripts/build.sh)", file=sys.stderr)
        return 1
    WORK.mkdir(parents=True, exist_ok=True)
    return None


def timed(command, nni=False, extra_env=None):
    """Runs `command` (OpenBLAS at one thread; NNI's import path when `nni`; `extra_env` added);
    returns (wall seconds, stdout)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **(extra_env or {}))
    if nni:
        env.update(PYTHONPATH=f"{NNI}:{NNI / 'deps'}:{NNI / 'stubs'}", PYTHONHASHSEED="0")
    start = time.perf_counter()
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - start, out


# The start of every NNI-side script that trains the Fashion-MNIST LeNet: imports, two torch
# threads, the IDX reader (normalised as Lithe's dataset loader does) and the LeNet of
# tests/data/nni/models/lenet.pt, by layer name. A script appends its own part.
NNI_LENET_PRELUDE = r"""
import gzip, json, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.set_num_threads(2)

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
"""
