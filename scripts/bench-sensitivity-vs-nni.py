#!/usr/bin/python3
"""Sensitivity analysis, Lithe against NNI v2.0's SensitivityAnalysis, side by side (issue:
search). One run of this script makes every figure:

  model      the bundled LeNet trained here by `lithe train` for 2 epochs (seed 0)
  analysis   L1 filter pruning of conv1 and conv2 at NNI's default sparsities 0.1..0.9, no
             early stop: 18 trials + the original, each an evaluation of top-1 accuracy on the
             10,000 Fashion-MNIST test images (batches of 1000, eval mode, no gradients)
  NNI        SensitivityAnalysis(model, val, prune_type='l1').analysis(), val reading the test
             images from tensors prepared beforehand (no DataLoader: the fairest val_func)
  NNI+pad    the same with MALLOC_TOP_PAD_=256 MiB: the allocator setting Lithe makes for
             itself (keep_freed_memory_for_reuse), given to NNI's process too, to show how much
             of the difference is the allocator and how much the analysis
  Lithe      lithe sensitivity --algorithm l1_filter --json (its own evaluation: each layer's
             trials run only the forward after that layer, from kept values)
  time       the analysis alone on both sides (NNI: analysis(); Lithe: `seconds` of --json),
             and each side's whole process; ROUNDS rounds alternating which side goes first,
             medians; 2 torch threads, OPENBLAS_NUM_THREADS=1
  agreement  the largest |accuracy difference| over the 18 (layer, sparsity) cells

Usage: /usr/bin/python3 scripts/bench-sensitivity-vs-nni.py [ROUNDS]
"""
import json
import statistics
import sys

from nni_peer import LITHE, NNI_LENET_PRELUDE, ROOT, WORK, ready, timed

NNI_SCRIPT = NNI_LENET_PRELUDE + r"""
from nni.compression.pytorch.utils.sensitivity_analysis import SensitivityAnalysis
model = LeNet()
model.load_state_dict(torch.jit.load(sys.argv[1]).state_dict())
model.eval()
folder = "/usr/share/datasets/fashion-mnist/"
x = idx(folder + "t10k-images-idx3-ubyte.gz", True)
y = idx(folder + "t10k-labels-idx1-ubyte.gz", False)

def val():
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], 1000):
            correct += int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
    return correct / x.shape[0]

start = time.perf_counter()
table = SensitivityAnalysis(model, val, prune_type="l1").analysis()
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "table": {k: {str(round(float(s), 2)): m
                                                    for s, m in v.items()}
                                                for k, v in table.items()}}))
"""


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    code = ready()
    if code is not None:
        return code
    trained = WORK / "sensitivity-lenet.pt"
    timed([str(LITHE), "train", "--model", str(ROOT / "samples/models/lenet.pt"), "--epochs",
           "2", "--seed", "0", "--threads", "2", "--output", str(trained)])
    script = WORK / "nni_sensitivity.py"
    script.write_text(NNI_SCRIPT)
    sides = ("nni", "nni+pad", "lithe")
    runs = {side: [] for side in sides}
    for r in range(rounds):
        for side in (sides if r % 2 == 0 else tuple(reversed(sides))):
            if side.startswith("nni"):
                pad = {"MALLOC_TOP_PAD_": str(256 << 20)} if side == "nni+pad" else None
                wall, out = timed(["/usr/bin/python3", str(script), str(trained)], nni=True,
                                  extra_env=pad)
                result = json.loads(out.strip().splitlines()[-1])
                table = result["table"]
            else:
                wall, out = timed([str(LITHE), "sensitivity", "--model", str(trained),
                                   "--algorithm", "l1_filter", "--threads", "2", "--json"])
                result = json.loads(out[out.index("{"):])
                table = {row["name"]: {str(round(float(s), 2)): m
                                       for s, m in row["metrics"].items()}
                         for row in result["layers"]}
            runs[side].append({"wall": wall, "seconds": result["seconds"], "table": table})
            print(f"round {r + 1} {side}: analysis {result['seconds']:.2f} s, process "
                  f"{wall:.2f} s", flush=True)
    worst = 0.0
    for run_nni, run_lithe in zip(runs["nni"], runs["lithe"]):
        for layer, row in run_nni["table"].items():
            for sparsity, value in row.items():
                worst = max(worst, abs(value - run_lithe["table"][layer][sparsity]))
    median = {side: {k: statistics.median(r[k] for r in runs[side]) for k in ("seconds", "wall")}
              for side in runs}
    print("| side | analysis (median) | whole process (median) |")
    print("|---|---|---|")
    for side in sides:
        print(f"| {side} | {median[side]['seconds']:.2f} s | {median[side]['wall']:.2f} s |")
    for peer in ("nni", "nni+pad"):
        print(f"{peer} / Lithe: analysis "
              f"{median[peer]['seconds'] / median['lithe']['seconds']:.2f}x, process "
              f"{median[peer]['wall'] / median['lithe']['wall']:.2f}x")
    print(f"largest |accuracy difference| between NNI and Lithe over every cell and round: "
          f"{worst:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
