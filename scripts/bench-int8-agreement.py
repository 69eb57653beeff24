#!/usr/bin/env python3
"""How closely the native int8 model follows the fake-quantized model (and ONNX Runtime on the
QDQ file) on *trained* torchvision architectures and real images: the conversion certificate of
`lithe convert --data` (issue: int8 + PTQ, "top-1 agreement with the fake-quantized model
>= 99% on >= 1,000 inputs").

Random-weight networks (bench-int8.py) are a weak measure of that: their logits are nearly tied,
so one grid step flips the top class. Here every architecture is trained on Fashion-MNIST first:

  models     torchvision's resnet18, resnet50 and mobilenet_v2 with 10 classes and a one-channel
             stem (the first convolution takes 1 channel instead of 3; every other layer is
             torchvision's), scripted, trained by lithe train for --epochs epochs on the first
             --train-images training images (seed 0, SGD lr 0.01) at 28x28
  PTQ        lithe compress qat with --calibration-batches 16 and no training, BatchNorm folded,
             the zoo's int8_config (per-channel symmetric int8 weights)
  certificate  lithe convert --data on the first --batches x 16 test images (default 63 x 16 =
             1,008), with --onnx and --onnxruntime when ONNX Runtime is installed in build/ort;
             then the same conversion on seeded random inputs (--samples 63 of 16), for contrast

--observers instead compares ptq's observers on each trained model (kept from an earlier run
in --work when there): the accuracy of the fake-quantized model (lithe compress's report on the
first 2,000 test images) with the same layers and grids as above, activations observed by
min_max, mse, percentile (99.9, 99.99) or kl, weights by min_max or mse.

Usage: .venv/bin/python scripts/bench-int8-agreement.py [--lithe build/bin/lithe]
           [--work build/bench-int8-agreement] [--epochs 1] [--train-images 60000]
           [--models resnet18,resnet50,mobilenet_v2] [--batches 63] [--threads 2] [--observers]
"""
import argparse
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from fashion_bench import add_common_arguments, fashion_idx, lithe  # noqa: E402
import zoo  # noqa: E402


def one_channel_model(name, path):
    """torchvision's `name` with 10 classes and a stem convolution taking one channel, scripted."""
    import torch
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    parent, attr = (model, "conv1") if hasattr(model, "conv1") else (model.features[0], "0")
    stem = getattr(parent, attr)
    setattr(parent, attr, torch.nn.Conv2d(1, stem.out_channels, stem.kernel_size, stem.stride,
                                          stem.padding, bias=stem.bias is not None))
    torch.jit.script(model).save(path)


def ort_library():
    """ONNX Runtime's C library inside this interpreter's onnxruntime wheel (.venv/)."""
    try:
        import onnxruntime
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(onnxruntime.__file__), "capi",
                        "libonnxruntime.so." + onnxruntime.__version__)
    return path if os.path.exists(path) else None


