#!/usr/bin/python3
"""Regenerates the seed corpus of the libFuzzer harnesses (tests/fuzz/corpus/<harness>/).

Run with Debian's interpreter, which has torch 1.13 (python3-torch):
    /usr/bin/python3 tests/fuzz/make_corpus.py
The outputs are committed; the build never runs this script. Every file is deterministic
(fixed seeds, gzip mtime 0, PYTHONHASHSEED=0) and small (< 30 KB), so regenerating gives the same bytes.

Layouts:
  config/       JSON text of a `lithe compress` config (samples/configs/ plus edge cases)
  masks/        torch.save of {layer: {"weight": T, "bias": T or None}} (NNI's mask.pth)
  tensor_file/  torch.save of {"images": T, "labels": T}
  idx/          [uint32 little-endian n][uint8 flags][n bytes: images file][rest: labels file]
                flags bit 0: images file named *.gz, bit 1: labels file named *.gz,
                bit 2: split "test" instead of "train" (the bytes decide gzip or plain)
  archive/      TorchScript archives (torch.jit.save) and torch.save files
"""
import gzip
import io
import os
import shutil
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def write(harness, name, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    path = os.path.join(CORPUS, harness, name)
    with open(path, "wb") as f:
        f.write(data)
    assert len(data) < 30 * 1024, (path, len(data))


def saved(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def configs():
    source = os.path.join(REPO, "samples", "configs")
    for name in sorted(os.listdir(source)):
        if name.endswith(".json"):
            with open(os.path.join(source, name), "rb") as f:
                write("config", "sample_" + name, f.read())
    write("config", "minimal.json", '{"algorithm":"level","config_list":[]}')
    write("config", "options_all_types.json",
          '{"algorithm": "agp", "options": {"sparsity": 0.5, "epochs": 3, "dependency_aware": true,'
          ' "name": "x", "steps": [1, 2, 3], "weights": [0.5, 1e-3], "layers": ["a", "b"],'
          ' "nested": {"inner": {"k": null}}},'
          ' "config_list": [{"sparsity": 0.8, "op_types": ["default"]},'
          ' {"exclude": true, "op_names": ["fc"]}]}')
    write("config", "op_names_types.json",
          '{"algorithm":"level","config_list":[{"sparsity":0.5,"op_types":["Conv2d"],'
          '"op_names":["conv1","conv2"]},{"sparsity":0.25,"op_types":["Linear","BatchNorm2d"]},'
          '{"exclude":false,"op_names":["fc"]}]}')
    write("config", "escapes.json",
          '{"algorithm":"l\\u0065vel","options":{"a~b/c":1,"\\u00e9\\ud83d\\ude00":"\\n\\t"},'
          '"config_list":[{"sparsity":1e-308,"op_types":["default"]}]}')
    write("config", "numbers.json",
          '{"algorithm":"level","options":{"big":1e308,"neg":-0.0,"int":9223372036854775807,'
          '"uint":18446744073709551615,"frac":0.1},"config_list":[{"sparsity":-1}]}')
    write("config", "duplicate_key.json",
          '{"algorithm":"level","algorithm":"agp","config_list":[]}')
    write("config", "deep.json",
          '{"algorithm":"level","config_list":[],"options":{"x":' + "[" * 62 + "]" * 62 + "}}")
    write("config", "unknown_key.json", '{"algorithm":"level","config_list":[],"extra":1}')
    write("config", "not_object.json", '[{"algorithm":"level"}]')


def masks():
    torch.manual_seed(0)
    write("masks", "conv_no_bias.pth",
          saved({"conv1": {"weight": torch.ones(2, 1, 3, 3), "bias": None}}))
    weight = (torch.rand(4, 2, 3, 3) > 0.5).float()
    write("masks", "conv_fc_bias.pth", saved({
        "conv1": {"weight": weight, "bias": torch.tensor([1.0, 0.0, 1.0, 1.0])},
        "fc": {"weight": (torch.rand(3, 8) > 0.3).to(torch.uint8), "bias": None},
    }))
    write("masks", "bool_and_int.pth", saved({
        "layer1.0.conv": {"weight": torch.rand(2, 2) > 0.5, "bias": torch.ones(2, dtype=torch.int64)},
    }))
    base = torch.ones(6, 4)
    base[1] = 0
    # Views: the pickle declares one storage with offsets and strides.
    write("masks", "views_shared_storage.pth", saved({
        "a": {"weight": base[::2], "bias": base[1, 1:]},
        "b": {"weight": base.t(), "bias": None},
    }))
    write("masks", "non_binary.pth", saved({"x": {"weight": torch.full((2, 2), 0.5), "bias": None}}))
    write("masks", "empty_dict.pth", saved({}))
    write("masks", "wrong_structure.pth", saved([torch.zeros(1)]))


def tensor_files():
    torch.manual_seed(1)
    write("tensor_file", "small.pt",
          saved({"images": torch.randn(4, 1, 4, 4), "labels": torch.tensor([0, 1, 2, 3])}))
    write("tensor_file", "double_int32.pt", saved({
        "images": torch.randn(3, 2, 2, dtype=torch.float64),
        "labels": torch.tensor([2, 0, 1], dtype=torch.int32)}))
    images = torch.randn(2, 1, 2, 2)
    images[1, 0, 0, 1] = float("nan")
    write("tensor_file", "nan_sample.pt", saved({"images": images, "labels": torch.tensor([0, 1])}))
    big = torch.randn(8, 1, 3, 3)
    write("tensor_file", "strided_view.pt",
          saved({"images": big[::2], "labels": torch.arange(4)[[3, 2, 1, 0]], "extra": torch.zeros(1)}))
    write("tensor_file", "mismatch.pt",
          saved({"images": torch.randn(3, 1, 2, 2), "labels": torch.tensor([0, 1])}))


def idx_file(dims, values):
    header = struct.pack(">I", 0x00000800 | len(dims)) + b"".join(struct.pack(">I", d) for d in dims)
    return header + bytes(values)


def idx_input(images, labels, flags):
    return struct.pack("<I", len(images)) + bytes([flags]) + images + labels


def idx():
    images = idx_file([2, 4, 4], [(i * 37) % 256 for i in range(32)])
    labels = idx_file([2], [3, 7])
    write("idx", "plain.bin", idx_input(images, labels, 0))
    gz_images = gzip.compress(images, mtime=0)
    gz_labels = gzip.compress(labels, mtime=0)
    write("idx", "gzip_both.bin", idx_input(gz_images, gz_labels, 3))
    write("idx", "gzip_images_test.bin", idx_input(gz_images, labels, 1 | 4))
    write("idx", "count_mismatch.bin", idx_input(images, idx_file([3], [1, 2, 3]), 0))
    write("idx", "empty.bin", idx_input(idx_file([0, 28, 28], []), idx_file([0], []), 0))
    write("idx", "one_28x28.bin",
          idx_input(idx_file([1, 28, 28], [i % 256 for i in range(784)]), idx_file([1], [9]), 2))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 2, 3)
        self.bn = torch.nn.BatchNorm2d(2)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 2)
        return self.fc(x.flatten(1))


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2, bias=False)

    def forward(self, x):
        return self.fc(x)


def archives():
    torch.manual_seed(2)
    for name, module in (("net_scripted.pt", torch.jit.script(Net().eval())),
                         ("tiny_scripted.pt", torch.jit.script(Tiny()))):
        buffer = io.BytesIO()
        torch.jit.save(module, buffer)
        write("archive", name, buffer.getvalue())
    traced = torch.jit.trace(Tiny(), torch.zeros(1, 2))
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    write("archive", "tiny_traced.pt", buffer.getvalue())
    # torch.save files go through the same validator (masks, tensor data).
    write("archive", "masks.pth",
          saved({"conv1": {"weight": torch.ones(2, 1, 3, 3), "bias": None}}))
    write("archive", "tensor_data.pt",
          saved({"images": torch.randn(2, 1, 2, 2), "labels": torch.tensor([0, 1])}))


def main():
    # TorchScript emits a module's constants in set order: string hashing must not vary.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    for harness in ("config", "masks", "tensor_file", "idx", "archive"):
        path = os.path.join(CORPUS, harness)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
    configs()
    masks()
    tensor_files()
    idx()
    archives()
    return 0


if __name__ == "__main__":
    sys.exit(main())
