#!/usr/bin/python3
"""Recipe 1 side by side: Level pruning of Big25M to sparsity 0.8 by NNI v2.0 and by Lithe, in
one script, alternating runs, medians and their ratio (shared/reference/recipes.md rules).

Each round runs, in alternating order,
  - NNI: a fresh /usr/bin/python3 process that imports torch and NNI, builds Big25M with the
    weights of the TorchScript file, runs LevelPruner(...).compress() and exits. It reports the
    in-process compress() time; the script times the whole process.
  - Lithe: `lithe compress --model big25m.pt --config level80.json --output ...`, whole process
    timed by the script, in-process pruning time from its `time:` line.
Both use 2 torch threads and OPENBLAS_NUM_THREADS=1.

Needs a build (scripts/build.sh) and NNI v2.0 at ../shared/peers/nni-v2.0 (or $LITHE_NNI_DIR);
without NNI it says so and exits 0 having measured nothing.
Usage: /usr/bin/python3 scripts/bench-recipe1-vs-nni.py [rounds=5]
"""
import json
import re
import statistics
import subprocess
import sys

from nni_peer import LITHE, ROOT, WORK, ready, timed

# The NNI side, run as its own process so that its start-up (Python, torch, NNI imports) is
# counted like Lithe's.
NNI_RUN = r"""
import sys, time
import torch
torch.set_num_threads(2)
sys.path.insert(0, sys.argv[2])
from make_big25m import Big25M
from nni.algorithms.compression.pytorch.pruning import LevelPruner
scripted = torch.jit.load(sys.argv[1])
model = Big25M()
model.load_state_dict({k: v for k, v in scripted.state_dict().items()})
model.eval()
pruner = LevelPruner(model, [{"sparsity": 0.8, "op_types": ["default"]}])
start = time.perf_counter()
pruner.compress()
seconds = time.perf_counter() - start
zeros = sum(int((w.weight_mask == 0).sum()) for w in pruner.get_modules_wrapper())
print("compress %.4f zeros %d" % (seconds, zeros))
"""


def run_nni(model):
    wall, out = timed(["/usr/bin/python3", "-c", NNI_RUN, str(model), str(ROOT / "scripts")],
                      nni=True)
    m = re.search(r"compress ([0-9.]+) zeros (-?\d+)", out)
    return wall, float(m.group(1)), int(m.group(2))


def run_lithe(model, config, output):
    wall, out = timed([str(LITHE), "compress", "--model", str(model), "--config", str(config),
                       "--output", str(output), "--threads", "2", "--json"])
    summary = json.loads(out)
    zeros = sum(layer["pruned"] for layer in summary["layers"])
    return wall, summary["seconds"]["compress"], zeros


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if (code := ready()) is not None:
        return code
    model = WORK / "big25m.pt"
    if not model.is_file():
        subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "make_big25m.py"), str(model)],
                       check=True)
    config = WORK / "level80.json"
    config.write_text('{"algorithm": "level", '
                      '"config_list": [{"sparsity": 0.8, "op_types": ["default"]}]}\n')
    nni, lithe = [], []
    for i in range(rounds):
        # Alternate which side goes first, so neither always runs on a warmer page cache.
        order = [("nni", lambda: run_nni(model)),
                 ("lithe", lambda: run_lithe(model, config, WORK / "big25m_pruned.pt"))]
        for name, fn in (order if i % 2 == 0 else order[::-1]):
            (nni if name == "nni" else lithe).append(fn())
        print(f"round {i + 1}: NNI whole {nni[-1][0]:.3f} s compress {nni[-1][1]:.3f} s | "
              f"Lithe whole {lithe[-1][0]:.3f} s compress {lithe[-1][1]:.3f} s", flush=True)
    med = lambda runs, k: statistics.median(r[k] for r in runs)
    print(f"\nmedians of {rounds} alternating rounds (2 torch threads, OPENBLAS_NUM_THREADS=1)")
    print(f"pruning step in-process: NNI {med(nni, 1):.3f} s, Lithe {med(lithe, 1):.3f} s, "
          f"NNI/Lithe {med(nni, 1) / med(lithe, 1):.1f}x")
    print(f"whole process:           NNI {med(nni, 0):.3f} s, Lithe {med(lithe, 0):.3f} s, "
          f"NNI/Lithe {med(nni, 0) / med(lithe, 0):.2f}x")
    print(f"weights pruned:          NNI {nni[-1][2]}, Lithe {lithe[-1][2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