def main():
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "bench-int8-agreement")
    parser.set_defaults(epochs=1)
    parser.add_argument("--train-images", type=int, default=60000)
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    parser.add_argument("--batches", type=int, default=63)
    parser.add_argument("--observers", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731
    import torch
    train = w("train.pt")
    if not os.path.exists(train):
        n = args.train_images
        torch.save({"images": fashion_idx("train-images-idx3-ubyte", True)[:n].clone(),
                    "labels": fashion_idx("train-labels-idx1-ubyte", False)[:n].clone()}, train)
    if args.observers:
        return compare_observers(args, w, train)
    ort = ort_library()
    print("ONNX Runtime: %s\n" % (ort or "not installed (no onnxruntime in this Python; use .venv/bin/python): not compared"))
    print("| model | test images | float | fake-quant | int8 | int8 vs fake-quant | "
          "int8 vs ORT (QDQ) | on seeded random inputs: int8 vs fake-quant | time |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name in args.models.split(","):
        start = time.time()
        if os.path.exists(w(name + ".dense.pt")):
            os.remove(w(name + ".dense.pt"))  # the table's time column includes the training
        dense_model(args, w, name, train)
        config = w(name + ".int8.json")
        with open(config, "w") as f:
            json.dump(zoo.int8_config(w(name + ".dense.pt")), f)
        lithe(args, "compress", "--model", w(name + ".dense.pt"), "--config", config, "--output",
              w(name + ".ptq.pt"), "--data", train, "--test-data", zoo_test_data(w),
              "--calibration-batches", "16", "--fold-batchnorm")
        common = ["convert", "--model", w(name + ".ptq.pt"), "--input-shape", "16,1,28,28",
                  "--latency-runs", "5", "--output", w(name + ".int8.pt")]
        real = common + ["--data", "/usr/share/datasets/fashion-mnist", "--samples",
                         str(args.batches), "--json", w(name + ".cert.json")]
        if ort:
            real += ["--onnx", w(name + ".qdq.onnx"), "--onnxruntime", ort]
        lithe(args, *real)
        lithe(args, *(common + ["--samples", str(args.batches), "--json",
                                w(name + ".random.cert.json")]))
        with open(w(name + ".cert.json")) as f:
            cert = json.load(f)
        with open(w(name + ".random.cert.json")) as f:
            random_cert = json.load(f)
        rows.append((name, cert, random_cert, time.time() - start))
        print_row(*rows[-1])


def dense_model(args, w, name, train):
    """`name` trained as main() trains it; an earlier run's model in --work is kept."""
    if not os.path.exists(w(name + ".dense.pt")):
        one_channel_model(name, w(name + ".pt"))
        lithe(args, "train", "--model", w(name + ".pt"), "--data", train, "--test-data",
              zoo_test_data(w), "--epochs", str(args.epochs), "--output", w(name + ".dense.pt"))
    return w(name + ".dense.pt")


def compare_observers(args, w, train):
    settings = [("min_max", "min_max", None), ("min_max", "mse", None),
                ("min_max", "percentile", 99.9), ("min_max", "percentile", 99.99),
                ("min_max", "kl", None), ("mse", "percentile", 99.99), ("mse", "mse", None)]
    print("| model | float | qat calibration (zoo config) | " + " | ".join(
        "ptq: weights %s, activations %s%s" % (wo, ao, " %g" % p if p else "")
        for wo, ao, p in settings) + " |")
    print("|---" * (3 + len(settings)) + "|")
    for name in args.models.split(","):
        dense = dense_model(args, w, name, train)
        base = zoo.int8_config(dense)

        def quantized_accuracy(config, tag):
            path = w("%s.observers.%s.json" % (name, tag))
            with open(path, "w") as f:
                json.dump(config, f)
            out = lithe(args, "compress", "--model", dense, "--config", path, "--output",
                        w("%s.observers.%s.pt" % (name, tag)), "--data", train, "--test-data",
                        zoo_test_data(w), "--calibration-batches", "16", "--fold-batchnorm")
            found = re.search(r"test accuracy: ([0-9.]+) float, ([0-9.]+) quantized", out)
            return float(found.group(1)), float(found.group(2))

        float_accuracy, qat = quantized_accuracy(base, "qat")
        cells = []
        for i, (weight_observer, activation_observer, percentile) in enumerate(settings):
            config = json.loads(json.dumps(base))
            config["algorithm"] = "ptq"
            for entry in config["config_list"]:
                entry["observer"] = {t: weight_observer if t == "weight" else activation_observer
                                     for t in entry["quant_types"]}
                if percentile and entry["quant_types"] != ["weight"]:
                    entry["percentile"] = percentile
            cells.append(quantized_accuracy(config, "ptq%d" % i)[1])
        print("| %s | %.4f | %.4f | %s |" % (name, float_accuracy, qat, " | ".join(
            "%.4f (%+.2f pt)" % (c, 100 * (c - float_accuracy)) for c in cells)), flush=True)


def zoo_test_data(w):
    """The first 2,000 test images as a tensor file: lithe train's and compress's reports."""
    import torch
    path = w("test2000.pt")
    if not os.path.exists(path):
        torch.save({"images": fashion_idx("t10k-images-idx3-ubyte", True)[:2000].clone(),
                    "labels": fashion_idx("t10k-labels-idx1-ubyte", False)[:2000].clone()},
                   path)
    return path


def print_row(name, cert, random_cert, seconds):
    acc = cert["accuracy"]
    check = cert["check"]
    ort = cert["onnxruntime"]
    ort_text = ("max %.2g steps, top-1 %.1f%%, %.2f%% of outputs differ, accuracy %.4f" % (
        ort["max_diff_in_steps"], 100 * ort["top1_agreement"], 100 * ort["differing_outputs"],
        acc["onnxruntime"]) if "version" in ort else "not run")
    print("| %s | %d | %.4f | %.4f | %.4f | max %.2g steps, top-1 %.1f%% | %s | "
          "max %.2g steps, top-1 %.1f%% | %.0f s |" % (
              name, acc["images"], acc["float"], acc["fake_quantized"], acc["int8"],
              check["max_diff_in_steps"], 100 * check["top1_agreement"], ort_text,
              random_cert["check"]["max_diff_in_steps"],
              100 * random_cert["check"]["top1_agreement"], seconds), flush=True)


if __name__ == "__main__":
    main()
