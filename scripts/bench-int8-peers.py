#!/usr/bin/env python3
"""Native int8 from NNI's ordinary config against the peers, in one process, alternating.

Usage: .venv/bin/python scripts/bench-int8-peers.py [--models resnet18,resnet50,mobilenet_v2]
       [--batches 1,16] [--runs 15] [--threads 2] [--lithe build/bin/lithe]
(peers: scripts/install-bench-peers.sh)

Per torchvision model (random weights; BatchNorm statistics from a few training-mode passes, so
that folding has something to fold):
- float: the TorchScript model;
- Lithe: `lithe compress` with qat and the ordinary config (weights + outputs of every Conv2d and
  Linear, NNI's own example) calibrated on 4 batches of 8 images, `--convert` with every default
  (BatchNorm folded, inputs on their calibrated ranges, engine auto); the int8 model loaded here
  by torch.jit.load; and the same config with per-channel symmetric weights (one more key);
- torch.ao FX (x86): prepare_fx / convert_fx with get_default_qconfig_mapping("x86"), calibrated on
  the same 32 images, scripted;
- ONNX Runtime: Lithe's float ONNX export quantized by onnxruntime.quantization.quantize_static
  (QDQ, per-channel int8 weights, uint8 activations, MinMax) on the same 32 images, run by ORT's
  CPU provider.
Every round runs each model per batch size in a rotating order, one untimed forward and two
timed ones (another runtime's spinning threads are not charged to the next); the table gives medians,
the ratio to float, the file size and two fidelity figures against the float model on 64 other
images (top-1 agreement, relative L2 error of the outputs). torchao's PT2E x86 flow needs
torch.compile (Inductor) to run int8 kernels at all, so it is not an eager peer here.
"""
import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch  # noqa: E402

