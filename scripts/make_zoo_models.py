#!/usr/bin/env python3
"""Builds torchvision architectures as TorchScript files for the model zoo sweep (scripts/zoo.py).

Each model is built with random weights from a fixed seed, its BatchNorm statistics estimated on
4 random batches (so that activations keep their scale), put in eval mode and scripted; where
scripting fails it is traced on the sweep's input, and the manifest says so and why.
Segmentation models return a dict: they are wrapped so that forward returns its "out" tensor.

Usage: .venv/bin/python scripts/make_zoo_models.py OUT_DIR [--models a,b,...] [--size N]
       [--family classification|segmentation|video|all] [--list]
--list prints the names that would be built (with torchvision's parameter count) and builds
nothing.
Writes OUT_DIR/<model>.pt and OUT_DIR/manifest.json: [{"model", "family", "file", "input_shape",
"built": "scripted"|"traced", "note"}, ...]; a model that cannot be built at all is listed with
"built": "failed" and the reason.
Needs the .venv's torchvision (random weights only; nothing is downloaded).
"""
import argparse
import json
import os
import sys
import warnings

import torch
import torchvision
from torchvision import models

warnings.filterwarnings("ignore")

# Architectures whose input size is fixed by a positional table (ViT) or that need a minimum
# size larger than the sweep's default.
FIXED_SIZE = {"vit_b_16": 224, "vit_b_32": 224, "vit_l_16": 224, "vit_l_32": 224,
              "vit_h_14": 224, "maxvit_t": 224}
MIN_SIZE = {"inception_v3": 75, "s3d": 224}  # S3D ends in a 7x7 average pool at 1/32
# Video models: frames per clip (S3D's temporal kernels and MViT's fixed positional tables need
# 16; the others run on 8).
FRAMES = {"s3d": 16, "mvit_v1_b": 16, "mvit_v2_s": 16}
FIXED_SIZE.update({"mvit_v1_b": 224, "mvit_v2_s": 224})


class SegmentationOut(torch.nn.Module):
    """A segmentation model whose forward returns the "out" tensor of its result dict."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def family_models(family):
    module = {"classification": models, "segmentation": models.segmentation,
              "video": models.video}[family]
    return sorted(models.list_models(module=module))


def build(name, family):
    kwargs = {}
    if name in ("googlenet", "inception_v3"):
        # Their auxiliary heads only run in training; without them forward returns one tensor.
        kwargs = {"aux_logits": False, "init_weights": False}
    if family == "segmentation":
        kwargs = {"weights_backbone": None, "aux_loss": False}
    model = models.get_model(name, weights=None, **kwargs)
    if family == "segmentation":
        model = SegmentationOut(model)
    return model.eval()


def parameter_count(name):
    """The parameter count torchvision records for the architecture's weights (no download), or
    0 when it records none: the sweep runs small models first."""
    try:
        return list(models.get_model_weights(name))[0].meta.get("num_params", 0)
    except Exception:  # noqa: BLE001
        return 0


def fill_zero_layers(model):
    """torchvision initialises some classifier heads to zero (ViT's heads.head, MViT's): the
    model's output is then 0 whatever the input, and every parity check would pass trivially.
    Such weights get small random values instead (seeded like the rest)."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)) and \
                not m.weight.detach().any():
            torch.nn.init.normal_(m.weight, std=0.02)
    return model


def calibrate_batchnorm(model, shape):
    """Random weights leave every BatchNorm at mean 0, variance 1 while its real inputs are far
    from that, so activations shrink layer by layer (outputs near 1e-9): parity checks would
    compare noise. Re-estimate the statistics on 4 batches of random images, as BN recalibration
    after pruning does, so that activations keep their scale."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn([4] + shape[1:]))
    for m in norms:
        m.momentum = 0.1
    return model.eval()


def input_shape(name, family, size):
    if family == "video":
        size = FIXED_SIZE.get(name, max(size, MIN_SIZE.get(name, 0)))
        return [1, 3, FRAMES.get(name, 8), size, size]
    size = FIXED_SIZE.get(name, max(size, MIN_SIZE.get(name, 0)))
    return [1, 3, size, size]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--models", default="")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--family", default="all",
                        choices=["classification", "segmentation", "video", "all"])
    parser.add_argument("--list", action="store_true", help="only print the model names")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("LITHE_ZOO_THREADS", "2")))
    os.makedirs(args.out, exist_ok=True)
    families = ["classification", "segmentation", "video"] if args.family == "all" else [args.family]
    wanted = [m for m in args.models.split(",") if m]
    entries = []
    for family in families:
        for name in family_models(family):
            if wanted and name not in wanted:
                continue
            if args.list:
                print(name, parameter_count(name))
                continue
            shape = input_shape(name, family, args.size)
            entry = {"model": name, "family": family, "file": name + ".pt", "input_shape": shape,
                     "built": "failed", "note": "", "classifier": None}
            entries.append(entry)
            torch.manual_seed(0)
            try:
                model = calibrate_batchnorm(fill_zero_layers(build(name, family)), shape)
            except Exception as e:  # noqa: BLE001 - reported in the manifest
                entry["note"] = "cannot build: %s" % str(e).splitlines()[0]
                continue
            # The last Linear is the classifier: its outputs are the classes, which no filter
            # pruning should remove (the sweep excludes it, as NNI users do).
            linears = [n for n, m in model.named_modules() if type(m) is torch.nn.Linear]
            entry["classifier"] = linears[-1] if linears else None
            path = os.path.join(args.out, entry["file"])
            try:
                torch.jit.script(model).save(path)
                entry["built"] = "scripted"
            except Exception as e:  # noqa: BLE001
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                try:
                    with torch.no_grad():
                        torch.jit.trace(model, torch.randn(shape), check_trace=False).save(path)
                    entry["built"] = "traced"
                    entry["note"] = "torch.jit.script failed: %s" % reason
                except Exception as e2:  # noqa: BLE001
                    entry["note"] = "script: %s; trace: %s" % (reason, str(e2).splitlines()[0])
            print("%-32s %s %s" % (name, entry["built"], entry["note"][:100]), flush=True)
    if args.list:
        return 0
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(entries, f, indent=1)
    return 0 if all(e["built"] != "failed" for e in entries) else 1


if __name__ == "__main__":
    sys.exit(main())
