#!/usr/bin/env python3
"""Does a smaller model run as much faster as its FLOPs say? The zoo's CNNs at their real input
size (issue: real architectures; target: latency reduction >= 0.8 x FLOPs reduction).

Per model (torchvision architecture from scripts/make_zoo_models.py: random weights, seed 0,
BatchNorm statistics estimated, scripted) at 3x224x224 (Inception-v3 at 299), batch 1:
  lithe compress   l1_filter 0.5 on every Conv2d and Linear but the classifier, dependency_aware
  lithe speedup    for each thread count: the dense model (before masking) and the smaller one
                   timed in one process, alternating forwards, median of RUNS after warm-up
                   (no_grad)
Prints one Markdown row per model and thread count: FLOPs (NNI's default counter) and latency
before -> after, each reduction (1 - after/before), and latency reduction / FLOPs reduction.
Run it on an otherwise idle machine: two-thread timings on a busy 2-core machine are noise.

Usage: .venv/bin/python scripts/bench-zoo-latency.py [--lithe build/bin/lithe]
           [--models a,b,...] [--threads 1,2] [--runs 30] [--work build/bench-zoo-latency]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import zoo  # noqa: E402  (the sweep's config writing and filter types)

# A spread of the zoo's CNN families: plain, residual, grouped, dense, inception, depthwise
# (mobile), squeeze-and-excitation, RegNet.
MODELS = ["alexnet", "vgg16_bn", "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2",
          "densenet121", "googlenet", "inception_v3", "squeezenet1_1", "mobilenet_v2",
          "mobilenet_v3_large", "mnasnet1_0", "efficientnet_b0", "regnet_x_1_6gf",
          "regnet_y_1_6gf"]


def reduction(before, after):
    return 1.0 - after / before


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lithe", default=os.path.join(ROOT, "build/bin/lithe"))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--work", default=os.path.join(ROOT, "build/bench-zoo-latency"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",")]
    print("| model | threads | FLOPs before → after (reduction) | latency ms before → after "
          "(reduction) | latency red. ÷ FLOPs red. |")
    print("|---|---|---|---|---|")
    ratios = []
    for name in args.models.split(","):
        entry, model = zoo.build_one(args.work, name, 224)
        masked = os.path.join(args.work, name + ".masked.pt")
        masks = os.path.join(args.work, name + ".masks.pth")
        config = os.path.join(args.work, name + ".l1_filter.json")
        config_list = [{"sparsity": 0.5, "op_types": zoo.FILTER_TYPES}]
        if entry.get("classifier"):
            config_list.append({"exclude": True, "op_names": [entry["classifier"]]})
        zoo.write_config(config, "l1_filter", {"dependency_aware": True}, config_list)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        subprocess.run([args.lithe, "compress", "--model", model, "--config", config, "--output",
                        masked, "--masks", masks], check=True, capture_output=True, env=env)
        shape = ",".join(map(str, entry["input_shape"]))
        for t in threads:
            report_file = os.path.join(args.work, "%s.speedup.%d.json" % (name, t))
            # Before: the dense model, not the masked one (whose all-zero channels make max
            # pooling cheaper: GoogLeNet's masked model runs 20% faster than the dense one).
            subprocess.run([args.lithe, "speedup", "--model", masked, "--masks", masks,
                            "--dense-model", model, "--input-shape", shape, "--output",
                            os.path.join(args.work, name + ".small.pt"), "--json", report_file,
                            "--latency-runs", str(args.runs), "--warmup", "5", "--threads",
                            str(t)], check=True, capture_output=True,
                           env=dict(env, OMP_NUM_THREADS=str(t)))
            with open(report_file) as f:
                report = json.load(f)
            flops, latency = report["flops"], report["latency_ms"]
            flops_red = reduction(flops["before"], flops["after"])
            latency_red = reduction(latency["before"], latency["after"])
            ratios.append(latency_red / flops_red)
            print("| %s | %d | %.2f G → %.2f G (%.0f%%) | %.1f → %.1f (%.0f%%) | **%.2f** |" % (
                name, t, flops["before"] / 1e9, flops["after"] / 1e9, 100 * flops_red,
                latency["before"], latency["after"], 100 * latency_red, ratios[-1]), flush=True)
        for f in os.listdir(args.work):
            if f.startswith(name + ".") and not f.endswith(".json"):
                os.remove(os.path.join(args.work, f))
    print("\n%d of %d rows at least 0.8 (lowest %.2f)" % (
        sum(r >= 0.8 for r in ratios), len(ratios), min(ratios)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
