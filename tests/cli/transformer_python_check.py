#!/usr/bin/env python3
"""Today's transformers end to end on the real CLI: torchvision's ViT-B/16 and a stock
nn.TransformerEncoder (6 layers of 256 features, 8 heads), built with random weights and scripted
by the .venv's torch 2.x, whose code runs nn.MultiheadAttention's and TransformerEncoderLayer's
fused inference kernels (and calls scaled_dot_product_attention off them). Each is pruned (half of
every block's heads with transformer_head; the encoder also loses half of its feed-forward
channels with l1_filter), sped up, loaded back in plain Python, where it must compute what the
masked model computes with fewer parameters, and exported to ONNX, where ONNX Runtime must
compute the same. Usage: transformer_python_check.py LITHE MODEL.pt WORKDIR (MODEL unused)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime
import torch
import torchvision


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        self.head = torch.nn.Linear(256, 10)

    def forward(self, x):  # [N, L, 256]
        return self.head(self.encoder(x).mean(1))


def write_config(path, algorithm, config_list, options=None):
    with open(path, "w") as f:
        json.dump({"algorithm": algorithm, "options": options or {}, "config_list": config_list}, f)


def check(lithe, work, name, model, shape, configs):
    """Prunes `model` with each config in turn, speeds it up, checks it in Python and in ORT."""
    dense = os.path.join(work, f"{name}.pt")
    torch.jit.script(model.eval()).save(dense)
    current = dense
    for i, (algorithm, config_list, options) in enumerate(configs):
        config = os.path.join(work, f"{name}_{i}.json")
        write_config(config, algorithm, config_list, options)
        masked = os.path.join(work, f"{name}_masked{i}.pt")
        run(lithe, "compress", "--model", current, "--config", config, "--output", masked,
            "--masks", os.path.join(work, f"{name}_masks{i}.pth"))
        current = masked
    masks = [os.path.join(work, f"{name}_masks{i}.pth") for i in range(len(configs))]
    # The last mask file holds the last compression's masks; the masked model carries all.
    small = os.path.join(work, f"{name}_small.pt")
    report = os.path.join(work, f"{name}_report.json")
    dims = ",".join(str(d) for d in shape)
    run(lithe, "speedup", "--model", current, "--masks", masks[-1], "--dense-model", dense,
        "--input-shape", dims, "--output", small, "--json", report, "--latency-runs", "2",
        "--warmup", "1")
    with open(report) as f:
        result = json.load(f)
    if result["blocked"]:
        sys.exit(f"FAIL: {name}: speedup kept zeroed channels: {result['blocked']}")
    masked_model = torch.jit.load(current).eval()
    smaller = torch.jit.load(small).eval()
    before = sum(p.numel() for p in masked_model.parameters())
    after = sum(p.numel() for p in smaller.parameters())
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = masked_model(x)
        got = smaller(x)
    diff = (got - expected).abs().max().item()
    if diff > 1e-4 * max(1.0, expected.abs().max().item()) or after > 0.9 * before:
        sys.exit(f"FAIL: {name}: max |smaller - masked| = {diff}, parameters {before} -> {after}")
    onnx_file = os.path.join(work, f"{name}_small.onnx")
    run(lithe, "export-onnx", "--model", small, "--input-shape", dims, "--output", onnx_file)
    session = onnxruntime.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    ort = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    ort_diff = float(np.abs(ort - got.numpy()).max())
    if ort_diff > 1e-4 * max(1.0, expected.abs().max().item()):
        sys.exit(f"FAIL: {name}: ONNX Runtime differs from the smaller model by {ort_diff}")
    print(f"{name}: parameters {before} -> {after}, max |smaller - masked| = {diff:.3g}, "
          f"max |ORT - smaller| = {ort_diff:.3g}, FLOPs of every op ×"
          f"{result['flops_every_op']['ratio']:.3f}")


def main():
    lithe, _, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.manual_seed(0)
    vit = torchvision.models.vit_b_16()
    torch.nn.init.normal_(vit.heads.head.weight, std=0.02)  # torchvision zeroes it
    heads = [{"sparsity": 0.5, "op_types": ["MultiheadAttention"]}]
    check(lithe, work, "vit_b_16", vit, (1, 3, 224, 224),
          [("transformer_head", heads, {"head_hidden_dim": 64})])
    feed_forward = [{"sparsity": 0.5, "op_names": [f"encoder.layers.{i}.linear1"
                                                   for i in range(6)]}]
    check(lithe, work, "transformer_encoder", Encoder(), (2, 16, 256),
          [("transformer_head", heads, {"head_hidden_dim": 32}),
           ("l1_filter", feed_forward, None)])
    print("PASS: ViT-B/16 and nn.TransformerEncoder scripted by torch "
          f"{torch.__version__} prune, speed up and export with ONNX Runtime parity")


if __name__ == "__main__":
    main()
