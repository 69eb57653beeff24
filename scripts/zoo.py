#!/usr/bin/env python3
"""Model zoo sweep: every torchvision architecture through Lithe's stages, one Markdown row each.

Per model (built by scripts/make_zoo_models.py: random weights, fixed seed, eval mode):
  inspect   lithe inspect
  flops     lithe flops (NNI's default counter): parameters and FLOPs of the dense model
  level     lithe compress with level 0.5 on the default op types
  l1+speedup lithe compress with l1_filter 0.5 on every Conv1d/2d/3d and Linear but the
            classifier (the last Linear), dependency_aware, then
            lithe speedup: parameters and FLOPs after, the measured latency ratio against the
            dense model (--dense-model; median of alternating forwards in one process),
            max |smaller - masked| relative to the output,
            and every place a channel was kept with the op and the reason
  qat       (classification) lithe compress with qat (8-bit weights and outputs of every Conv2d
            and Linear) calibrated on 2 batches of random images, BatchNorm kept
            (--no-fold-batchnorm: the PyTorch rebuild below has NNI's unfolded layers), the QDQ
            ONNX written with it;
            ORT runs it against the fake-quantized model rebuilt in PyTorch from the saved state:
            max |Δ| in steps of the last quantized layer's output grid, within QDQ_STEPS or twice
            the model's own movement under a 1e-6 or 1e-5 relative input change ("own", steps)
  int8      (classification) NNI's ordinary config (qat, weights and outputs of every Conv2d and
            Linear) calibrated on 2 batches, then lithe convert, every option at its default
            (BatchNorm folded, inputs no int8 op makes quantized on their calibrated ranges,
            engine auto): layers that run int8, and the certificate (max |int8 - fake-quantized|
            in output grid steps, top-1 agreement, file and latency ratios); the stage must
            succeed (convert refuses a model with layers left in float), the figures are
            reported
  onnx      lithe export-onnx (opset 17) of the dense model, run in ONNX Runtime
            (the onnxruntime wheel in .venv/) against torch.jit.load's output on one
            random input: |ort - torch| <= max(1e-4·max|torch|, 2·float32's own error against
            float64 on that input) + 1e-3·|torch|
A stage that fails records its first error line; the sweep goes on with the next stage/model.

Usage:
  .venv/bin/python scripts/zoo.py [--lithe build/bin/lithe] [--work build/zoo]
      [--models a,b,...] [--family classification|segmentation|video|all] [--size 224]
      [--runs 20] [--output MODEL_ZOO.md] [--json zoo.json] [--require-pass] [--keep]
      [--resume] [--render]
--json is rewritten after every model; --resume skips the models it already holds (an
interrupted sweep goes on), --render only turns it into --output.
--require-pass exits 1 unless every model passes every stage (ONNX Runtime parity included:
without ORT it fails), shrinks with parity and keeps no channel but its output's (the CI subset
uses it). Threads: LITHE_ZOO_THREADS (default 2).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARITY = 1e-4  # max |smaller - masked| relative to the output's largest value
# Float ONNX against TorchScript: ORT fuses and sums in other orders; over 100+ layers float32
# drifts by a few 1e-4 of the output (PyTorch's own exporter checks with rtol 1e-3), so the bar
# is |ort - torch| <= max(ORT_ABS·max|torch|, 2·|torch32 - torch64|) + ORT_REL·|torch|: never
# tighter than twice float32's own error on that model and input.
ORT_ABS = 1e-4
ORT_REL = 1e-3
# QDQ in ONNX Runtime against the fake-quantized model: both round the same values, but in
# different float orders, so a value on a rounding boundary may land one step apart at some
# layer and the difference propagates. On a shallow net a wrong scale, zero point or a missing
# QDQ pair is off by far more than this many steps of the last layer's output grid; a deep net
# is allowed twice its own movement under relative input changes of SENSITIVITY (8 and 80
# float32 ulps: two runtimes' convolutions sum in different orders, which moves their results
# by about that much; a random 8-bit MobileNet-v2 moves 31 steps under 1e-6 already,
# EfficientNet-B0 and DenseNet-121 16-17 steps under 1e-5, ResNet-18 6 steps).
QDQ_STEPS = 4
SENSITIVITY = (1e-6, 1e-5)


def first_error(text):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for line in lines:
        if line.startswith("lithe: error") or "error" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "(no output)"


class Runner:
    def __init__(self, lithe, threads, timeout):
        self.lithe = lithe
        self.threads = threads
        self.timeout = timeout

    def lithe_run(self, *args):
        env = dict(os.environ, OMP_NUM_THREADS=str(self.threads), OPENBLAS_NUM_THREADS="1")
        try:
            done = subprocess.run([self.lithe, *args], capture_output=True, text=True,
                                  timeout=self.timeout, env=env)
        except subprocess.TimeoutExpired:
            return False, "timed out after %d s" % self.timeout
        if done.returncode != 0:
            return False, first_error(done.stderr + done.stdout)
        return True, done.stdout


# What l1_filter prunes in the sweep: every layer filter pruning takes, but the classifier.
FILTER_TYPES = ["Conv1d", "Conv2d", "Conv3d", "Linear"]


def write_config(path, algorithm, options, config_list):
    with open(path, "w") as f:
        json.dump({"algorithm": algorithm, "options": options, "config_list": config_list}, f)


def build_one(work, name, size):
    """One classification model built as the sweep builds it (scripts/make_zoo_models.py) at
    size x size; returns its manifest entry and the model file's path."""
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts/make_zoo_models.py"), work,
                    "--models", name, "--size", str(size), "--family", "classification"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(work, "manifest.json")) as f:
        entry = json.load(f)[0]
    return entry, os.path.join(work, entry["file"])


