#!/usr/bin/env python3
"""torchrun's static rendezvous, emulated with Python's own c10d: an "agent" serves the TCPStore
on MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE=True, as torchrun does (Debian's torchrun
1.13 itself does not start on Python 3.11). Two `lithe train` ranks must join it as clients,
train, and rank 0 must write a model identical to `lithe launch`'s on the same data.
Usage: torchrun_agent_store_check.py LITHE MODEL WORKDIR. Prints "PASS: ..." or "FAIL: ...".
"""
import gzip
import os
import socket
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.distributed as dist


def small_dataset(path, n=256):
    root = "/usr/share/datasets/fashion-mnist"
    with gzip.open(os.path.join(root, "train-images-idx3-ubyte.gz"), "rb") as f:
        images = f.read()
    with gzip.open(os.path.join(root, "train-labels-idx1-ubyte.gz"), "rb") as f:
        labels = f.read()
    count = struct.unpack(">I", images[4:8])[0]
    x = np.frombuffer(images[16:], dtype=np.uint8).reshape(count, 1, 28, 28)[:n]
    x = ((x.astype(np.float32) / 255) - 0.2860) / 0.3530
    y = np.frombuffer(labels[8:], dtype=np.uint8)[:n].astype(np.int64)
    torch.save({"images": torch.from_numpy(x.copy()), "labels": torch.from_numpy(y.copy())}, path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    lithe, model, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data.pt")
    small_dataset(data)
    train = ["train", "--model", model, "--data", data, "--epochs", "1", "--batch-size", "32"]
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, 2, True, wait_for_workers=False)  # the agent's
    env = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True",
               TORCHELASTIC_RESTART_COUNT="0", LITHE_DIST_TIMEOUT="60")
    agent_out = os.path.join(work, "agent.pt")
    ranks = [subprocess.Popen([lithe] + train + ["--output", agent_out],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(2)]
    codes = [p.wait(timeout=300) for p in ranks]
    del store
    if codes != [0, 0]:
        print("FAIL: ranks exited with %s" % codes)
        return
    launch_out = os.path.join(work, "launch.pt")
    subprocess.run([lithe, "launch", "--nproc", "2", "--"] + train + ["--output", launch_out],
                   check=True, timeout=300)
    a = torch.jit.load(agent_out).state_dict()
    b = torch.jit.load(launch_out).state_dict()
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    if diff != 0:
        print("FAIL: the agent-store run differs from lithe launch's by %g" % diff)
        return
    print("PASS: two ranks joined the agent's store as clients; model identical to lithe launch's")


if __name__ == "__main__":
    main()
