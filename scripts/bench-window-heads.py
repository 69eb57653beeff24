#!/usr/bin/env python3
"""Half the attention heads of torchvision's window-attention transformers, removed (issue: real
architectures; BENCHMARKS.md, "Attention heads: Swin and MaxViT").

Per model (scripts/make_zoo_models.py: torchvision 0.14.1, random weights from seed 0,
scripted) at 1x3x224x224:
  lithe compress     transformer_head 0.5, head_hidden_dim 32, one config_list entry naming
                     every fused q, k, v Linear (Swin's attn.qkv, MaxViT's to_qkv) in op_names
  lithe speedup      --dense-model: the dense model and the smaller one timed alternately at
                     one thread (median of RUNS), parity against the masked model
  lithe export-onnx  opset 17, then ONNX Runtime (the .venv's onnxruntime) against torch on one
                     random input, as the zoo sweep checks it
Prints the speedup report's lines and the ORT verdict per model. Run it on an idle machine.

Usage: .venv/bin/python scripts/bench-window-heads.py [--lithe build/bin/lithe]
           [--models swin_t,swin_v2_t,maxvit_t] [--runs 30] [--work build/bench-window-heads]
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import zoo  # noqa: E402  (ORT parity as the sweep checks it)

# The fused projection's name ends with this in each family; every torchvision Swin and MaxViT
# uses heads of 32 channels.
QKV_SUFFIX = {"swin": "attn.qkv", "maxvit": "to_qkv"}
HEAD_DIM = 32


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lithe", default=os.path.join(ROOT, "build/bin/lithe"))
    parser.add_argument("--models", default="swin_t,swin_v2_t,maxvit_t")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--work", default=os.path.join(ROOT, "build/bench-window-heads"))
    args = parser.parse_args()
    import torch
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    failures = 0
    for name in args.models.split(","):
        entry, model = zoo.build_one(args.work, name, 224)
        shape = ",".join(map(str, entry["input_shape"]))
        suffix = QKV_SUFFIX[name.split("_")[0]]
        names = [n for n, _ in torch.jit.load(model).named_modules() if n.endswith(suffix)]
        base = os.path.join(args.work, name)
        zoo.write_config(base + ".heads.json", "transformer_head", {"head_hidden_dim": HEAD_DIM},
                         [{"sparsity": 0.5, "op_names": names}])
        subprocess.run([args.lithe, "compress", "--model", model, "--config",
                        base + ".heads.json", "--output", base + ".masked.pt", "--masks",
                        base + ".masks.pth"], check=True, capture_output=True, env=env)
        done = subprocess.run([args.lithe, "speedup", "--model", base + ".masked.pt", "--masks",
                               base + ".masks.pth", "--dense-model", model, "--input-shape",
                               shape, "--output", base + ".small.pt", "--threads", "1",
                               "--latency-runs", str(args.runs), "--warmup", "5"],
                              capture_output=True, text=True, env=env)
        print("%s: %d attentions, half their heads" % (name, len(names)), flush=True)
        if done.returncode != 0:
            print(done.stdout[-1000:] + done.stderr[-1000:])
            failures += 1
            continue
        for line in done.stdout.splitlines():
            if line.startswith(("kept", "check", "param", "FLOPs", "file", "latency")):
                print("  " + line, flush=True)
        done = subprocess.run([args.lithe, "export-onnx", "--model", base + ".small.pt",
                               "--input-shape", shape, "--output", base + ".small.onnx",
                               "--opset", "17"], capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-1000:] + done.stderr[-1000:])
            failures += 1
            continue
        ok, verdict = zoo.ort_parity(args.work, name + "_small", base + ".small.pt",
                                     base + ".small.onnx", tuple(entry["input_shape"]))
        print("  ONNX Runtime: %s" % verdict, flush=True)
        failures += 0 if ok else 1
        for f in os.listdir(args.work):
            if f.startswith(name + ".") and not f.endswith(".json"):
                os.remove(os.path.join(args.work, f))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