def ort_compare(work, name, onnx_path, x, y, absolute, relative):
    """Runs the ONNX file in ONNX Runtime (the onnxruntime wheel of this interpreter, in its own
    process so that a crash in ORT fails one stage, not the sweep) on x; it passes when every
    output value satisfies |ort - y| <= absolute + relative·|y|."""
    x_file = os.path.join(work, name + ".input.bin")
    y_file = os.path.join(work, name + ".expected.bin")
    x.numpy().astype("float32").tofile(x_file)
    y.numpy().astype("float32").tofile(y_file)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tests/host/onnx_runtime_run.py"),
                           onnx_path, x_file, ",".join(map(str, x.shape)), y_file,
                           "%.9g" % absolute, "%.9g" % relative],
                          capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines() or ["(no output)"]
    if done.returncode == 2:
        return None, lines[-1][:300]
    return done.returncode == 0, lines[-1][:300]


def first_tensor(y):
    """The first tensor of a tuple or dict output (ONNX's first output)."""
    import torch
    while not isinstance(y, torch.Tensor):
        y = next(v for v in (y.values() if isinstance(y, dict) else y) if v is not None)
    return y


def ort_parity(work, name, model_path, onnx_path, shape):
    """The float ONNX file in ORT against the TorchScript file in torch on one random input."""
    import torch
    torch.manual_seed(11)
    x = torch.randn(shape)
    module = torch.jit.load(model_path).eval()
    with torch.no_grad():
        y = first_tensor(module(x))
    # float32's own error on this model: the same forward in float64. Deep random nets drift by
    # ~1e-3 of their output in float32 alone (ResNet-152), which no exporter can beat.
    try:
        with torch.no_grad():
            y64 = first_tensor(module.double()(x.double()))
        drift = float((y.double() - y64).abs().max())
    except Exception:  # noqa: BLE001 - a model that cannot run in float64 keeps the bar
        drift = 0.0
    scale = float(y.abs().max())
    return ort_compare(work, name, onnx_path, x, y, max(ORT_ABS * scale, 2 * drift),
                       ORT_REL)


def fake_quantize(t, q):
    """NNI's fake quantization, scale·(round(clamp(t/scale + zp, qmin, qmax)) − zp); a scale
    with one value per output channel broadcasts over dimension 0."""
    scale, zero = q["scale"], q["zero_point"]
    if scale.numel() > 1:
        scale = scale.reshape([-1] + [1] * (t.dim() - 1))
        zero = zero.reshape([-1] + [1] * (t.dim() - 1))
    import torch
    return (torch.clamp(t / scale + zero, q["quant_min"], q["quant_max"]).round() - zero) * scale


