#!/usr/bin/env python3
"""Native int8 models against float, and against torch.ao's int8 models, measured side by side
(issue: int8 + PTQ). Per model (torchvision architecture from scripts/make_zoo_models.py: random
weights, seed 0, BatchNorm statistics estimated, scripted; 3x224x224; or `lenet`, the bundled
Fashion-MNIST LeNet, samples/models/lenet.pt, 1x28x28):

  lithe compress   qat post-training calibration with --fold-batchnorm: per-channel symmetric
                   int8 weights, uint8 outputs of every Conv2d/Linear and of the blocks that
                   return a sum (BasicBlock, Bottleneck, InvertedResidual) or a clamped
                   convolution (Conv2dNormActivation); the first layer and the classifier also
                   quantize their inputs
  lithe convert    the int8 model and its certificate (int8 against fake-quantized, file sizes)
  torch.ao         the same float model through FX prepare (the engine's default qconfig), the
                   same calibration batches, convert, scripted
  engine           --engine onednn (default) or qnnpack: Lithe's convert and torch.ao's
                   qconfig and runtime use the same one (qnnpack: with OMP_WAIT_POLICY=PASSIVE,
                   see below)
  timing           one Python process: the float model, Lithe's int8 model (loaded with
                   torch.jit.load: no Lithe) and torch.ao's, alternating forwards, median of RUNS
                   after warm-up, no_grad, at each batch size and thread count

Run it on an otherwise idle machine. Usage: .venv/bin/python scripts/bench-int8.py
  [--lithe build/bin/lithe] [--models resnet18,resnet50,mobilenet_v2] [--batches 1,16]
  [--threads 2] [--runs 20] [--work build/bench-int8] [--engine onednn]
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import zoo  # noqa: E402  (int8_config: the quantization config of the zoo's int8 stage)


def median_ms(fn, x, runs):
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(x)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lithe", default=os.path.join(ROOT, "build/bin/lithe"))
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--threads", default="2")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--work", default=os.path.join(ROOT, "build/bench-int8"))
    parser.add_argument("--engine", default="onednn", choices=["onednn", "qnnpack"])
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if args.engine == "qnnpack":
        # QNNPACK runs on its own thread pool. With OpenMP's default busy-waiting, its threads
        # and OpenMP's spin against each other on the same cores when models alternate: the model
        # timed after the other kind's runs up to 50 times slower. Passive waiting is fair to all.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    torch.backends.quantized.engine = args.engine

    print("| model | batch | threads | float ms | Lithe int8 ms (ratio) | torch.ao int8 ms (ratio) "
          "| Lithe file (ratio) | torch.ao file (ratio) | int8 vs fake-quant |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        sample = (1, 28, 28) if name == "lenet" else (3, 224, 224)
        if name == "lenet":
            model = os.path.join(ROOT, "samples/models/lenet.pt")
        else:
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts/make_zoo_models.py"),
                            args.work, "--models", name, "--size", "224", "--family",
                            "classification"], check=True, stdout=subprocess.DEVNULL)
            model = os.path.join(args.work, name + ".pt")
        torch.manual_seed(7)
        calibration = torch.randn(32, *sample)
        data = os.path.join(args.work, name + ".calibration_data.pt")
        torch.save({"images": calibration, "labels": torch.zeros(32, dtype=torch.long)}, data)
        config = os.path.join(args.work, name + ".int8.json")
        with open(config, "w") as f:
            json.dump(zoo.int8_config(model), f, indent=1)
        quantized = os.path.join(args.work, name + ".q.pt")
        int8 = os.path.join(args.work, name + ".int8.pt")
        certificate = os.path.join(args.work, name + ".certificate.json")
        subprocess.run([args.lithe, "compress", "--model", model, "--config", config,
                        "--output", quantized, "--calibration-batches", "4", "--batch-size", "8",
                        "--data", data, "--fold-batchnorm"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([args.lithe, "convert", "--model", quantized, "--input-shape",
                        ",".join(map(str, (16,) + sample)), "--output", int8, "--json", certificate, "--samples", "63",
                        "--latency-runs", "1", "--warmup", "0",
                        "--engine", args.engine], check=True,
                       stdout=subprocess.DEVNULL)
        with open(certificate) as f:
            cert = json.load(f)
        check = cert["check"]
        agreement = "%d float layers; max %.1f steps, top-1 %.1f%% of %d" % (
            len(cert["float_layers"]), check.get("max_diff_in_steps", float("nan")),
            100 * check.get("top1_agreement", float("nan")), check.get("top1_rows", 0))

        float_model = torch.jit.load(model).eval()
        # FX needs the nn.Module: the same architecture, the same weights.
        if name == "lenet":
            import make_sample_models
            eager = make_sample_models.LeNet().eval()
        else:
            import torchvision
            eager = getattr(torchvision.models, name)().eval()
        eager.load_state_dict(float_model.state_dict())
        ao = prepare_fx(copy.deepcopy(eager), get_default_qconfig_mapping(args.engine),
                        (calibration[:1],))
        with torch.no_grad():
            for i in range(4):
                ao(calibration[i * 8:(i + 1) * 8])
        ao = torch.jit.script(convert_fx(ao)).eval()
        ao_file = os.path.join(args.work, name + ".torch_ao.pt")
        torch.jit.save(ao, ao_file)
        lithe_int8 = torch.jit.load(int8).eval()
        float_bytes = os.path.getsize(model)

        for threads in map(int, args.threads.split(",")):
            torch.set_num_threads(threads)
            for batch in map(int, args.batches.split(",")):
                x = torch.randn(batch, *sample)
                models = [float_model, lithe_int8, ao]
                with torch.no_grad():
                    for m in models:  # warm-up, the profiling executor's runs included
                        for _ in range(3):
                            m(x)
                    samples = [[] for _ in models]
                    for r in range(args.runs):
                        order = range(3) if r % 2 == 0 else reversed(range(3))
                        for k in order:
                            samples[k].append(median_ms(models[k], x, 1))
                ms = [statistics.median(s) for s in samples]
                digits = 3 if ms[0] < 10 else 1  # LeNet's forwards take a tenth of a ms
                print(("| %s | %d | %d | %.{0}f | %.{0}f (%.2f) | %.{0}f (%.2f) | %.2f MB (%.2f) | "
                       "%.2f MB (%.2f) | %s |").format(digits) % (
                          name, batch, threads, ms[0], ms[1], ms[1] / ms[0], ms[2], ms[2] / ms[0],
                          os.path.getsize(int8) / 1e6, os.path.getsize(int8) / float_bytes,
                          os.path.getsize(ao_file) / 1e6, os.path.getsize(ao_file) / float_bytes,
                          agreement), flush=True)


if __name__ == "__main__":
    main()
