#!/usr/bin/env python3
"""An int8 model written by `lithe convert` must load and run in plain Python (torch, no Lithe
library) and compute what it computed in C++ (the certificate's output on its first seeded
sample), with int8 kernels and int8 weights. Usage: convert_python_check.py LITHE MODEL.pt WORKDIR"""
import json
import os
import shutil
import subprocess
import sys

import torch


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def main():
    lithe, model, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    config = os.path.join(work, "lsq.json")
    # conv1 quantizes the float input; every layer its weight (symmetric: oneDNN) and output.
    with open(config, "w") as f:
        json.dump({"algorithm": "lsq", "config_list": [
            {"quant_types": ["input", "weight", "output"], "quant_bits": 8, "op_names": ["conv1"]},
            {"quant_types": ["weight", "output"], "quant_bits": 8,
             "op_names": ["conv2", "fc1", "fc2", "fc3"]}]}, f)
    quantized, int8, certificate = (os.path.join(work, n) for n in ("q.pt", "int8.pt", "cert.json"))
    run(lithe, "compress", "--model", model, "--config", config, "--output", quantized,
        "--calibration-batches", "2")
    run(lithe, "convert", "--model", quantized, "--input-shape", "4,1,28,28", "--output", int8,
        "--json", certificate, "--samples", "4", "--latency-runs", "2", "--warmup", "0")
    with open(certificate) as f:
        cert = json.load(f)
    if len(cert["int8_layers"]) != 5 or cert["float_layers"]:
        sys.exit(f"FAIL: expected 5 int8 layers and none in float: {cert['int8_layers']}, "
                 f"{cert['float_layers']}")

    torch.backends.quantized.engine = cert["engine"]
    loaded = torch.jit.load(int8).eval()
    if "quantized::conv2d_relu" not in str(loaded.graph) or not hasattr(loaded, "lithe_packed_conv1"):
        sys.exit("FAIL: the loaded model does not run quantized::conv2d_relu on packed weights")
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(cert["check"]["seed"]))
    with torch.no_grad():
        y = loaded(x).reshape(-1)[:1000]
    expected = torch.tensor(cert["check"]["first_output"])
    if y.shape != expected.shape:
        sys.exit(f"FAIL: Python output has {y.numel()} values, C++ {expected.numel()}")
    diff = (y - expected).abs().max().item()
    if diff != 0:
        sys.exit(f"FAIL: Python and C++ outputs differ by {diff}")
    size = os.path.getsize(int8) / os.path.getsize(quantized)
    if size > 0.35:
        sys.exit(f"FAIL: the int8 file is {size:.3f} of the quantized float file")
    print(f"PASS: the int8 model loads in Python ({cert['engine']}) and computes what C++ "
          f"computed (max |Python - C++| = {diff}); file {size:.3f} of the float file")


if __name__ == "__main__":
    main()