def fake_quantized_model(entry, quantized_path):
    """The quantized model as Lithe saved it, rebuilt in eager PyTorch without Lithe: the
    architecture from make_zoo_models, the float weights and the `lithe_q_*` buffers (the SDK's
    convention, lithe/sdk/quantizer.h) from the saved TorchScript file. Every module with saved
    quantization state computes with its fake-quantized weight and fake-quantizes its input and
    output on every call, with the saved scale, zero point and range. This is what the QDQ file
    must compute; the saved TorchScript model itself runs in float (as NNI's export does: float
    weights plus the calibration), so it is no reference for the QDQ file."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import make_zoo_models
    model = make_zoo_models.build(entry["model"], entry["family"])
    saved = torch.jit.load(quantized_path).state_dict()
    # Tensor by tensor: load_state_dict runs per-class hooks (MNASNet's wants a version).
    with torch.no_grad():
        for key, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            tensor.copy_(saved[key])
    quantized = 0
    for module_name, module in model.named_modules():
        prefix = module_name + "." if module_name else ""
        if prefix + "lithe_q_identity" not in saved:
            continue
        quantized += 1

        def state(kind, prefix=prefix):
            if prefix + "lithe_q_%s_scale" % kind not in saved:
                return None
            return {key: saved[prefix + "lithe_q_%s_%s" % (kind, key)]
                    for key in ("scale", "zero_point", "quant_min", "quant_max")}
        weight, inputs, outputs = state("weight"), state("input"), state("output")
        if weight is not None:
            with torch.no_grad():
                module.weight.copy_(fake_quantize(module.weight, weight))
        if inputs is not None:
            module.register_forward_pre_hook(
                lambda m, args, q=inputs: (fake_quantize(args[0], q),) + tuple(args[1:]))
        if outputs is not None:
            module.register_forward_hook(lambda m, args, out, q=outputs: fake_quantize(out, q))
    return model.eval(), quantized


# Blocks whose output an int8 op writes: a residual sum (quantized::add_relu) or a clamped
# convolution (Conv-BN-ReLU6).
INT8_OUTPUT_BLOCKS = ["BasicBlock", "Bottleneck", "InvertedResidual", "Conv2dNormActivation"]


def int8_entry(types, names=None, op_types=None):
    scheme = {"input": "per_tensor_affine", "weight": "per_channel_symmetric",
              "output": "per_tensor_affine"}
    dtype = {"input": "uint", "weight": "int", "output": "uint"}
    e = {"quant_types": types, "quant_bits": 8,
         "quant_scheme": {t: scheme[t] for t in types}, "quant_dtype": {t: dtype[t] for t in types}}
    if names:
        e["op_names"] = names
    if op_types:
        e["op_types"] = op_types
    return e


def int8_config(model):
    """Weights of every Conv2d/Linear; outputs where an int8 op writes them: the blocks that
    return a sum or a clamped convolution, the convolutions no such block returns directly, and
    the classifier; the first layer and the classifier also quantize their inputs."""
    import torch
    m = torch.jit.load(model)
    modules = dict(m.named_modules())
    kinds = {name: mod.original_name for name, mod in modules.items()}
    convs = [n for n, k in kinds.items() if k in ("Conv2d", "Linear")]
    blocks = sorted({k for k in kinds.values() if k in INT8_OUTPUT_BLOCKS})

    def parent(n):
        return n[:n.rfind(".")] if "." in n else ""

    def own_output(n):
        if kinds.get(parent(n)) == "Conv2dNormActivation":
            return False  # the block returns it, clamped
        block = parent(parent(n))  # an inverted residual without a sum returns its projection
        return not (kinds.get(block) == "InvertedResidual" and
                    not modules[block].use_res_connect)

    first, last = convs[0], convs[-1]
    config = [int8_entry(["weight", "output"], names=[n for n in convs if own_output(n)])]
    weight_only = [n for n in convs if not own_output(n)]
    if weight_only:
        config.append(int8_entry(["weight"], names=weight_only))
    config.append(int8_entry(["input", "weight"] + (["output"] if own_output(first) else []),
                        names=[first]))
    config.append(int8_entry(["input", "weight", "output"], names=[last]))
    if blocks:
        config.append({"quant_types": ["output"], "quant_bits": 8, "op_types": blocks})
    return {"algorithm": "qat", "config_list": config}


def int8_stage(work, name, entry, model, runner, args, excluded):
    """Native int8 as a new user gets it: NNI's ordinary config (qat, weights and outputs of every
    Conv2d and Linear), post-training calibration, lithe convert with default options; reports
    how many layers run int8, the certificate (int8 against fake-quantized, in steps of the
    output grid; file and latency ratios). The layers the qat stage had to exclude (a parent
    that reads their weight instead of calling them) are excluded here too."""
    shape = entry["input_shape"]
    data = os.path.join(work, name + ".calibration_data.pt")  # written by qat_stage
    config = os.path.join(work, name + ".int8.json")
    config_list = [{"quant_types": ["weight", "output"], "quant_bits": 8,
                    "op_types": ["Conv2d", "Linear"]}]
    if excluded:
        config_list.append({"exclude": True, "op_names": excluded})
    write_config(config, "qat", {}, config_list)
    quantized = os.path.join(work, name + ".int8q.pt")
    ok, out = runner.lithe_run("compress", "--model", model, "--config", config,
                               "--calibration-batches", "2", "--batch-size", "4", "--data", data,
                               "--output", quantized)
    if not ok:
        return {"ok": False, "error": out}
    certificate = os.path.join(work, name + ".int8.certificate.json")
    ok, out = runner.lithe_run("convert", "--model", quantized, "--input-shape",
                               ",".join(map(str, shape)), "--output",
                               os.path.join(work, name + ".int8.pt"), "--json", certificate,
                               "--samples", "4", "--latency-runs", str(args.runs))
    if not ok:
        return {"ok": False, "error": out}
    with open(certificate) as f:
        cert = json.load(f)
    return {"ok": True, "error": None, "int8_layers": len(cert["int8_layers"]),
            "float_layers": len(cert["float_layers"]),
            "float_reasons": cert["float_layers"][:3], "int8_ops": len(cert["int8_ops"]),
            "steps": cert["check"].get("max_diff_in_steps"),
            "top1": cert["check"].get("top1_agreement"), "engine": cert["engine"],
            "file_ratio": cert["file_bytes"]["ratio"],
            "latency_ratio": cert["latency_ms"]["int8_ratio"]}


def qat_stage(work, name, entry, model, runner, args):
    """QAT post-training calibration (weights and outputs of every Conv2d and Linear at 8 bits,
    2 batches of random images) with the QDQ ONNX written alongside. ORT runs the QDQ file
    against the fake-quantized model rebuilt from the saved state (fake_quantized_model), and
    must agree within the larger of QDQ_STEPS steps of the last quantized layer's output grid and
    twice what the fake-quantized model itself moves when its input changes by a relative 1e-6
    or 1e-5 (SENSITIVITY): a deep quantized net is chaotic, one value that float rounding puts on the
    other side of a rounding boundary early on moves the output by tens of steps, in torch as in
    ORT."""
    import torch
    shape = entry["input_shape"]
    data = os.path.join(work, name + ".calibration_data.pt")
    torch.manual_seed(5)
    torch.save({"images": torch.randn([8] + shape[1:]), "labels": torch.zeros(8, dtype=torch.long)},
               data)
    quantized = os.path.join(work, name + ".qat.pt")
    qdq = os.path.join(work, name + ".qdq.onnx")
    # A layer whose parent reads its weight functionally instead of calling it (Swin's attention
    # passes qkv.weight to shifted_window_attention) cannot be quantized, and Lithe says which;
    # every layer of the model with the same name suffix is then excluded and the run repeated.
    config = os.path.join(work, name + ".qat.json")
    excluded, why = [], None
    while True:
        config_list = [{"quant_types": ["weight", "output"], "quant_bits": 8,
                        "op_types": ["Conv2d", "Linear"]}]
        if excluded:
            config_list.append({"exclude": True, "op_names": excluded})
        write_config(config, "qat", {}, config_list)
        ok, out = runner.lithe_run("compress", "--model", model, "--config", config,
                                   "--calibration-batches", "2", "--batch-size", "4", "--data",
                                   data, "--output", quantized, "--no-fold-batchnorm",
                                   "--onnx", qdq, "--input-shape",
                                   ",".join(map(str, shape)))
        marker = "never calls it as self."
        if ok or marker not in out or "module '" not in out or len(excluded) > 1000:
            break
        layer = out.split("module '")[1].split("'")[0]
        suffix = "." + layer.split(".")[-1]
        if "." in layer:
            suffix = "." + ".".join(layer.split(".")[-2:])
        names = [n for n, _ in torch.jit.load(model).named_modules()
                 if n == layer or n.endswith(suffix)]
        if layer in excluded or not names:
            break
        why = why or out.split("error: ")[-1][:200]
        excluded += [n for n in names if n not in excluded]
    result = {"ok": ok, "error": None if ok else out, "excluded": excluded, "excluded_why": why}
    if not ok:
        return result
    with open(os.path.join(work, name + ".qat.calibration.json")) as f:
        layers = json.load(f)["layers"]
    grids = [l["output"]["scale"] for l in layers.values() if "output" in l]
    step = grids[-1] if grids else 0.0
    try:
        reference, count = fake_quantized_model(entry, quantized)
        torch.manual_seed(11)
        x = torch.randn(shape)
        with torch.no_grad():
            y = first_tensor(reference(x))
            own = 0.0
            for seed, relative in enumerate(e for e in SENSITIVITY for _ in range(3)):
                noise = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
                moved = first_tensor(reference(x * (1 + relative * noise)))
                own = max(own, float((moved - y).abs().max()))
    except Exception as error:  # noqa: BLE001 - recorded: the sweep goes on
        result.update(ort=None, ort_detail="no fake-quantized reference: %r" % error)
        return result
    parity, detail = ort_compare(work, name + ".qat", qdq, x, y,
                                 max(QDQ_STEPS * step, 2 * own) * 1.0001, 0.0)
    steps = None
    if "max |ort - lithe| " in detail and step > 0:
        steps = float(detail.split("max |ort - lithe| ")[1].split(",")[0]) / step
    result.update(ort=parity, ort_detail=detail, step=step, steps=steps, layers=count,
                  own_steps=own / step if step > 0 else None)
    return result


def sweep_model(entry, args, runner, work):
    name = entry["model"]
    row = {"model": name, "family": entry["family"], "built": entry["built"],
           "build_note": entry["note"], "input_shape": entry["input_shape"], "stages": {}}
    if entry["built"] == "failed":
        return row
    model = os.path.join(work, entry["file"])
    shape = ",".join(map(str, entry["input_shape"]))
    stages = row["stages"]

    ok, out = runner.lithe_run("inspect", "--model", model)
    stages["inspect"] = {"ok": ok, "error": None if ok else out}

    ok, out = runner.lithe_run("flops", "--model", model, "--input-shape", shape, "--json",
                               "--threads", str(args.threads))
    stages["flops"] = {"ok": ok, "error": None if ok else out}
    if ok:
        report = json.loads(out)
        stages["flops"].update(flops=report["total_flops"], params=report["total_params"])

    level_cfg = os.path.join(work, "level.json")
    ok, out = runner.lithe_run("compress", "--model", model, "--config", level_cfg,
                               "--output", os.path.join(work, name + ".level.pt"))
    stages["level"] = {"ok": ok, "error": None if ok else out}

    masked = os.path.join(work, name + ".masked.pt")
    masks = os.path.join(work, name + ".masks.pth")
    l1_cfg = os.path.join(work, name + ".l1_filter.json")
    config_list = [{"sparsity": 0.5, "op_types": FILTER_TYPES}]
    if entry.get("classifier"):
        config_list.append({"exclude": True, "op_names": [entry["classifier"]]})
    write_config(l1_cfg, "l1_filter", {"dependency_aware": True}, config_list)
    ok, out = runner.lithe_run("compress", "--model", model, "--config", l1_cfg, "--output",
                               masked, "--masks", masks)
    stages["l1_filter"] = {"ok": ok, "error": None if ok else out}
    if ok:
        report_file = os.path.join(work, name + ".speedup.json")
        # The dense model is the latency baseline: the masked one's zeroed channels make
        # max pooling cheaper than it is before pruning.
        ok, out = runner.lithe_run("speedup", "--model", masked, "--masks", masks,
                                   "--dense-model", model, "--input-shape", shape, "--output",
                                   os.path.join(work, name + ".small.pt"), "--json", report_file,
                                   "--latency-runs", str(args.runs), "--warmup", "3",
                                   "--threads", str(args.threads))
        stages["speedup"] = {"ok": ok, "error": None if ok else out}
        if ok:
            with open(report_file) as f:
                report = json.load(f)
            reference = report.get("reference_max_abs") or 1.0
            stages["speedup"].update(
                params=report["params"], flops=report["flops"], latency=report["latency_ms"],
                flops_every_op=report.get("flops_every_op", {}),
                max_abs_diff=report["max_abs_diff_without_bn_shift"],
                relative_diff=report["max_abs_diff_without_bn_shift"] / max(reference, 1e-30),
                blocked=report["blocked"])

    if entry["family"] == "classification":
        stages["qat"] = qat_stage(work, name, entry, model, runner, args)
        stages["int8"] = int8_stage(work, name, entry, model, runner, args,
                                    stages["qat"].get("excluded") or [])

    onnx_file = os.path.join(work, name + ".onnx")
    ok, out = runner.lithe_run("export-onnx", "--model", model, "--input-shape", shape,
                               "--output", onnx_file, "--opset", "17")
    stages["onnx"] = {"ok": ok, "error": None if ok else out}
    if ok:
        parity, detail = ort_parity(work, name, model, onnx_file, entry["input_shape"])
        stages["onnx"].update(ort=parity, ort_detail=detail)
    return row


def inner_blocks(speedup):
    """Kept channels other than the model output's (a classifier pruned with every Conv2d keeps
    its classes: that is correct, not a failure to shrink)."""
    return [b for b in speedup["blocked"] if b["where"] != "model output"]


def passed(row, need_ort=False):
    stages = row["stages"]
    if row["built"] == "failed" or not stages:
        return False
    for key in ("inspect", "flops", "level", "l1_filter", "speedup", "onnx"):
        if not stages.get(key, {}).get("ok"):
            return False
    sp = stages["speedup"]
    ort = stages["onnx"].get("ort")
    qat = stages.get("qat")  # classification models only
    qat_ort = True if qat is None else qat.get("ort")
    int8 = stages.get("int8")  # classification models, in sweeps since the int8 stage exists
    return (not inner_blocks(sp) and sp["relative_diff"] <= PARITY and
            (qat is None or qat.get("ok")) and (int8 is None or int8.get("ok")) and
            all(v is True or (v is None and not need_ort) for v in (ort, qat_ort)))


def ratio(d):
    return "%.2f" % d["ratio"] if "ratio" in d else "—"


def mega(n):
    return "%.1f M" % (n / 1e6) if n >= 1e5 else "%.2f M" % (n / 1e6)


def giga(n):
    return "%.2f G" % (n / 1e9) if n >= 1e8 else "%.1f M" % (n / 1e6)


def summary_lines(rows):
    """Counts for the head of MODEL_ZOO.md."""
    def ok(row, stage):
        return row["stages"].get(stage, {}).get("ok", False)
    shrunk = [r for r in rows if ok(r, "speedup") and r["stages"]["speedup"]["relative_diff"] <= PARITY
              and r["stages"]["speedup"]["params"]["after"] < r["stages"]["speedup"]["params"]["before"]]
    full = [r for r in shrunk if not inner_blocks(r["stages"]["speedup"])]
    onnx = [r for r in rows if ok(r, "onnx") and r["stages"]["onnx"].get("ort") is True]
    every = [r for r in rows if passed(r, True)]
    qat_run = [r for r in rows if "qat" in r["stages"]]
    qat_ok = [r for r in qat_run if ok(r, "qat")]
    qat_close = [r for r in qat_ok if r["stages"]["qat"].get("ort") is True]
    return ["- %d models swept; %d pass every stage with nothing kept "
            "but the classifier's outputs" % (len(rows), len(every)),
            "- %d shrink with parity (max |Δ| ≤ %g of the output's largest value); %d of them "
            "with no channel kept anywhere else, the others keep channels for the reasons listed"
            % (len(shrunk), PARITY, len(full)),
            "- %d export to ONNX (opset 17) and agree with ONNX Runtime" % len(onnx),
            "- QAT calibration + QDQ export: %d of %d quantize and export; %d of them agree with "
            "ONNX Runtime (within %d steps of the last layer's output grid, or twice the model's "
            "own movement under a relative input change of %s)"
            % (len(qat_ok), len(qat_run), len(qat_close), QDQ_STEPS,
               " or ".join("%g" % e for e in SENSITIVITY))]


def markdown(rows, args):
    out = summary_lines(rows) + ["", "| model | built | input | params before → after | FLOPs before → after "
           "| latency ratio | max \\|Δ\\| rel. | level | ONNX (ORT) | QAT → QDQ (ORT) "
           "| kept channels: op and reason |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        st = row["stages"]
        cells = [row["model"], row["built"], "×".join(map(str, row["input_shape"][1:]))]
        sp = st.get("speedup", {})
        fl = st.get("flops", {})
        if sp.get("ok"):
            cells.append("%s → %s (%s)" % (mega(sp["params"]["before"]),
                                           mega(sp["params"]["after"]), ratio(sp["params"])))
            flops = sp["flops"]
            every = sp.get("flops_every_op") or {}
            cells.append("%s → %s (%s%s)" % (giga(flops["before"]), giga(flops["after"]),
                                             ratio(flops), "; every op %s" % ratio(every)
                                             if "ratio" in every else "") if "before" in flops
                         else "not counted: " + flops.get("error", "")[:80])
            cells.append(ratio(sp["latency"]))
            cells.append("%.1e" % sp["relative_diff"])
        else:
            cells.append(mega(fl["params"]) if fl.get("ok") else "—")
            cells.append(giga(fl["flops"]) if fl.get("ok") else
                         "flops: " + str(fl.get("error", ""))[:80])
            cells.append("—")
            cells.append("—")
        cells.append("ok" if st.get("level", {}).get("ok") else
                     "fails: " + str(st.get("level", {}).get("error", row["build_note"]))[:80])
        onnx = st.get("onnx", {})
        if onnx.get("ok"):
            cells.append({True: "ok", False: "**ORT differs**: ", None: "exported (ORT not run): "}
                         [onnx.get("ort")] + ("" if onnx.get("ort") else onnx.get("ort_detail", "")[:80]))
        else:
            cells.append("fails: " + str(onnx.get("error", row["build_note"]))[:100])
        qat = st.get("qat")
        if qat is None:
            cells.append("—")
        elif qat.get("ok"):
            steps, own = qat.get("steps"), qat.get("own_steps")
            measured = ("max %.2f steps" % steps if steps is not None else "") + \
                ("; own %.2f" % own if own is not None else "")
            if qat.get("excluded"):
                measured += "; %d layers not quantized, e.g. %s: its parent reads the weight " \
                    "and never calls the layer" % (len(qat["excluded"]), qat["excluded"][0])
            cells.append({True: "ok (%s)" % measured, False: "**ORT differs** (%s)" % measured,
                          None: "written (ORT not run: %s)" % str(qat.get("ort_detail"))[:60]}
                         [qat.get("ort")])
        else:
            cells.append("fails: " + str(qat.get("error"))[:100])
        notes = []
        if not row["stages"]:
            notes.append(row["build_note"])
        elif not st.get("l1_filter", {}).get("ok"):
            notes.append("compress fails: " + str(st["l1_filter"]["error"])[:160])
        elif not sp.get("ok"):
            notes.append("speedup fails: " + str(sp.get("error"))[:160])
        else:
            seen = set()
            for b in sp["blocked"]:
                key = (b["where"].split(":")[-1].strip() if ":" in b["where"] else b["where"],
                       b["reason"])
                if key not in seen:
                    seen.add(key)
                    notes.append("%s (%s)" % (b["where"][:70], b["reason"][:90]))
            if len(notes) > 3:
                notes = notes[:3] + ["and %d more" % (len(seen) - 3)]
        cells.append("; ".join(notes).replace("|", "\\|") or "—")
        out.append("| " + " | ".join(c.replace("\n", " ") for c in cells) + " |")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lithe", default=os.path.join(ROOT, "build/bin/lithe"))
    parser.add_argument("--work", default=os.path.join(ROOT, "build/zoo"))
    parser.add_argument("--models", default="")
    parser.add_argument("--family", default="all")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("LITHE_ZOO_THREADS", "2")))
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--output", default="")
    parser.add_argument("--json", default="")
    parser.add_argument("--require-pass", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep each model's files")
    parser.add_argument("--resume", action="store_true",
                        help="with --json: skip the models that file already has")
    parser.add_argument("--render", action="store_true",
                        help="with --json: only write --output from that file")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    # One model at a time: built, swept, and (without --keep) its files removed, so that the
    # whole zoo never needs more disk than its largest model.
    build = [sys.executable, os.path.join(ROOT, "scripts/make_zoo_models.py"), "--list",
             "--family", args.family]
    if args.models:
        build += ["--models", args.models]
    listed = subprocess.run(build + [args.work], check=True, capture_output=True,
                            text=True).stdout.splitlines()
    # Smallest first: an interrupted sweep (--resume goes on) has covered the most models.
    names = [n for n, _ in sorted((line.split() for line in listed if line.strip()),
                                  key=lambda item: int(item[1]))]
    write_config(os.path.join(args.work, "level.json"), "level", {},
                 [{"sparsity": 0.5, "op_types": ["default"]}])
    runner = Runner(args.lithe, args.threads, args.timeout)
    rows = []
    if (args.resume or args.render) and args.json and os.path.exists(args.json):
        with open(args.json) as f:
            rows = json.load(f)
        done = {r["model"] for r in rows}
        names = [n for n in names if n not in done]
    if args.render:
        names = []
    for name in names:
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/make_zoo_models.py"),
                        args.work, "--models", name, "--size", str(args.size), "--family",
                        args.family], check=False, stdout=subprocess.DEVNULL)
        with open(os.path.join(args.work, "manifest.json")) as f:
            entry = json.load(f)[0]
        start = time.time()
        row = sweep_model(entry, args, runner, args.work)
        row["seconds"] = round(time.time() - start, 1)
        rows.append(row)
        if args.json:  # after every model: an interrupted sweep keeps what it measured
            with open(args.json + ".tmp", "w") as f:
                json.dump(rows, f, indent=1)
            os.replace(args.json + ".tmp", args.json)
        if not args.keep:
            for f in os.listdir(args.work):
                if f.startswith(name + ".") and not f.endswith(".json"):
                    os.remove(os.path.join(args.work, f))
        ok = passed(row, args.require_pass)
        print("%-34s %-5s %6.1fs" % (entry["model"], "PASS" if ok else "FAIL", row["seconds"]),
              flush=True)
        if not ok:
            for stage, result in row["stages"].items():
                if not result.get("ok"):
                    print("    %s: %s" % (stage, result.get("error")), flush=True)
            sp = row["stages"].get("speedup", {})
            for b in sp.get("blocked", [])[:3]:
                print("    kept %d channel(s) at %s: %s" % (b["channels"], b["where"], b["reason"]))
            if sp.get("ok") and sp["relative_diff"] > PARITY:
                print("    parity: relative difference %.2e" % sp["relative_diff"])
            if row["stages"].get("onnx", {}).get("ok") and not row["stages"]["onnx"].get("ort"):
                print("    ORT: %s" % row["stages"]["onnx"]["ort_detail"])
            qat = row["stages"].get("qat", {})
            if qat.get("ok") and not qat.get("ort"):
                print("    QDQ ORT: %s" % qat.get("ort_detail"))
            if row["built"] == "failed":
                print("    build: %s" % row["build_note"])
    table = markdown(rows, args)
    good = sum(passed(r, args.require_pass) for r in rows)
    summary = "%d of %d models pass every required stage" % (good, len(rows))
    print(summary)
    if args.json and not args.render:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.output:
        with open(args.output, "w") as f:
            f.write(table + "\n")
    return 0 if good == len(rows) or not args.require_pass else 1


if __name__ == "__main__":
    sys.exit(main())