from bench_models import torchvision_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDINARY = {"algorithm": "qat", "config_list": [
    {"quant_types": ["weight", "output"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}]}
# The same with the weight scheme oneDNN runs fastest (what torch.ao's x86 qconfig picks itself).
SYMMETRIC = {"algorithm": "qat", "config_list": [
    {"quant_types": ["weight", "output"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"],
     "quant_scheme": {"weight": "per_channel_symmetric"}, "quant_dtype": {"weight": "int"}}]}


def make_model(name, work):
    model = torchvision_model(name, passes=3, batch=8)
    path = os.path.join(work, name + ".pt")
    torch.jit.script(model).save(path)
    return model, path


def run(cmd):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit("failed: " + " ".join(cmd) + "\n" + done.stdout)
    return done.stdout


def lithe_int8(lithe, model_path, data, work, name, threads, config_json, tag):
    config = os.path.join(work, tag + ".json")
    with open(config, "w") as f:
        json.dump(config_json, f)
    q = os.path.join(work, f"{name}.{tag}.q.pt")
    int8 = os.path.join(work, f"{name}.{tag}.int8.pt")
    start = time.perf_counter()
    out = run([lithe, "compress", "--model", model_path, "--config", config, "--data", data,
               "--calibration-batches", "4", "--batch-size", "8", "--output", q,
               "--convert", int8, "--threads", str(threads), "--json"])
    seconds = time.perf_counter() - start
    summary = json.loads(out[out.index("{"):])["int8"]
    extra = {"lithe_quantized_engine": ""}
    torch.jit.load(int8, _extra_files=extra)
    engine = extra["lithe_quantized_engine"]
    torch.backends.quantized.engine = engine.decode() if isinstance(engine, bytes) else engine
    module = torch.jit.load(int8).eval()
    note = (f"{summary['int8_layers']} int8 layers, {len(summary['float_layers'])} float, "
            f"engine {summary['engine']}, compress+convert {seconds:.1f} s")
    return module, os.path.getsize(int8), note


def fx_int8(model, images, work, name):
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    torch.backends.quantized.engine = "x86"
    prepared = prepare_fx(copy.deepcopy(model).eval(), get_default_qconfig_mapping("x86"),
                          (images[:1],))
    with torch.no_grad():
        for i in range(0, len(images), 8):
            prepared(images[i:i + 8])
    scripted = torch.jit.script(convert_fx(prepared)).eval()
    path = os.path.join(work, name + ".fx.pt")
    scripted.save(path)
    return scripted, os.path.getsize(path), "x86 qconfig (reduce_range activations)"


class Ort:
    def __init__(self, paths, threads):
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.sessions = {b: ort.InferenceSession(p, options, providers=["CPUExecutionProvider"])
                         for b, p in paths.items()}

    def __call__(self, x):
        s = self.sessions[x.shape[0]]
        return torch.from_numpy(s.run(None, {s.get_inputs()[0].name: x.numpy()})[0])


def ort_int8(lithe, model_path, images, batches, work, name, threads):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self, input_name, batch):
            self.items = iter([{input_name: images[i:i + batch].numpy()}
                               for i in range(0, len(images), batch)])

        def get_next(self):
            return next(self.items, None)

    import onnx
    paths = {}
    for b in batches:
        fp = os.path.join(work, f"{name}.b{b}.onnx")
        run([lithe, "export-onnx", "--model", model_path, "--input-shape", f"{b},3,224,224",
             "--output", fp])
        qp = os.path.join(work, f"{name}.b{b}.int8.onnx")
        input_name = onnx.load(fp).graph.input[0].name
        quantize_static(fp, qp, Reader(input_name, b), quant_format=QuantFormat.QDQ,
                        per_channel=True, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QUInt8)
        paths[b] = qp
    return Ort(paths, threads), os.path.getsize(paths[batches[0]]), "QDQ, per-channel, MinMax"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lithe", default=os.path.join(ROOT, "build", "bin", "lithe"))
    parser.add_argument("--keep", action="store_true", help="keep the work folder (about 1 GB)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"torch {torch.__version__}, {args.threads} threads, {args.runs} rounds, medians")
    work = tempfile.mkdtemp(prefix="lithe-int8-peers-")
    try:
        run_all(args, batches, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run_all(args, batches, work):
    torch.manual_seed(1)
    images = torch.randn(32, 3, 224, 224)
    held_out = torch.randn(64, 3, 224, 224)
    data = os.path.join(work, "calibration.pt")
    torch.save({"images": images, "labels": torch.zeros(32, dtype=torch.long)}, data)
    print("| model | runtime | batch | ms | × float | file MB | × float | top-1 = float | "
          "rel. L2 vs float | notes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model, path = make_model(name, work)
        float_module = torch.jit.load(path).eval()
        runtimes = {"float": (float_module, os.path.getsize(path), "TorchScript")}
        runtimes["Lithe int8"] = lithe_int8(args.lithe, path, data, work, name, args.threads,
                                            ORDINARY, "ordinary")
        runtimes["Lithe int8, symmetric weights"] = lithe_int8(
            args.lithe, path, data, work, name, args.threads, SYMMETRIC, "symmetric")
        runtimes["torch.ao FX x86"] = fx_int8(model, images, work, name)
        runtimes["ONNX Runtime int8"] = ort_int8(args.lithe, path, images, batches, work, name,
                                                 args.threads)
        names = list(runtimes)
        times = {(n, b): [] for n in names for b in batches}
        inputs = {b: torch.randn(b, 3, 224, 224) for b in batches}
        with torch.no_grad():
            for n in names:  # warm up
                for b in batches:
                    for _ in range(2):
                        runtimes[n][0](inputs[b])
            for r in range(args.runs):
                order = names[r % len(names):] + names[:r % len(names)]
                for b in batches:
                    for n in order:
                        # One untimed forward first: the previous runtime's threads may still
                        # spin (ONNX Runtime's pool does by default) and would be charged here.
                        runtimes[n][0](inputs[b])
                        for _ in range(2):
                            start = time.perf_counter()
                            runtimes[n][0](inputs[b])
                            times[(n, b)].append((time.perf_counter() - start) * 1000)
            reference = torch.cat([float_module(held_out[i:i + 16]) for i in range(0, 64, 16)])
            fidelity = {}
            for n in names:
                fn = runtimes[n][0]
                b = 16 if 16 in batches else batches[0]
                out = torch.cat([fn(held_out[i:i + b]) for i in range(0, 64, b)])
                fidelity[n] = ((out.argmax(1) == reference.argmax(1)).float().mean().item(),
                               ((out - reference).norm() / reference.norm()).item())
        for b in batches:
            base = statistics.median(times[("float", b)])
            for n in names:
                ms = statistics.median(times[(n, b)])
                size = runtimes[n][1]
                agree, rel = fidelity[n]
                print(f"| {name} | {n} | {b} | {ms:.1f} | {ms / base:.2f} | {size / 1e6:.1f} | "
                      f"{size / runtimes['float'][1]:.2f} | {agree:.0%} | {rel:.3f} | "
                      f"{runtimes[n][2] if b == batches[0] else ''} |", flush=True)


if __name__ == "__main__":
    main()
