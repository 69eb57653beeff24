#!/usr/bin/python3
"""Speed of the speedup tool itself: `lithe speedup` against NNI v2.0's ModelSpeedup on the same
masks, side by side (issue: real architectures).

ResNet-50 (torchvision architecture, random weights from a fixed seed, eval mode, 1x3x224x224)
is pruned once with Lithe's l1_filter 0.5 on every Conv2d, dependency-aware; Lithe writes its
masks in NNI's mask.pth layout, so both tools read the same file. Then, alternating, ROUNDS times:
  lithe  `lithe speedup` in a fresh process: load, rebuild the smaller model, check it against
         the masked one on a random input, count FLOPs, time 1 forward of each, write it
  nni    a fresh Python process: import NNI, build the model, load the same weights, then
         ModelSpeedup(model, dummy_input, masks).speedup_model()
Prints the process wall times and each side's speedup call alone (Lithe's speedup_model, from
its report's "seconds"; NNI's speedup_model(), its import and model building excluded), their
medians and the ratios.

Usage: /usr/bin/python3 scripts/bench-speedup-vs-nni.py [ROUNDS=3] [MODEL=resnet50]
Environment: LITHE_BENCH_DIR, LITHE_NNI_DIR (scripts/nni_peer.py); 2 threads on both sides.
"""
import json
import statistics
import subprocess
import sys

import nni_peer

THREADS = 2

NNI_SIDE = r"""
import sys, time, torch, torchvision
torch.set_num_threads(%(threads)d)
from nni.compression.pytorch import ModelSpeedup
model = getattr(torchvision.models, sys.argv[1])().eval()
model.load_state_dict(torch.jit.load(sys.argv[2]).state_dict())
dummy = torch.zeros(1, 3, 224, 224)
start = time.perf_counter()
ModelSpeedup(model, dummy, sys.argv[3]).speedup_model()
print("speedup_model_seconds", time.perf_counter() - start)
print("params_after", sum(p.numel() for p in model.parameters()))
"""


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    name = sys.argv[2] if len(sys.argv) > 2 else "resnet50"
    code = nni_peer.ready()
    if code is not None:
        return code
    work = nni_peer.WORK / "speedup_vs_nni"
    work.mkdir(parents=True, exist_ok=True)
    dense, masked, masks = work / f"{name}.pt", work / f"{name}_masked.pt", work / f"{name}_masks.pth"
    subprocess.run([sys.executable, "-c", f"""
import torch, torchvision
torch.manual_seed(0)
torch.jit.script(torchvision.models.{name}().eval()).save("{dense}")
"""], check=True)
    config = work / "l1_filter.json"
    config.write_text(json.dumps({"algorithm": "l1_filter", "options": {"dependency_aware": True},
                                  "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]}))
    nni_peer.timed([str(nni_peer.LITHE), "compress", "--model", str(dense), "--config",
                    str(config), "--output", str(masked), "--masks", str(masks)])
    script = work / "nni_speedup.py"
    script.write_text(NNI_SIDE % {"threads": THREADS})
    lithe_runs, lithe_inner, nni_runs, nni_inner = [], [], [], []
    for r in range(rounds):
        seconds, out = nni_peer.timed(
            [str(nni_peer.LITHE), "speedup", "--model", str(masked), "--masks", str(masks),
             "--input-shape", "1,3,224,224", "--output", str(work / f"{name}_small.pt"),
             "--latency-runs", "1", "--warmup", "0", "--threads", str(THREADS),
             "--json", str(work / "lithe_report.json")])
        lithe_runs.append(seconds)
        lithe_inner.append(json.loads((work / "lithe_report.json").read_text())["seconds"]["speedup"])
        seconds, out = nni_peer.timed(["/usr/bin/python3", str(script), name, str(masked),
                                       str(masks)], nni=True)
        nni_runs.append(seconds)
        values = dict(line.split() for line in out.splitlines() if line.count(" ") == 1)
        nni_inner.append(float(values["speedup_model_seconds"]))
        print(f"round {r + 1}: lithe process {lithe_runs[-1]:.2f} s (speedup_model "
              f"{lithe_inner[-1]:.2f} s), NNI process {nni_runs[-1]:.2f} s "
              f"(ModelSpeedup.speedup_model {nni_inner[-1]:.2f} s)", flush=True)
    report = json.loads((work / "lithe_report.json").read_text())
    lithe, lithe_call, nni, inner = (statistics.median(v) for v in
                                     (lithe_runs, lithe_inner, nni_runs, nni_inner))
    print(f"\n{name} 1x3x224x224, l1_filter 0.5 dependency-aware, {THREADS} threads, "
          f"medians of {rounds} alternating runs")
    print("| tool | wall s (process) | the speedup call alone s | params after |")
    print("|---|---|---|---|")
    print(f"| lithe speedup | {lithe:.2f} | {lithe_call:.2f} (speedup_model, with its parity "
          f"check) | {report['params']['after']} |")
    print(f"| NNI v2.0 | {nni:.2f} | {inner:.2f} (ModelSpeedup.speedup_model) | "
          f"{values['params_after']} |")
    print(f"Lithe / NNI: process {lithe / nni:.3f}, speedup call {lithe_call / inner:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
