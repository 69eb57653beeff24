#!/usr/bin/env python3
"""The int8 conversion certificate against ONNX Runtime (issue: int8 + PTQ): the native int8
model `lithe compress --convert` writes, and the QDQ ONNX file `--onnx` writes from the same
quantized model, run on the same test images, one run of this script:

  models    the bundled LeNet and the small ResNet of bench-int8-fashion.py (BatchNorm), trained
            here by lithe train for EPOCHS epochs (seed 0)
  quantize  lithe compress qat with --calibration-batches 16 (PTQ, no training), BatchNorm
            folded, the zoo's int8_config; one run writes the int8 TorchScript model
            (--convert, engine auto = x86) and the QDQ ONNX file (--onnx, opset 13, batch of N)
  compare   the first N test images through the int8 model (Python's torch.jit.load, as a
            server without Lithe would run it) and through ONNX Runtime (the onnxruntime wheel
            of the .venv, on the QDQ file); max |int8 - ORT| in steps of the
            classifier's output grid (its scale from the calibration JSON), the share of
            outputs that differ, top-1 agreement, and each side's test accuracy on the N images

Needs the project's Python (.venv/, scripts/install-deps.sh: torch and onnxruntime).

Usage: .venv/bin/python scripts/bench-int8-ort.py [--lithe build/bin/lithe]
           [--work build/bench-int8-ort] [--epochs 1] [--threads 2] [--images 1000]
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from fashion_bench import add_common_arguments, fashion_idx, lithe, trained_int8_candidates  # noqa: E402,E501


def main():
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "bench-int8-ort")
    parser.add_argument("--images", type=int, default=1000)
    args = parser.parse_args()
    import numpy as np
    import onnxruntime
    import torch
    torch.set_num_threads(args.threads)
    # The engine `--convert` picks by default (auto = x86) and records in the model: a loader
    # without Lithe must select it before loading, as the README says.
    torch.backends.quantized.engine = "x86"
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731

    images = fashion_idx("t10k-images-idx3-ubyte", True)[:args.images].contiguous()
    labels = fashion_idx("t10k-labels-idx1-ubyte", False)[:args.images]
    shape = ",".join(str(d) for d in images.shape)

    print("| model | images | int8 accuracy | ORT (QDQ) accuracy | top-1 agreement | "
          "max |int8 − ORT| (output steps) | outputs that differ |")
    print("|---|---|---|---|---|---|---|")
    for name, dense, config in trained_int8_candidates(args, w):
        lithe(args, "compress", "--model", dense, "--config", config, "--output",
              w(name + ".ptq.pt"), "--calibration-batches", "16", "--fold-batchnorm",
              "--convert", w(name + ".int8.pt"), "--onnx", w(name + ".qdq.onnx"),
              "--input-shape", shape)
        with open(w(name + ".ptq.calibration.json")) as f:
            layers = json.load(f)["layers"]
        classifier = list(layers)[-1]
        step = float(layers[classifier]["output"]["scale"])

        model = torch.jit.load(w(name + ".int8.pt"))
        model.eval()
        with torch.no_grad():
            int8 = model(images)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = onnxruntime.InferenceSession(w(name + ".qdq.onnx"), options,
                                               providers=["CPUExecutionProvider"])
        ort = session.run(None, {session.get_inputs()[0].name: images.numpy()})[0]
        ort = torch.from_numpy(np.asarray(ort, dtype=np.float32)).reshape(int8.shape)
        diff = (int8 - ort).abs()
        steps = float(diff.max()) / step
        differ = float((diff > step / 2).float().mean())
        agree = float((int8.argmax(1) == ort.argmax(1)).float().mean())
        acc_int8 = float((int8.argmax(1) == labels).float().mean())
        acc_ort = float((ort.argmax(1) == labels).float().mean())
        print(f"| {name} | {args.images} | {acc_int8:.4f} | {acc_ort:.4f} | {100 * agree:.1f}% | "
              f"{steps:.2f} | {100 * differ:.2f}% |")
    print(f"onnxruntime {onnxruntime.__version__}")


if __name__ == "__main__":
    main()
