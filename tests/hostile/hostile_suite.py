#!/usr/bin/env python3
"""Hostile-input suite for the `lithe` command line.

Runs the real `lithe` executable on a few hundred deliberately bad inputs: broken model
archives, configs, mask files, data files, plugins and plugin directories, arguments, output
paths and distributed-run environments, across every verb that reads them. Every case runs in a
directory of its own (the current directory of the run) holding its inputs and, for outputs
that must not be touched, sentinel files with known bytes.

A BAD case passes when the run
  - exits non-zero without crashing: no signal, not 134/139, no "terminate called", no
    "Segmentation", no sanitizer report ("ERROR: AddressSanitizer", "runtime error:"), and
    within its time limit (a hang is a failure; the whole process group is killed);
  - prints its error as ONE line: exactly one stderr line starting with `lithe <verb>: error:`
    (other stderr lines may only be `lithe: warning|info|debug:` or `lithe <verb>: note:`), at
    most a few thousand bytes, that names WHERE (the file, option, JSON Pointer or layer: regexes
    matched on the line as printed) and states the RULE and, for values, the VALUE seen (a regex
    matched on the line with the case's own paths masked, so that a file called
    `data_missing_labels.pt` cannot satisfy "missing ... labels"); all matching is
    case-insensitive, and a line ending in a TorchScript traceback header ("The following
    operation failed in the TorchScript interpreter.") has lost its reason and fails;
  - leaves every file that existed before byte-identical (inputs and sentinel outputs), creates
    no file at all in the case directory (no `*.tmp.*` leftovers, no partial outputs).
A GOOD control passes when the run exits 0, leaves its inputs unchanged and no `*.tmp.*`
files, and its own checks hold (outputs written, links kept, plugins listed...), so that the
checks above are shown not to be vacuous.

Usage: .venv/bin/python hostile_suite.py LITHE REPO_ROOT SCRATCH_DIR [--jobs N] [--only REGEX]
       [--list] [--verbose] [--report FILE.json]
It prints one line per failing case (and one per skipped case), then
`hostile inputs: N passed, M failed`, and exits 1 when any case failed. It needs the project's
Python (.venv/ from scripts/install-deps.sh: torch, numpy) to generate its inputs; nothing is downloaded and
/usr/share/datasets is never read (every data set is a small tensor file or IDX directory
generated here).

Families (each multiplied across the verbs that read or write the thing): model archives
(lenet.pt rewritten with zipfile: short tensor record, flipped byte under the old CRC, truncations,
empty, text, no data.pkl, huge declared numel, a view past its storage, garbage and malicious
pickles, directory, missing file, FIFO, /dev/zero), configs, mask files, data files (tensor files
and IDX directories), arguments, distributed-run environments (including two ranks that disagree
on WORLD_SIZE), output paths (devices, FIFOs, directories, missing directories, links and hard
links to inputs, outputs equal to inputs or to each other, /proc) and plugins (group/world
writable directories and files, links into world-writable directories, relative
LITHE_PLUGIN_PATH entries, the LITHE_ALLOW_INSECURE_PLUGINS opt-out, non-ELF, empty and truncated
.so files) and ONNX Runtime libraries (`convert --onnxruntime` and LITHE_ONNXRUNTIME naming text,
empty, truncated and foreign shared objects, directories, FIFOs, devices, an output). `--list`
prints them all.

Cases that need root (a private character device made with mknod, /dev/null as an output) are
skipped with a note when not run as root; so is the read-only directory case when run as root
(root ignores directory permissions). After a case that names /dev/null the suite checks
/dev/null is still a character device and restores it if not (and fails the case).
"""
import argparse
import concurrent.futures
import hashlib
import io
import json
import os
import pickletools
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
import zipfile

import torch

IS_ROOT = os.geteuid() == 0
DEFAULT_TIMEOUT = 45
HANG_TIMEOUT = 20  # cases whose danger is a hang (FIFOs, /dev/zero, huge thread counts)
MAX_ERROR_LINE = 2100  # sdk::Error caps messages at 2000 bytes; plus the "lithe verb: error: "
CRASH_MARKERS = ("terminate called", "Segmentation", "ERROR: AddressSanitizer",
                 "AddressSanitizer:", "LeakSanitizer", "runtime error:", "core dumped",
                 "double free", "stack smashing")
# Outputs per verb: a fresh name given to one of these gets a sentinel file in BAD cases.
OUTPUT_OPTIONS = {
    "compress": ("--output", "--masks", "--onnx", "--calibration"),
    "apply": ("--output",),
    "train": ("--output",),
    "speedup": ("--output", "--json"),
    "export-onnx": ("--output",),
}
SCRUBBED_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "LITHE_PLUGIN_PATH", "LITHE_ALLOW_INSECURE_PLUGINS",
                "LITHE_DIST_TIMEOUT", "LITHE_DIST_FILE_STORE", "TORCHELASTIC_USE_AGENT_STORE",
                "TORCHELASTIC_RESTART_COUNT", "GLOO_SOCKET_IFNAME")


def allof(*parts):
    """A regex matching a line that contains every part, in any order."""
    return "".join("(?=.*?%s)" % p for p in parts)


def sentinel_bytes(name):
    return ("SENTINEL %s: must not change\n" % name).encode()


# ---------------------------------------------------------------------------------------------
# Generated inputs
# ---------------------------------------------------------------------------------------------

def torch_save_bytes(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def zip_entries(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(info, z.read(info.filename)) for info in z.infolist()]


def rezip(data, replace=None, drop=()):
    """The archive `data` rewritten entry by entry (same compression per entry), with
    `replace` {suffix: bytes} substituted and entries ending in one of `drop` left out."""
    replace = replace or {}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info, body in zip_entries(data):
            if any(info.filename.endswith(d) for d in drop):
                continue
            for suffix, new in replace.items():
                if info.filename.endswith(suffix):
                    body = new
            z.writestr(zipfile.ZipInfo(info.filename, date_time=info.date_time), body,
                       compress_type=info.compress_type)
    return out.getvalue()


def entry_data_offset(data, suffix):
    """Offset and size of the (stored) body of the entry ending in `suffix`."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(suffix))
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:
                                                    info.header_offset + 30])
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def flip_byte(data, suffix, at=1000):
    """One byte of a stored entry flipped; the recorded CRC-32 left as it was."""
    offset, size = entry_data_offset(data, suffix)
    out = bytearray(data)
    out[offset + min(at, size - 1)] ^= 0x5A
    return bytes(out)


def entry_name(data, suffix):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return next(i.filename for i in z.infolist() if i.filename.endswith(suffix))


def patch_pickle(pkl, storage_key, numel=None, sizes=None):
    """data.pkl with the persistent id ('storage', type, key, location, numel) of storage
    `storage_key` declaring `numel` elements, or the tensor built on it given `sizes`."""
    ops = list(pickletools.genops(pkl))
    for i, (op, arg, pos) in enumerate(ops):
        if op.name not in ("BINUNICODE", "SHORT_BINUNICODE") or arg != storage_key:
            continue
        j = i + 1
        while j < len(ops) and j < i + 6 and ops[j][0].name != "TUPLE":
            j += 1
        if j + 1 >= len(ops) or ops[j][0].name != "TUPLE" or ops[j + 1][0].name != "BINPERSID":
            continue
        if numel is not None:
            start, end = ops[j - 1][2], ops[j][2]
            new = b"\x8a\x08" + int(numel).to_bytes(8, "little", signed=True)  # LONG1
            return pkl[:start] + new + pkl[end:]
        # After the persistent id: [BINPUT], storage offset, MARK, one op per size, TUPLE.
        k = j + 1
        while ops[k][0].name != "MARK":
            k += 1
        k += 1
        out, cursor = b"", 0
        for dim in sizes:
            out += pkl[cursor:ops[k][2]] + b"J" + struct.pack("<i", dim)  # BININT
            cursor = ops[k + 1][2]
            k += 1
        return out + pkl[cursor:]
    raise RuntimeError("storage %r not found in data.pkl" % storage_key)


def idx_bytes(dims, body):
    return struct.pack(">I", 0x800 | len(dims)) + b"".join(struct.pack(">I", d) for d in dims) \
        + body


class Fixtures:
    def __init__(self, repo, lithe):
        self.repo = repo
        self.lithe = lithe
        self.build = os.path.dirname(os.path.dirname(os.path.abspath(lithe)))
        self.plugin_dir = os.path.join(self.build, "lib", "lithe", "plugins")
        with open(os.path.join(repo, "samples", "models", "lenet.pt"), "rb") as f:
            self.lenet = f.read()
        gen = torch.Generator().manual_seed(1234)
        lenet = self.lenet
        pkl = zipfile.ZipFile(io.BytesIO(lenet)).read(entry_name(lenet, "data.pkl"))
        self.record4 = entry_name(lenet, "data/4")  # fc1.weight, 30720 floats = 122,880 bytes
        self.models = {
            # name: (bytes or None for special kinds, regex parts naming the rule)
            "short_record.pt": rezip(lenet, {"data/4": lenet[:100]}),
            "bad_crc.pt": flip_byte(lenet, "data/4"),
            "trunc_22.pt": lenet[:22],
            "trunc_1000.pt": lenet[:1000],
            "trunc_100000.pt": lenet[:100000],
            "trunc_cdir.pt": lenet[:len(lenet) - 1500],
            "trunc_eocd.pt": lenet[:len(lenet) - 10],
            "empty.pt": b"",
            "text.pt": b"this is a text file, not a TorchScript archive\n" * 20,
            "no_pkl.pt": rezip(lenet, drop=("data.pkl",)),
            "huge_numel.pt": rezip(lenet, {"data.pkl": patch_pickle(pkl, "4", numel=1 << 61)}),
            "oversized_view.pt": rezip(lenet, {"data.pkl": patch_pickle(pkl, "4",
                                                                        sizes=(120, 25600))}),
            "garbage_pkl.pt": rezip(lenet, {"data.pkl": b"\x80\x02" + bytes(
                torch.randint(0, 256, (1500,), generator=gen, dtype=torch.uint8).tolist())}),
            "evil_pkl.pt": rezip(lenet, {"data.pkl":
                                         b"\x80\x02cposix\nsystem\n(Vtouch pwned\ntR."}),
        }
        self.lenet_rezipped = rezip(lenet)

        # Data: 64 samples 1x28x28 float32, int64 labels 0..9.
        images = torch.randn(64, 1, 28, 28, generator=gen)
        labels = torch.randint(0, 10, (64,), generator=gen)
        self.images, self.labels = images, labels
        self.data_good = torch_save_bytes({"images": images, "labels": labels})

        def data(images=images, labels=labels, **extra):
            d = {"images": images, "labels": labels}
            d.update(extra)
            return torch_save_bytes(d)

        nan_images = images.clone()
        nan_images[5, 0, 3, 3] = float("nan")
        inf_images = images.clone()
        inf_images[7, 0, 10, 10] = float("inf")
        neg_labels = labels.clone()
        neg_labels[9] = -1
        big_labels = labels.clone()
        big_labels[11] = 10
        self.data_bad = {
            "nan": data(images=nan_images),
            "inf": data(images=inf_images),
            "label_neg": data(labels=neg_labels),
            "label_10": data(labels=big_labels),
            "count_mismatch": data(labels=labels[:60].clone()),
            "wrong_dims": data(images=images.reshape(64, 28, 28).clone()),
            "int_images": data(images=(images * 50).clamp(0, 255).to(torch.uint8)),
            "float_labels": data(labels=labels.to(torch.float32)),
            "missing_labels": torch_save_bytes({"images": images, "targets": labels}),
            "not_dict": torch_save_bytes([images, labels]),
            "truncated": self.data_good[:len(self.data_good) // 2],
        }
        # IDX (MNIST layout) directories: 64 train and 32 test samples of 28x28 bytes.
        pix = (images.reshape(64, 28, 28) * 40 + 128).clamp(0, 255).to(torch.uint8)
        self.idx_good = {
            "train-images-idx3-ubyte": idx_bytes((64, 28, 28), bytes(pix.flatten().tolist())),
            "train-labels-idx1-ubyte": idx_bytes((64,), bytes(labels.tolist())),
            "t10k-images-idx3-ubyte": idx_bytes((32, 28, 28), bytes(pix[:32].flatten().tolist())),
            "t10k-labels-idx1-ubyte": idx_bytes((32,), bytes(labels[:32].tolist())),
        }

        # Masks (NNI mask.pth layout).
        conv1_w = torch.ones(6, 1, 5, 5)
        conv1_w[:2] = 0
        conv1_b = torch.ones(6)
        conv1_b[:2] = 0
        fc3_w = (torch.rand(10, 84, generator=gen) > 0.5).float()

        def masks(**layers):
            return torch_save_bytes(layers)

        self.masks_good = masks(conv1={"weight": conv1_w, "bias": conv1_b},
                                fc3={"weight": fc3_w, "bias": None})
        # The bad files below hold two layers so that each reaches the check it is about; the
        # one-layer file (Python's pickler writes it with SETITEM) is a control.
        self.masks_one_layer = masks(fc3={"weight": fc3_w, "bias": None})
        ok_conv1 = {"weight": conv1_w, "bias": conv1_b}

        def with_conv1(fc3):
            return masks(fc3=fc3, conv1=ok_conv1)  # fc3 first: its weight is record data/0

        def bad_values(value, count):
            w = fc3_w.clone().flatten()
            w[:count] = value
            return with_conv1({"weight": w.reshape(10, 84), "bias": None})

        self.masks_bad = {
            "half": bad_values(0.5, 3),
            "two": bad_values(2.0, 4),
            "neg": bad_values(-1.0, 5),
            "nan": bad_values(float("nan"), 6),
            "inf": bad_values(float("inf"), 7),
            "complex": with_conv1({"weight": fc3_w.to(torch.complex64), "bias": None}),
            "empty_dict": masks(),
            "list": torch_save_bytes([fc3_w, fc3_w]),
            "extra_key": torch_save_bytes({"fc3": {"weight": fc3_w, "bias": None},
                                           "version": 2}),
            "wrong_shape": with_conv1({"weight": torch.ones(5, 84), "bias": None}),
            "bias_shape": with_conv1({"weight": fc3_w, "bias": torch.ones(3)}),
            "unknown_layer": masks(fc9={"weight": fc3_w, "bias": None}, conv1=ok_conv1),
            "weight_not_tensor": with_conv1({"weight": 1, "bias": None}),
            "unknown_field": with_conv1({"weight": fc3_w, "bias": None, "gamma": fc3_w}),
            "model_archive": lenet,
            "truncated": self.masks_good[:len(self.masks_good) // 2],
        }
        two_layers = with_conv1({"weight": fc3_w, "bias": None})
        self.mask_record = entry_name(two_layers, "data/0")
        self.masks_bad["short_record"] = rezip(two_layers, {"data/0": b"\x00" * 16})

        self.configs = {
            "level": json.dumps({"algorithm": "level", "config_list": [
                {"sparsity": 0.8, "op_types": ["default"]},
                {"sparsity": 0.5, "op_names": ["fc3"]}]}).encode(),
            "dorefa": json.dumps({"algorithm": "dorefa", "config_list": [
                {"quant_types": ["weight"], "quant_bits": {"weight": 4},
                 "op_types": ["Conv2d", "Linear"]}]}).encode(),
            "l1": json.dumps({"algorithm": "l1_filter", "config_list": [
                {"sparsity": 0.5, "op_types": ["Conv2d"]}]}).encode(),
        }

        # Plugins: a good plugin that is NOT in the default directory (so its algorithm is only
        # available from the directory a case gives), and a real in-tree plugin to break.
        self.extra_plugin = None
        for path, algorithm in (
                (os.path.join(self.build, "tests", "fixtures", "acme",
                              "lithe_plugin_acme_magnitude.so"), "acme_magnitude"),
                (os.path.join(self.build, "tests", "fixtures", "tiny", "lithe_plugin_tiny.so"),
                 "tiny")):
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    self.extra_plugin = (os.path.basename(path), f.read(), algorithm)
                break
        self.real_plugin = None
        level = os.path.join(self.plugin_dir, "lithe_plugin_level.so")
        if os.path.isfile(level):
            with open(level, "rb") as f:
                self.real_plugin = f.read()

    def extra_config(self):
        algorithm = self.extra_plugin[2] if self.extra_plugin else "acme_magnitude"
        return json.dumps({"algorithm": algorithm, "config_list": [
            {"sparsity": 0.5, "op_types": ["default"]}]}).encode()


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

class Case:
    def __init__(self, name, family, argv, expect="fail", error=None, where=(), files=None,
                 setup=None, env=None, timeout=DEFAULT_TIMEOUT, check=None, out_line=None,
                 max_stderr=None, prefix=None, skip=None, sentinels=True, runner=None,
                 devnull=False, changes=()):
        self.name = name
        self.family = family
        self.argv = argv
        self.expect = expect          # "fail", "ok" or "either"
        # The single error line must contain every `where` regex (the file, option, JSON Pointer
        # or layer) and match `error` (the rule and the value) once the paths of this case are
        # masked, so that a rule word cannot be matched by a file name.
        self.error = error
        self.where = [where] if isinstance(where, str) else list(where)
        self.files = files or {}      # relative path -> bytes
        self.setup = setup            # callable(case_dir) for FIFOs, links, modes, ...
        self.env = env or {}
        self.timeout = timeout
        self.check = check            # callable(case_dir, result) -> [problem]
        self.out_line = out_line      # regex some stdout/stderr line must match (GOOD cases)
        self.max_stderr = max_stderr
        self.prefix = prefix
        self.skip = skip
        self.sentinels = sentinels
        self.runner = runner          # callable(case, case_dir, env) -> (problems, Result)
        self.devnull = devnull
        self.changes = set(changes)   # GOOD cases: existing files the run is meant to replace

    @property
    def verb(self):
        return self.argv[0] if self.argv else ""

    def command(self):
        return "lithe " + " ".join(_quote(a) for a in self.argv)


def _quote(arg):
    if len(arg) > 80:
        arg = arg[:60] + "...(%d bytes)" % len(arg)
    return arg if re.fullmatch(r"[\w@%+=:,./-]+", arg) else repr(arg)


def mkfifo(name):
    return lambda d: os.mkfifo(os.path.join(d, name))


def mkdir(name, mode=0o755):
    def make(d):
        os.makedirs(os.path.join(d, name), exist_ok=True)
        os.chmod(os.path.join(d, name), mode)
    return make


def symlink(name, target):
    return lambda d: os.symlink(target, os.path.join(d, name))


def hardlink(name, target):
    return lambda d: os.link(os.path.join(d, target), os.path.join(d, name))


def chardev(name):
    return lambda d: os.mknod(os.path.join(d, name), stat.S_IFCHR | 0o666, os.makedev(1, 3))


def steps(*fns):
    def run(d):
        for fn in fns:
            fn(d)
    return run


def need_root(reason="needs root (mknod / replacing a device node)"):
    return None if IS_ROOT else reason


def starts_pk(path):
    def check(d, result):
        p = os.path.join(d, path)
        if not os.path.isfile(p):
            return ["%s was not written" % path]
        with open(p, "rb") as f:
            head = f.read(2)
        return [] if head == b"PK" else ["%s does not start with PK" % path]
    return check


def all_checks(*fns):
    def check(d, result):
        out = []
        for fn in fns:
            out += fn(d, result)
        return out
    return check


def build_cases(fx):
    cases = []

    def add(*args, **kwargs):
        cases.append(Case(*args, **kwargs))

    L = fx.lenet
    DATA = fx.data_good
    MASKS = fx.masks_good
    LEVEL = fx.configs["level"]
    q = re.escape

    # Standard command lines per verb, for a model path M and files they need.
    def verb_argv(verb, model="lenet.pt"):
        return {
            "inspect": (["inspect", "--model", model, "--threads", "1"], {}),
            "compress": (["compress", "--model", model, "--config", "level.json", "--output",
                          "out.pt", "--masks", "masks_out.pt", "--threads", "1"],
                         {"level.json": LEVEL}),
            "apply": (["apply", "--model", model, "--masks", "masks.pt", "--output", "out.pt"],
                      {"masks.pt": MASKS}),
            "train": (["train", "--model", model, "--data", "data.pt", "--epochs", "1",
                       "--batch-size", "32", "--threads", "1", "--output", "out.pt"],
                      {"data.pt": DATA}),
            "eval": (["eval", "--model", model, "--data", "data.pt", "--threads", "1"],
                     {"data.pt": DATA}),
            "flops": (["flops", "--model", model, "--input-shape", "1,1,28,28", "--threads",
                       "1"], {}),
            "speedup": (["speedup", "--model", model, "--masks", "masks.pt", "--input-shape",
                         "1,1,28,28", "--output", "out.pt", "--json", "report.json",
                         "--latency-runs", "1", "--warmup", "0", "--threads", "1"],
                        {"masks.pt": MASKS}),
            "export-onnx": (["export-onnx", "--model", model, "--input-shape", "1,1,28,28",
                             "--output", "out.onnx"], {}),
            "convert": (["convert", "--model", model, "--input-shape", "1,1,28,28", "--output",
                         "out.pt", "--json", "cert.json", "--samples", "1", "--latency-runs",
                         "1", "--warmup", "0", "--threads", "1"], {}),
            # The model as speedup's latency baseline, beside a good masked model.
            "speedup-dense": (["speedup", "--model", "lenet.pt", "--masks", "masks.pt",
                               "--dense-model", model, "--input-shape", "1,1,28,28",
                               "--output", "out.pt", "--latency-runs", "1", "--warmup", "0",
                               "--threads", "1"],
                              {"masks.pt": MASKS, "lenet.pt": L}),
        }[verb]

    MODEL_VERBS = ("inspect", "compress", "apply", "train", "eval", "flops", "speedup",
                   "export-onnx", "speedup-dense", "convert")

    # ---- GOOD controls -----------------------------------------------------------------------
    add("good_inspect", "control", ["inspect", "--model", "lenet.pt", "--threads", "1"], "ok",
        files={"lenet.pt": L}, out_line=allof("fc1", "Linear"))
    add("good_inspect_rezipped_archive", "control",
        ["inspect", "--model", "rezipped.pt", "--threads", "1"], "ok",
        files={"rezipped.pt": fx.lenet_rezipped}, out_line=allof("fc1", "Linear"))
    add("good_compress_level", "control",
        ["compress", "--model", "lenet.pt", "--config", "level.json", "--output", "out.pt",
         "--masks", "masks_out.pt", "--threads", "1"], "ok",
        files={"lenet.pt": L, "level.json": LEVEL},
        check=all_checks(starts_pk("out.pt"), starts_pk("masks_out.pt")))
    add("good_compress_overwrites_regular_output", "control",
        ["compress", "--model", "lenet.pt", "--config", "level.json", "--output", "old.pt",
         "--threads", "1"], "ok",
        files={"lenet.pt": L, "level.json": LEVEL, "old.pt": b"old content\n"},
        check=starts_pk("old.pt"), changes=("old.pt",))
    add("good_apply_mask", "control",
        ["apply", "--model", "lenet.pt", "--masks", "masks.pt", "--output", "out.pt"], "ok",
        files={"lenet.pt": L, "masks.pt": MASKS}, check=starts_pk("out.pt"))
    # Python writes a one-entry dict with SETITEM (libtorch's own pickler writes SETITEMS): a
    # mask file of one layer saved by torch.save applies.
    add("good_apply_one_layer_torch_save", "control",
        ["apply", "--model", "lenet.pt", "--masks", "one_layer.pt", "--output", "out.pt"], "ok",
        files={"lenet.pt": L, "one_layer.pt": fx.masks_one_layer}, check=starts_pk("out.pt"))
    add("good_flops_masks", "control",
        ["flops", "--model", "lenet.pt", "--input-shape", "1,1,28,28", "--masks", "masks.pt",
         "--threads", "1"], "ok", files={"lenet.pt": L, "masks.pt": MASKS})
    add("good_speedup", "control",
        ["speedup", "--model", "lenet.pt", "--masks", "masks.pt", "--input-shape", "1,1,28,28",
         "--output", "small.pt", "--json", "report.json", "--latency-runs", "1", "--warmup",
         "0", "--threads", "1"], "ok", files={"lenet.pt": L, "masks.pt": MASKS},
        check=starts_pk("small.pt"))
    add("good_export_onnx", "control",
        ["export-onnx", "--model", "lenet.pt", "--input-shape", "1,1,28,28", "--output",
         "out.onnx"], "ok", files={"lenet.pt": L})
    add("good_train_tensor_file", "control",
        ["train", "--model", "lenet.pt", "--data", "data.pt", "--epochs", "1", "--batch-size",
         "32", "--threads", "1", "--output", "out.pt"], "ok",
        files={"lenet.pt": L, "data.pt": DATA}, check=starts_pk("out.pt"))
    add("good_eval_tensor_file", "control",
        ["eval", "--model", "lenet.pt", "--data", "data.pt", "--threads", "1"], "ok",
        files={"lenet.pt": L, "data.pt": DATA}, out_line="accuracy")
    add("good_eval_idx_directory", "control",
        ["eval", "--model", "lenet.pt", "--data", "mnist", "--threads", "1"], "ok",
        files=dict({"lenet.pt": L}, **{"mnist/" + k: v for k, v in fx.idx_good.items()}),
        out_line="accuracy")
    add("good_compress_fine_tune", "control",
        ["compress", "--model", "lenet.pt", "--config", "level.json", "--output", "out.pt",
         "--epochs", "1", "--data", "data.pt", "--batch-size", "32", "--threads", "1"], "ok",
        files={"lenet.pt": L, "level.json": LEVEL, "data.pt": DATA}, check=starts_pk("out.pt"))

    def link_kept(link, target):
        def check(d, result):
            p = os.path.join(d, link)
            problems = []
            if not os.path.islink(p):
                problems.append("%s is no longer a symbolic link" % link)
            elif os.readlink(p) != target:
                problems.append("%s now points to %s" % (link, os.readlink(p)))
            t = os.path.join(d, os.path.dirname(link), target)
            if not os.path.isfile(t) or os.path.getsize(t) == 0:
                problems.append("link target %s was not written" % target)
            else:
                with open(t, "rb") as f:
                    if f.read(2) != b"PK":
                        problems.append("link target %s does not start with PK" % target)
            return problems
        return check

    add("good_symlink_output_written_through", "control",
        ["compress", "--model", "lenet.pt", "--config", "level.json", "--output", "out/link.pt",
         "--threads", "1"], "ok", files={"lenet.pt": L, "level.json": LEVEL},
        setup=steps(mkdir("out"), mkdir("elsewhere"), symlink("out/link.pt",
                                                               "../elsewhere/fresh.pt")),
        check=link_kept("out/link.pt", "../elsewhere/fresh.pt"))
    add("good_apply_symlink_output_written_through", "control",
        ["apply", "--model", "lenet.pt", "--masks", "masks.pt", "--output", "link.pt"], "ok",
        files={"lenet.pt": L, "masks.pt": MASKS},
        setup=steps(mkdir("elsewhere"), symlink("link.pt", "elsewhere/fresh.pt")),
        check=link_kept("link.pt", "elsewhere/fresh.pt"))

    # ---- Model archives, through every verb that reads a model ----------------------------------
    rec4 = q(fx.record4.split("/", 1)[1]) if "/" in fx.record4 else q(fx.record4)  # "data/4"
    archive_rules = {
        "short_record.pt": allof(rec4, r"(short|truncat|bytes|too small|smaller|needs?|expect)",
                                 r"\b100\b"),
        "bad_crc.pt": allof(r"crc", rec4),
        "trunc_22.pt": r"(truncat|corrupt|zip|archive|end of central|central directory)",
        "trunc_1000.pt": r"(truncat|corrupt|zip|archive|end of central|central directory)",
        "trunc_100000.pt": r"(truncat|corrupt|zip|archive|end of central|central directory)",
        "trunc_cdir.pt": r"(truncat|corrupt|zip|archive|end of central|central directory)",
        "trunc_eocd.pt": r"(truncat|corrupt|zip|archive|end of central|central directory)",
        "empty.pt": r"(empty|0 bytes|zero|truncat|zip|archive)",
        "text.pt": r"(zip|archive|not a|torchscript)",
        "no_pkl.pt": r"data\.pkl",
        "huge_numel.pt": allof(rec4, r"(numel|bytes|large|exceed|short|overflow|storage|declare)"),
        # libtorch 2.x refuses the view while loading, naming its sizes (fc1.weight's, patched
        # to 120 x 25600) and the storage they need; Lithe's own check after loading names the
        # parameter, for a libtorch that lets it through.
        "oversized_view.pt": allof(r"(fc1|%s|sizes 120 25600)" % rec4,
                                   r"(storage|extent|bound|exceed|beyond|outside|past)"),
        "garbage_pkl.pt": r"(data\.pkl|pickle|unpickl)",
        "evil_pkl.pt": r"(data\.pkl|pickle|unpickl|global|posix|system)",
    }
    special_models = {
        "model_dir": (mkdir("model_dir"), r"(directory|regular file)"),
        "missing.pt": (None, r"(does not exist|no such file|not found)"),
        "fifo.pt": (mkfifo("fifo.pt"), r"(fifo|regular file|pipe)"),
    }

    def no_pwned(d, result):
        return ["the pickle ran a shell command (file 'pwned' exists)"] \
            if os.path.exists(os.path.join(d, "pwned")) else []

    # Truncation at several lengths: two through every verb, the others through two verbs
    # (the same reader runs for every verb; this keeps the suite within its time budget).
    two_verbs_only = ("trunc_22.pt", "trunc_100000.pt", "trunc_cdir.pt")
    for verb in MODEL_VERBS:
        for fname, rule in archive_rules.items():
            if fname in two_verbs_only and verb not in ("inspect", "compress"):
                continue
            argv, files = verb_argv(verb, fname)
            files = dict(files, **{fname: fx.models[fname]})
            add("model_%s_%s" % (fname.replace(".pt", ""), verb), "model archive", argv,
                where=q(fname), error=rule, files=files,
                check=no_pwned if fname == "evil_pkl.pt" else None)
        for fname, (setup, rule) in special_models.items():
            argv, files = verb_argv(verb, fname)
            add("model_%s_%s" % (fname.replace(".pt", ""), verb), "model archive", argv,
                where=q(fname), error=rule, files=files, setup=setup,
                timeout=HANG_TIMEOUT)
    for verb in ("inspect", "train"):
        argv, files = verb_argv(verb, "/dev/zero")
        add("model_dev_zero_%s" % verb, "model archive", argv,
            where=q("/dev/zero"), error=r"(regular file|character device|not a)",
            files=files, timeout=HANG_TIMEOUT)

    # ---- Configs (compress --config) -----------------------------------------------------------
    def compress_cfg(cfg_bytes, cfg_name="cfg.json"):
        return (["compress", "--model", "lenet.pt", "--config", cfg_name, "--output", "out.pt",
                 "--masks", "masks_out.pt", "--threads", "1"],
                {"lenet.pt": L, cfg_name: cfg_bytes})

    def cfg(doc):
        return json.dumps(doc).encode()

    entry = {"sparsity": 0.5, "op_types": ["default"]}

    def cfg_case(name, body, error, cfg_name="cfg.json", **kw):
        argv, files = compress_cfg(body, cfg_name)
        add("config_" + name, "config", argv, error=error, files=files, **kw)

    cfg_case("not_json", b"algorithm = level\n", "JSON", cfg_name="notjson.json",
             where=q("notjson.json"))
    cfg_case("empty_file", b"", r"(empty|JSON|end of input)", cfg_name="emptycfg.json",
             where=q("emptycfg.json"))
    cfg_case("whitespace_only", b"  \n\t\n", r"(empty|JSON|end of input)", cfg_name="blank.json",
             where=q("blank.json"))
    cfg_case("top_level_array", cfg([{"algorithm": "level"}]), allof(r"object", r"\["),
             where=q("cfg.json"))
    cfg_case("top_level_string", b'"level"', allof(r"object", r"level"), where=q("cfg.json"))
    cfg_case("unknown_top_key", cfg({"algorithm": "level", "config_list": [entry],
                                     "bogus_key": 1}),
             allof(r"/bogus_key", r"(not a known key|unknown|unexpected|not allowed)"))
    cfg_case("unknown_top_key_10MB", b'{"algorithm": "level", "config_list": [], "' +
             b"k" * (10 << 20) + b'": 1}', allof(r"(not a known key|unknown|unexpected)"),
             max_stderr=2000)
    cfg_case("missing_algorithm", cfg({"config_list": [entry]}),
             allof(r"algorithm", r"(missing|required)"))
    cfg_case("algorithm_not_string", cfg({"algorithm": 42, "config_list": [entry]}),
             allof(r"/algorithm", r"string", r"\b42\b"))
    cfg_case("algorithm_unknown", cfg({"algorithm": "nosuchalgo", "config_list": [entry]}),
             allof(r"nosuchalgo", r"(unknown|no plugin|not found|no algorithm|available|not a)"))
    cfg_case("algorithm_nul", b'{"algorithm": "lev\\u0000el", "config_list": [{"sparsity": 0.5,'
             b' "op_types": ["default"]}]}', allof(r"(algorithm|pruner)", r"lev"),
             max_stderr=2000)
    cfg_case("algorithm_newline", b'{"algorithm": "lev\\nel", "config_list": [{"sparsity": 0.5,'
             b' "op_types": ["default"]}]}', allof(r"(algorithm|pruner)", r"lev"),
             max_stderr=2000)
    cfg_case("algorithm_10MB", b'{"algorithm": "' + b"a" * (10 << 20) +
             b'", "config_list": [{"sparsity": 0.5, "op_types": ["default"]}]}',
             allof(r"algorithm"), max_stderr=2000)
    cfg_case("algorithm_path", cfg({"algorithm": "../../lib/level", "config_list": [entry]}),
             allof(r"algorithm", r"\.\./\.\./lib/level"))
    depth = 100000
    cfg_case("deep_nesting_config_list", b'{"algorithm": "level", "config_list": [{"sparsity": '
             b'0.5, "op_types": ["default"], "x": ' + b"[" * depth + b"]" * depth + b"}]}",
             allof(r"/config_list/0/x", r"(deep|depth|nest)"), max_stderr=2000)
    cfg_case("deep_nesting_unterminated", b'{"algorithm": "level", "config_list": [{"x": ' +
             b"[" * depth, allof(r"/config_list/0/x", r"(deep|depth|nest)"), max_stderr=2000)
    cfg_case("deep_nesting_options", b'{"algorithm": "level", "config_list": [{"sparsity": 0.5,'
             b' "op_types": ["default"]}], "options": {"x": ' + b'{"a": ' * depth + b"1" +
             b"}" * depth + b"}}", allof(r"/options", r"(deep|depth|nest)"), max_stderr=2000)
    cfg_case("duplicate_top_key", b'{"algorithm": "level", "algorithm": "level", "config_list":'
             b' [{"sparsity": 0.5, "op_types": ["default"]}]}',
             allof(r"/algorithm", r"(twice|duplicate|repeated|more than once)"))
    cfg_case("duplicate_entry_key", b'{"algorithm": "level", "config_list": [{"sparsity": 0.5, '
             b'"sparsity": 0.8, "op_types": ["default"]}]}',
             allof(r"/config_list/0/sparsity", r"(twice|duplicate|repeated|more than once)"))
    cfg_case("duplicate_key_second_entry", b'{"algorithm": "level", "config_list": [{"sparsity":'
             b' 0.5, "op_types": ["default"]}, {"op_names": ["fc3"], "op_names": ["fc2"], '
             b'"sparsity": 0.2}]}',
             allof(r"/config_list/1/op_names", r"(twice|duplicate|repeated|more than once)"))
    cfg_case("number_overflow", b'{"algorithm": "level", "config_list": [{"sparsity": 1e999, '
             b'"op_types": ["default"]}]}',
             allof(r"/config_list/0/sparsity", r"(overflow|range|large|1e999|finite)"))
    for label, value, rule in (("1.5", 1.5, r"1\.5"), ("neg", -0.1, r"-0\.1"),
                               ("string", "0.5", r"(string|number|\"0\.5\")"),
                               ("null", None, r"(null|number)")):
        cfg_case("sparsity_" + label, cfg({"algorithm": "level", "config_list": [
            {"sparsity": value, "op_types": ["default"]}]}),
            allof(r"/config_list/0/sparsity", rule))
    cfg_case("sparsity_misspelled", cfg({"algorithm": "level", "config_list": [
        {"sparsty": 0.5, "op_types": ["default"]}]}),
        allof(r"/config_list/0", r"did you mean 'sparsity'"))
    cfg_case("op_names_missing_layer", cfg({"algorithm": "level", "config_list": [
        {"sparsity": 0.5, "op_names": ["nosuchlayer"]}]}),
        allof(r"/config_list/0/op_names/0", r"nosuchlayer"))
    cfg_case("op_types_not_list", cfg({"algorithm": "level", "config_list": [
        {"sparsity": 0.5, "op_types": "Conv2d"}]}),
        allof(r"/config_list/0/op_types", r"list"))
    cfg_case("entry_not_object", cfg({"algorithm": "level", "config_list": [5]}),
             allof(r"/config_list/0", r"object"))
    cfg_case("config_list_empty", cfg({"algorithm": "level", "config_list": []}),
             allof(r"/config_list", r"empty"))
    cfg_case("config_list_not_list", cfg({"algorithm": "level", "config_list": {"a": 1}}),
             allof(r"/config_list", r"(list|array)"))
    cfg_case("config_list_missing", cfg({"algorithm": "level"}),
             allof(r"config_list", r"(missing|required)"))
    cfg_case("options_not_object", cfg({"algorithm": "level", "config_list": [entry],
                                        "options": [1]}),
             allof(r"/options", r"object"))
    cfg_case("options_unknown_key", cfg({"algorithm": "level", "config_list": [entry],
                                         "options": {"bogus_option": 1}}),
             allof(r"bogus_option", r"(unknown|not a known|unused|not used|unexpected)"))
    cfg_case("invalid_utf8", b'{"algorithm": "lev\xff\xfeel", "config_list": [{"sparsity": 0.5,'
             b' "op_types": ["default"]}]}', allof(r"/algorithm", r"(UTF-?8|encoding|byte)"),
             max_stderr=2000)
    argv, files = compress_cfg(b"\xef\xbb\xbf" + LEVEL, "bom.json")
    add("config_bom", "config", argv, "either", where=q("bom.json"),
        error=r"(BOM|byte order|UTF-?8|JSON)", files=files)
    cfg_case("trailing_garbage", LEVEL + b" xyz", r"(JSON|syntax|end of input|trailing|"
             r"unexpected)", cfg_name="trail.json", where=q("trail.json"))
    cfg_case("two_documents", LEVEL + LEVEL, r"(JSON|syntax|end of input|trailing|unexpected)",
             cfg_name="twodocs.json", where=q("twodocs.json"))
    argv, files = compress_cfg(LEVEL)
    argv[argv.index("cfg.json")] = "cfgdir"
    del files["cfg.json"]
    add("config_directory", "config", argv, where=q("cfgdir"), error=r"(directory|regular)",
        files=files, setup=mkdir("cfgdir"))
    argv, files = compress_cfg(LEVEL)
    argv[argv.index("cfg.json")] = "nocfg.json"
    del files["cfg.json"]
    add("config_missing", "config", argv,
        where=q("nocfg.json"), error=r"(does not exist|no such|not found)", files=files)
    argv, files = compress_cfg(LEVEL)
    argv[argv.index("cfg.json")] = "cfgfifo.json"
    del files["cfg.json"]
    add("config_fifo", "config", argv, where=q("cfgfifo.json"), error=r"(fifo|regular|pipe)",
        files=files, setup=mkfifo("cfgfifo.json"), timeout=HANG_TIMEOUT)
    argv, files = compress_cfg(LEVEL)
    argv[argv.index("cfg.json")] = "/dev/zero"
    del files["cfg.json"]
    add("config_dev_zero", "config", argv,
        where=q("/dev/zero"), error=r"(regular|character device|not a)", files=files,
        timeout=HANG_TIMEOUT)

    # ---- Mask files (apply --masks, speedup --masks, flops --masks) ---------------------------
    mask_rules = {
        "half": allof(r"fc3", r"\b3\b", r"0\.5"),
        "two": allof(r"fc3", r"\b4\b", r"\b2(\.0*)?\b", r"(0 and 1|0 or 1|0/1|binary)"),
        "neg": allof(r"fc3", r"\b5\b", r"-1"),
        "nan": allof(r"fc3", r"\b6\b", r"nan"),
        "inf": allof(r"fc3", r"\b7\b", r"inf"),
        "complex": allof(r"fc3", r"complex"),
        "empty_dict": r"(empty|no layers|at least one)",
        "list": r"(dict|list)",
        "extra_key": allof(r"version", r"(layer|dict|must|expected)"),
        "wrong_shape": allof(r"fc3", r"shape", r"5(, |x)84"),
        "bias_shape": allof(r"fc3", r"bias", r"shape", r"\b3\b"),
        "unknown_layer": allof(r"fc9", r"(no module|unknown|not found|no layer|has no)"),
        "weight_not_tensor": allof(r"fc3", r"weight", r"tensor"),
        "unknown_field": allof(r"fc3", r"gamma"),
        "model_archive": r"(TorchScript|model|not a mask|dict|LeNet)",
        "truncated": r"(truncat|corrupt|zip|archive|end of central|central directory)",
        "short_record": allof(q(fx.mask_record.split("/", 1)[1]),
                              r"(short|truncat|bytes|too small|smaller|needs?|expect)"),
    }
    mask_verbs = {
        "apply": lambda m: (["apply", "--model", "lenet.pt", "--masks", m, "--output",
                             "out.pt"], {"lenet.pt": L}),
        "speedup": lambda m: (["speedup", "--model", "lenet.pt", "--masks", m, "--input-shape",
                               "1,1,28,28", "--output", "out.pt", "--json", "report.json",
                               "--latency-runs", "1", "--warmup", "0", "--threads", "1"],
                              {"lenet.pt": L}),
        "flops": lambda m: (["flops", "--model", "lenet.pt", "--input-shape", "1,1,28,28",
                             "--masks", m, "--threads", "1"], {"lenet.pt": L}),
    }
    flops_subset = ("half", "nan", "complex", "empty_dict", "wrong_shape", "unknown_layer",
                    "truncated", "short_record")
    for verb, make in mask_verbs.items():
        for kind, rule in mask_rules.items():
            if verb == "flops" and kind not in flops_subset:
                continue
            fname = "masks_%s.pt" % kind
            argv, files = make(fname)
            files[fname] = fx.masks_bad[kind]
            add("masks_%s_%s" % (kind, verb), "mask file", argv, where=q(fname), error=rule,
                files=files)
        for fname, setup, rule in (("nomasks.pt", None, r"(does not exist|no such|not found)"),
                                   ("maskfifo.pt", mkfifo("maskfifo.pt"), r"(fifo|regular|pipe)"),
                                   ("maskdir", mkdir("maskdir"), r"(directory|regular)"),
                                   ("emptymasks.pt", None, r"(empty|0 bytes|zip|archive|"
                                                           r"truncat)")):
            argv, files = make(fname)
            if fname == "emptymasks.pt":
                files[fname] = b""
            add("masks_%s_%s" % (fname.replace(".pt", ""), verb), "mask file", argv,
                where=q(fname), error=rule, files=files, setup=setup, timeout=HANG_TIMEOUT)

    # ---- Data files (train/eval/compress --data) ---------------------------------------------
    data_rules = {
        "nan": allof(r"sample 5\b", r"(nan|finite)"),
        "inf": allof(r"sample 7\b", r"(inf|finite)"),
        "label_neg": allof(r"label", r"-1\b"),
        "label_10": allof(r"label", r"\b10\b", r"(class|output|0\.\.9|range|< ?10)"),
        "count_mismatch": allof(r"\b64\b", r"\b60\b"),
        "wrong_dims": allof(r"(shape|dim)", r"28, 28"),
        "int_images": allof(r"images", r"(float|Byte|uint8)"),
        "float_labels": allof(r"labels", r"(integer|Float)"),
        "missing_labels": allof(r"labels", r"(missing|both|must hold)"),
        "not_dict": r"(dict|images)",
        "truncated": r"(truncat|corrupt|zip|archive|end of central|central directory|cannot be "
                     r"read)",
    }
    data_verbs = {
        "train": lambda f: (["train", "--model", "lenet.pt", "--data", f, "--epochs", "1",
                             "--batch-size", "32", "--threads", "1", "--output", "out.pt"],
                            {"lenet.pt": L}),
        "eval": lambda f: (["eval", "--model", "lenet.pt", "--data", f, "--threads", "1"],
                           {"lenet.pt": L}),
        "compress": lambda f: (["compress", "--model", "lenet.pt", "--config", "level.json",
                                "--output", "out.pt", "--epochs", "1", "--data", f,
                                "--batch-size", "32", "--threads", "1"],
                               {"lenet.pt": L, "level.json": LEVEL}),
        # The data is read before the model is converted: the float LeNet serves.
        "convert": lambda f: (["convert", "--model", "lenet.pt", "--input-shape", "1,1,28,28",
                               "--output", "out.pt", "--data", f, "--threads", "1"],
                              {"lenet.pt": L}),
    }
    for verb, make in data_verbs.items():
        for kind, rule in data_rules.items():
            fname = "data_%s.pt" % kind
            argv, files = make(fname)
            files[fname] = fx.data_bad[kind]
            add("data_%s_%s" % (kind, verb), "data file", argv, where=q(fname), error=rule,
                files=files)
        split = "t10k" if verb in ("eval", "convert") else "train"
        idx_variants = {
            "bad_magic": ({split + "-images-idx3-ubyte": b"\x00\x00\x08\x01" +
                           fx.idx_good[split + "-images-idx3-ubyte"][4:]},
                          split + r"-images-idx3-ubyte", allof(r"magic", r"0x0*801\b")),
            "short_body": ({split + "-labels-idx1-ubyte":
                            fx.idx_good[split + "-labels-idx1-ubyte"][:30]},
                           split + r"-labels-idx1-ubyte", allof(r"(truncat|short)", r"\b22\b")),
            "short_header": ({split + "-images-idx3-ubyte": b"\x00\x00\x08\x03\x00\x00"},
                             split + r"-images-idx3-ubyte", r"(truncat|header|short)"),
            "count_mismatch": ({split + "-labels-idx1-ubyte": idx_bytes((20,), bytes(20))},
                               split + r"-labels-idx1-ubyte", r"\b20\b"),
            "bad_gzip": ({split + "-images-idx3-ubyte.gz": b"\x1f\x8b\x08\x00" + b"\xff" * 64},
                         split + r"-images-idx3-ubyte\.gz", r"(gzip|corrupt|truncat)"),
            "label_out_of_range": ({split + "-labels-idx1-ubyte": idx_bytes(
                (64 if split == "train" else 32,), bytes([200] * (64 if split == "train" else 32)))},
                split + r"-labels-idx1-ubyte", allof(r"label", r"\b200\b")),
        }
        for kind, (broken, where, rule) in idx_variants.items():
            argv, files = make("mnist")
            files.update({"mnist/" + k: v for k, v in fx.idx_good.items()})
            files.update({"mnist/" + k: v for k, v in broken.items()})
            add("data_idx_%s_%s" % (kind, verb), "data file", argv, where=where, error=rule,
                files=files)
        for fname, setup, extra, rule in (
                ("nodata.pt", None, None, r"(does not exist|no such|not found)"),
                ("datafifo.pt", mkfifo("datafifo.pt"), None, r"(fifo|regular|pipe)"),
                ("emptydata.pt", None, b"", r"(empty|0 bytes|zip|archive|truncat|cannot be read)"),
                ("/dev/urandom", None, None, r"(regular|character device|not a)")):
            argv, files = make(fname)
            if extra is not None:
                files[fname] = extra
            label = fname.replace(".pt", "").replace("/dev/", "dev_")
            add("data_%s_%s" % (label, verb), "data file", argv, where=q(fname), error=rule,
                files=files, setup=setup, timeout=HANG_TIMEOUT)

    # ---- Arguments ------------------------------------------------------------------------------
    def arg_case(name, verb, extra, error, timeout=DEFAULT_TIMEOUT, **kw):
        argv, files = verb_argv(verb)
        files = dict(files, **{"lenet.pt": L})
        argv = list(argv)
        for opt in extra[::2]:  # replace options given again
            if opt in argv and opt.startswith("--"):
                i = argv.index(opt)
                del argv[i:i + 2]
        add("args_" + name, "arguments", argv + extra, error=error, files=files,
            timeout=timeout, **kw)

    for verb in ("inspect", "compress", "train", "eval", "flops", "speedup"):
        arg_case("threads_negative_" + verb, verb, ["--threads", "-1"],
                 allof(r"--threads", r"-1\b"))
    for verb in ("inspect", "train", "eval", "speedup"):
        arg_case("threads_100000_" + verb, verb, ["--threads", "100000"],
                 allof(r"--threads", r"100000"), timeout=HANG_TIMEOUT)
    arg_case("threads_abc_inspect", "inspect", ["--threads", "abc"], allof(r"threads", r"abc"))
    arg_case("threads_overflow_compress", "compress", ["--threads", "99999999999"],
             allof(r"threads", r"99999999999"))
    def without(argv, *opts):
        argv = list(argv)
        for opt in opts:
            if opt in argv:
                i = argv.index(opt)
                del argv[i:i + 2]
        return argv

    for verb in ("train", "compress"):
        argv, files = verb_argv(verb)
        files = dict(files, **{"lenet.pt": L, "data.pt": DATA})
        data_opts = ["--data", "data.pt"] if verb == "compress" else []
        for value in ("0", "-1"):
            add("args_epochs_%s_%s" % ("neg" if value == "-1" else value, verb), "arguments",
                without(argv, "--epochs", "--batch-size") + ["--epochs", value, "--batch-size",
                                                             "32"] + data_opts,
                error=allof(r"epochs", r"(?<![\d.])%s\b" % re.escape(value)), files=files)
        add("args_batch_size_0_" + verb, "arguments",
            without(argv, "--epochs", "--batch-size") + ["--epochs", "1", "--batch-size", "0"]
            + data_opts, error=allof(r"batch.size", r"\b0\b"), files=files)
    argv, files = verb_argv("train")
    files = dict(files, **{"lenet.pt": L})
    add("args_epochs_fraction_train", "arguments",
        without(argv, "--epochs") + ["--epochs", "1.5"], error=allof(r"epochs", r"1\.5"),
        files=files)
    add("args_lr_negative_train", "arguments", argv + ["--lr", "-1"],
        error=allof(r"lr|learning rate", r"-1"), files=files)
    add("args_lr_nan_train", "arguments", argv + ["--lr", "nan"],
        error=allof(r"lr|learning rate", r"nan"), files=files)
    add("args_optimizer_bogus_train", "arguments", argv + ["--optimizer", "bogus"],
        error=allof(r"optimizer", r"bogus"), files=files)

    shape_verbs = {
        "flops": lambda s: ["flops", "--model", "lenet.pt", "--input-shape", s, "--threads",
                            "1"],
        "export-onnx": lambda s: ["export-onnx", "--model", "lenet.pt", "--input-shape", s,
                                  "--output", "out.onnx"],
        "speedup": lambda s: ["speedup", "--model", "lenet.pt", "--masks", "masks.pt",
                              "--input-shape", s, "--output", "out.pt", "--latency-runs", "1",
                              "--warmup", "0", "--threads", "1"],
        "compress": lambda s: ["compress", "--model", "lenet.pt", "--config", "level.json",
                               "--output", "out.pt", "--onnx", "out.onnx", "--input-shape", s,
                               "--threads", "1"],
    }
    shape_values = {
        "huge": ("1000000000,1,1,1", r"1000000000"),
        "letter": ("1,a,2", r"1,a,2"),
        "empty": ("", r"(''|empty|\"\")"),
        "zero_batch": ("0,1,28,28", r"0,1,28,28"),
        "negative": ("1,-1,28,28", r"1,-1,28,28"),
        "wrong_rank": ("1,28,28", r"(1,28,28|dim|rank|shape)"),
        "overflow": ("99999999999999999999,1,28,28", r"99999999999999999999"),
        "trailing_comma": ("1,1,28,28,", r"1,1,28,28,"),
    }
    for verb, make in shape_verbs.items():
        for label, (value, rule) in shape_values.items():
            if verb in ("speedup", "compress") and label not in ("huge", "letter", "zero_batch",
                                                                 "wrong_rank"):
                continue
            add("args_input_shape_%s_%s" % (label, verb), "arguments", make(value),
                error=allof(r"--input-shape", rule) if label != "wrong_rank" else
                allof(r"(--input-shape|input of shape)", r"(1, ?28, ?28)"),
                files={"lenet.pt": L, "masks.pt": MASKS, "level.json": LEVEL},
                timeout=HANG_TIMEOUT)
    add("args_opset_99_export_onnx", "arguments",
        ["export-onnx", "--model", "lenet.pt", "--input-shape", "1,1,28,28", "--output",
         "out.onnx", "--opset", "99"], error=allof(r"opset", r"\b99\b"), files={"lenet.pt": L})
    add("args_onnx_opset_99_compress", "arguments",
        shape_verbs["compress"]("1,1,28,28") + ["--onnx-opset", "99"],
        error=allof(r"opset", r"\b99\b"), files={"lenet.pt": L, "level.json": LEVEL})
    add("args_onnx_without_shape_compress", "arguments",
        ["compress", "--model", "lenet.pt", "--config", "level.json", "--output", "out.pt",
         "--onnx", "out.onnx"], error=allof(r"--input-shape", r"--onnx"),
        files={"lenet.pt": L, "level.json": LEVEL})
    add("args_calibration_batches_0_compress", "arguments",
        ["compress", "--model", "lenet.pt", "--config", "level.json", "--output", "out.pt",
         "--calibration-batches", "0", "--data", "data.pt"],
        error=allof(r"--calibration-batches", r"\b0\b"),
        files={"lenet.pt": L, "level.json": LEVEL, "data.pt": DATA})
    for verb in ("inspect", "compress", "speedup"):
        arg_case("unknown_option_" + verb, verb, ["--bogus-flag", "1"],
                 allof(r"bogus-flag", r"(unrecogni[sz]ed|unknown)"))
    add("args_unknown_verb", "arguments", ["frobnicate", "--model", "lenet.pt"],
        error=allof(r"frobnicate", r"(unknown|verb)"), prefix="lithe: error:",
        files={"lenet.pt": L})
    for verb, argv, missing in (
            ("compress", ["compress", "--model", "lenet.pt", "--output", "out.pt"], "--config"),
            ("apply", ["apply", "--model", "lenet.pt", "--output", "out.pt"], "--masks"),
            ("train", ["train", "--model", "lenet.pt", "--data", "data.pt", "--epochs", "1"],
             "--output"),
            ("speedup", ["speedup", "--model", "lenet.pt", "--masks", "masks.pt", "--output",
                         "out.pt"], "--input-shape"),
            ("export-onnx", ["export-onnx", "--model", "lenet.pt", "--output", "out.onnx"],
             "--input-shape"),
            ("flops", ["flops", "--model", "lenet.pt"], "--input-shape"),
            ("inspect", ["inspect"], "--model"),
            ("eval", ["eval", "--data", "data.pt"], "--model")):
        add("args_missing_%s_%s" % (missing.strip("-").replace("-", "_"), verb), "arguments",
            argv, error=allof(re.escape(missing), r"(required|missing)"),
            files={"lenet.pt": L, "masks.pt": MASKS, "data.pt": DATA})
    add("args_latency_runs_0_speedup", "arguments",
        ["speedup", "--model", "lenet.pt", "--masks", "masks.pt", "--input-shape", "1,1,28,28",
         "--output", "out.pt", "--latency-runs", "0"],
        error=allof(r"--latency-runs", r"\b0\b"), files={"lenet.pt": L, "masks.pt": MASKS})
    add("args_warmup_negative_speedup", "arguments",
        ["speedup", "--model", "lenet.pt", "--masks", "masks.pt", "--input-shape", "1,1,28,28",
         "--output", "out.pt", "--warmup", "-5"],
        error=allof(r"--warmup", r"-5\b"), files={"lenet.pt": L, "masks.pt": MASKS})
    for verb in ("compress", "plugins"):
        base = verb_argv(verb)[0] if verb != "plugins" else ["plugins"]
        add("args_log_level_loud_" + verb, "arguments", list(base) + ["--log-level", "loud"],
            error=allof(r"--log-level", r"loud"), files={"lenet.pt": L, "level.json": LEVEL})
    add("args_flops_mode_bogus", "arguments",
        ["flops", "--model", "lenet.pt", "--input-shape", "1,1,28,28", "--mode", "bogus"],
        error=allof(r"--mode", r"bogus"), files={"lenet.pt": L})
    add("args_eval_split_bogus", "arguments",
        ["eval", "--model", "lenet.pt", "--data", "mnist", "--split", "bogus", "--threads", "1"],
        error=allof(r"split", r"bogus"),
        files=dict({"lenet.pt": L}, **{"mnist/" + k: v for k, v in fx.idx_good.items()}))
    train_tail = ["train", "--model", "lenet.pt", "--data", "data.pt", "--epochs", "1",
                  "--output", "out.pt"]
    for name, argv, error in (
            ("nproc_0", ["launch", "--nproc", "0", "--"] + train_tail,
             allof(r"--nproc", r"\b0\b")),
            ("nproc_abc", ["launch", "--nproc", "abc", "--"] + train_tail,
             allof(r"nproc", r"abc")),
            ("grace_negative", ["launch", "--nproc", "1", "--grace", "-1", "--"] + train_tail,
             allof(r"--grace", r"-1\b")),
            ("no_verb", ["launch", "--nproc", "1"], allof(r"verb", r"(train|compress|--)")),
            ("wrong_verb", ["launch", "--nproc", "1", "--", "inspect", "--model", "lenet.pt"],
             allof(r"inspect", r"(train|compress)")),
            ("master_port_70000", ["launch", "--nproc", "1", "--master-port", "70000", "--"]
             + train_tail, allof(r"--master-port", r"70000"))):
        add("args_launch_" + name, "arguments", argv, error=error,
            files={"lenet.pt": L, "data.pt": DATA})

    # Distributed environment (a verb started by hand as one rank).
    for name, env, error in (
            ("world_size_abc", {"WORLD_SIZE": "abc", "RANK": "0"},
             allof(r"WORLD_SIZE", r"abc")),
            ("world_size_negative", {"WORLD_SIZE": "-3", "RANK": "0"},
             allof(r"WORLD_SIZE", r"-3")),
            ("rank_missing", {"WORLD_SIZE": "2"}, allof(r"RANK", r"(not set|missing)")),
            ("rank_out_of_range", {"WORLD_SIZE": "2", "RANK": "5"}, allof(r"RANK", r"\b5\b")),
            ("master_port_70000", {"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "70000"},
             allof(r"MASTER_PORT", r"70000")),
            ("dist_timeout_0", {"WORLD_SIZE": "2", "RANK": "0", "LITHE_DIST_TIMEOUT": "0"},
             allof(r"LITHE_DIST_TIMEOUT", r"\b0\b"))):
        argv, files = verb_argv("train")
        add("dist_" + name, "distributed", argv, error=error,
            files=dict(files, **{"lenet.pt": L}), env=env, timeout=HANG_TIMEOUT)
    add("dist_world_size_disagreement", "distributed", verb_argv("train")[0],
        files={"lenet.pt": L, "data.pt": DATA}, runner=run_world_size_disagreement,
        error=allof(r"WORLD_SIZE", r"\b[23]\b", r"(same|disagree|here but|differ|mismatch)"))

    # ---- Output paths ---------------------------------------------------------------------------
    # Each writing verb and option, with its inputs.
    writers = {
        ("compress", "--output"): (["compress", "--model", "lenet.pt", "--config", "level.json",
                                    "--output", "{o}", "--masks", "m_out.pt", "--threads", "1"],
                                   {"lenet.pt": L, "level.json": LEVEL}),
        ("compress", "--masks"): (["compress", "--model", "lenet.pt", "--config", "level.json",
                                   "--output", "o_out.pt", "--masks", "{o}", "--threads", "1"],
                                  {"lenet.pt": L, "level.json": LEVEL}),
        ("compress", "--onnx"): (["compress", "--model", "lenet.pt", "--config", "level.json",
                                  "--output", "o_out.pt", "--onnx", "{o}", "--input-shape",
                                  "1,1,28,28", "--threads", "1"],
                                 {"lenet.pt": L, "level.json": LEVEL}),
        ("compress", "--calibration"): (["compress", "--model", "lenet.pt", "--config",
                                         "dorefa.json", "--output", "o_out.pt",
                                         "--calibration", "{o}", "--threads", "1"],
                                        {"lenet.pt": L, "dorefa.json": fx.configs["dorefa"]}),
        ("apply", "--output"): (["apply", "--model", "lenet.pt", "--masks", "masks.pt",
                                 "--output", "{o}"], {"lenet.pt": L, "masks.pt": MASKS}),
        ("train", "--output"): (["train", "--model", "lenet.pt", "--data", "data.pt", "--epochs",
                                 "1", "--batch-size", "32", "--threads", "1", "--output", "{o}"],
                                {"lenet.pt": L, "data.pt": DATA}),
        ("speedup", "--output"): (["speedup", "--model", "lenet.pt", "--masks", "masks.pt",
                                   "--input-shape", "1,1,28,28", "--output", "{o}", "--json",
                                   "r_out.json", "--latency-runs", "1", "--warmup", "0",
                                   "--threads", "1"], {"lenet.pt": L, "masks.pt": MASKS}),
        ("speedup", "--json"): (["speedup", "--model", "lenet.pt", "--masks", "masks.pt",
                                 "--input-shape", "1,1,28,28", "--output", "s_out.pt", "--json",
                                 "{o}", "--latency-runs", "1", "--warmup", "0", "--threads",
                                 "1"], {"lenet.pt": L, "masks.pt": MASKS}),
        ("export-onnx", "--output"): (["export-onnx", "--model", "lenet.pt", "--input-shape",
                                       "1,1,28,28", "--output", "{o}"], {"lenet.pt": L}),
        # Output paths are checked before the model is read: the float LeNet serves.
        ("convert", "--output"): (["convert", "--model", "lenet.pt", "--input-shape",
                                   "1,1,28,28", "--output", "{o}", "--json", "c_out.json",
                                   "--onnx", "c_out.onnx"], {"lenet.pt": L}),
        ("convert", "--json"): (["convert", "--model", "lenet.pt", "--input-shape", "1,1,28,28",
                                 "--output", "c_out.pt", "--json", "{o}"], {"lenet.pt": L}),
        ("convert", "--onnx"): (["convert", "--model", "lenet.pt", "--input-shape", "1,1,28,28",
                                 "--output", "c_out.pt", "--onnx", "{o}"], {"lenet.pt": L}),
    }

    def out_case(name, verb, opt, path, where, rule, setup=None, **kw):
        template, files = writers[(verb, opt)]
        argv = [a.replace("{o}", path) for a in template]
        add("output_%s_%s_%s" % (name, verb.replace("-", "_"), opt.strip("-")), "output path",
            argv, where=where, error=rule, files=dict(files), setup=setup, **kw)

    ROLE = re.escape
    SAME = r"(same file|same as|identical|destroy|overwrite|is also)"
    OS_REASON = (r"(No such file|Permission denied|Operation not permitted|not a regular file|"
                 r"does not exist)")
    for (verb, opt) in writers:
        out_case("fifo", verb, opt, "outfifo", [ROLE(opt), r"outfifo"], r"(fifo|regular)",
                 setup=mkfifo("outfifo"), timeout=HANG_TIMEOUT)
        out_case("directory", verb, opt, "outdir", [ROLE(opt), r"outdir"], r"directory",
                 setup=mkdir("outdir"))
        out_case("missing_dir", verb, opt, "nodir/sub/out.x", [ROLE(opt), r"nodir"],
                 r"(does not exist|no such|missing)")
        out_case("chardev", verb, opt, "nulldev", [ROLE(opt), r"nulldev"],
                 r"(character device|regular)", setup=chardev("nulldev"), skip=need_root(),
                 timeout=HANG_TIMEOUT)
        out_case("equals_model", verb, opt, "lenet.pt", [ROLE(opt), r"--model", r"lenet\.pt"],
                 SAME)
        out_case("symlink_to_model", verb, opt, "link_to_model.pt",
                 [ROLE(opt), r"link_to_model\.pt", r"--model"], SAME,
                 setup=symlink("link_to_model.pt", "lenet.pt"))
        # A link to itself: the file named cannot be resolved (the option need not be named:
        # some writers only know the path).
        out_case("link_loop", verb, opt, "loop.pt", [r"loop\.pt"],
                 r"(symbolic link|levels|loop)", setup=symlink("loop.pt", "loop.pt"))
    for verb, opt in (("compress", "--output"), ("train", "--output"),
                      ("export-onnx", "--output"), ("apply", "--output"), ("speedup", "--json")):
        out_case("dev_null", verb, opt, "/dev/null", [ROLE(opt), r"/dev/null"],
                 r"(character device|regular)",
                 skip=need_root("not root: /dev/null cannot be replaced anyway (skipped)"),
                 devnull=True)
        # Written at the end (the directory exists): the path and the OS reason are enough.
        out_case("proc", verb, opt, "/proc/self/foo.pt", [r"/proc/self/foo\.pt"], OS_REASON)
        out_case("readonly_dir", verb, opt, "rodir/out.x", [r"rodir/out\.x"],
                 r"(Permission denied|read-only|not writable)", setup=mkdir("rodir", 0o555),
                 skip="running as root: root ignores directory permissions" if IS_ROOT else None)
    out_case("hardlink_to_model", "compress", "--output", "hard.pt",
             [r"--output", r"hard\.pt", r"--model"], SAME,
             setup=hardlink("hard.pt", "lenet.pt"))
    out_case("dotdot_spelling_of_model", "compress", "--output", "sub/../lenet.pt",
             [r"--output", r"--model"], SAME, setup=mkdir("sub"))
    out_case("equals_config", "compress", "--output", "level.json",
             [r"--output", r"--config", r"level\.json"], SAME)
    out_case("symlink_to_config", "compress", "--masks", "cfglink.json",
             [r"--masks", r"--config"], SAME, setup=symlink("cfglink.json", "level.json"))
    out_case("equals_output", "compress", "--masks", "o_out.pt",
             [r"--masks", r"--output", r"o_out\.pt"], SAME)
    out_case("equals_output", "compress", "--onnx", "o_out.pt",
             [r"--onnx", r"--output", r"o_out\.pt"], SAME)
    out_case("equals_config", "compress", "--calibration", "dorefa.json",
             [r"--calibration", r"--config", r"dorefa\.json"], SAME)
    out_case("equals_output", "compress", "--calibration", "o_out.pt",
             [r"--calibration", r"--output", r"o_out\.pt"], SAME)
    out_case("equals_masks", "apply", "--output", "masks.pt",
             [r"--output", r"--masks", r"masks\.pt"], SAME)
    out_case("symlink_to_masks", "apply", "--output", "mlink.pt", [r"--output", r"--masks"],
             SAME, setup=symlink("mlink.pt", "masks.pt"))
    out_case("equals_data", "train", "--output", "data.pt",
             [r"--output", r"--data", r"data\.pt"], SAME)
    out_case("symlink_to_data", "train", "--output", "dlink.pt", [r"--output", r"--data"], SAME,
             setup=symlink("dlink.pt", "data.pt"))
    out_case("equals_masks", "speedup", "--output", "masks.pt",
             [r"--output", r"--masks", r"masks\.pt"], SAME)
    out_case("equals_output", "speedup", "--json", "s_out.pt",
             [r"--json", r"--output", r"s_out\.pt"], SAME)
    out_case("equals_masks", "speedup", "--json", "masks.pt", [r"--json", r"--masks"], SAME)
    out_case("equals_output", "convert", "--onnx", "c_out.pt",
             [r"--onnx", r"--output", r"c_out\.pt"], SAME)
    out_case("equals_output", "convert", "--json", "c_out.pt",
             [r"--json", r"--output", r"c_out\.pt"], SAME)
    # compress --masks given the same path as --model through a symlinked directory.
    out_case("dir_symlink_to_model", "compress", "--masks", "alias/lenet.pt",
             [r"--masks", r"--model"], SAME, setup=symlink("alias", "."))

    # ---- Plugins ---------------------------------------------------------------------------------
    plugin_name = fx.extra_plugin[0] if fx.extra_plugin else "lithe_plugin_acme_magnitude.so"
    plugin_algorithm = fx.extra_plugin[2] if fx.extra_plugin else "acme_magnitude"

    def put_plugin(dirname, dir_mode=0o755, file_mode=0o755):
        def make(d):
            if fx.extra_plugin is None:
                raise RuntimeError("fixture plugin missing: build the acme_magnitude (or tiny) "
                                   "target of tests/plugin_loading")
            p = os.path.join(d, dirname)
            os.makedirs(p, exist_ok=True)
            f = os.path.join(p, plugin_name)
            with open(f, "wb") as out:
                out.write(fx.extra_plugin[1])
            os.chmod(f, file_mode)
            os.chmod(p, dir_mode)
        return make

    compress_extra = ["compress", "--model", "lenet.pt", "--config", "extra.json", "--output",
                      "out.pt", "--threads", "1"]
    plugin_files = {"lenet.pt": L, "extra.json": fx.extra_config()}
    add("good_plugin_secure_dir_listed", "control", ["plugins", "--plugin-dir", "plugdir_ok"],
        "ok", setup=put_plugin("plugdir_ok"),
        out_line=allof(r"loaded", re.escape(plugin_name.replace("lithe_plugin_", "")
                                            .replace(".so", "")), r"plugdir_ok"))
    add("good_plugin_secure_dir_compress", "control",
        compress_extra + ["--plugin-dir", "plugdir_ok"], "ok", files=plugin_files,
        setup=put_plugin("plugdir_ok"), check=starts_pk("out.pt"))
    insecure = {
        "dir_0777": (put_plugin("plugdir_0777", 0o777), ["--plugin-dir", "plugdir_0777"], {},
                     allof(r"plugdir_0777", r"writable")),
        "dir_0775": (put_plugin("plugdir_0775", 0o775), ["--plugin-dir", "plugdir_0775"], {},
                     allof(r"plugdir_0775", r"writable")),
        "file_0666": (put_plugin("plugdir_f666", 0o755, 0o666), ["--plugin-dir", "plugdir_f666"],
                      {}, allof(r"plugdir_f666", r"writable")),
        "dir_link_into_world_writable": (
            steps(mkdir("wwparent", 0o777), put_plugin("wwparent/plugins"),
                  lambda d: os.chmod(os.path.join(d, "wwparent"), 0o777),
                  symlink("plugdir_link", "wwparent/plugins")),
            ["--plugin-dir", "plugdir_link"], {}, allof(r"(plugdir_link|wwparent)",
                                                        r"writable")),
        "relative_env_path": (put_plugin("relplug"), [], {"LITHE_PLUGIN_PATH": "relplug"},
                              allof(r"relplug", r"relative")),
    }
    for name, (setup, flags, env, line) in insecure.items():
        add("plugin_%s_listed" % name, "plugin", ["plugins"] + flags, "ok", setup=setup,
            env=env, out_line=line, check=no_algorithm_listed(plugin_algorithm))
        add("plugin_%s_compress" % name, "plugin", compress_extra + flags, setup=setup, env=env,
            files=plugin_files,
            error=allof(re.escape(plugin_algorithm),
                        r"(unknown|no plugin|not found|no algorithm|available|not loaded)"))
    add("good_plugin_insecure_opt_out", "control", compress_extra + ["--plugin-dir",
                                                                     "plugdir_0777"], "ok",
        setup=put_plugin("plugdir_0777", 0o777), env={"LITHE_ALLOW_INSECURE_PLUGINS": "1"},
        files=plugin_files, check=starts_pk("out.pt"))

    def put_file(dirname, fname, data, mode=0o755):
        def make(d):
            p = os.path.join(d, dirname)
            os.makedirs(p, exist_ok=True)
            with open(os.path.join(p, fname), "wb") as f:
                f.write(data() if callable(data) else data)
            os.chmod(os.path.join(p, fname), mode)
        return make

    def truncated_real():
        if fx.real_plugin is None:
            raise RuntimeError("build/lib/lithe/plugins/lithe_plugin_level.so missing")
        return fx.real_plugin[:len(fx.real_plugin) // 3]

    broken = {
        "text_named_so": ("lithe_plugin_x.so", b"This is a text file, not a shared library.\n"),
        "empty_so": ("lithe_plugin_empty.so", b""),
        "truncated_real_so": ("lithe_plugin_trunc.so", truncated_real),
        "elf_header_only": ("lithe_plugin_elfhead.so", b"\x7fELF\x02\x01\x01" + b"\x00" * 57),
    }
    for name, (fname, data) in broken.items():
        dirname = "broken_" + name
        add("plugin_%s_listed" % name, "plugin", ["plugins", "--plugin-dir", dirname], "ok",
            setup=put_file(dirname, fname, data),
            out_line=allof(re.escape(fname), r"(FAILED|cannot load|failed|not a)"))
        add("plugin_%s_compress_still_works" % name, "plugin",
            ["compress", "--model", "lenet.pt", "--config", "level.json", "--output", "out.pt",
             "--threads", "1", "--plugin-dir", dirname], "ok",
            files={"lenet.pt": L, "level.json": LEVEL}, setup=put_file(dirname, fname, data),
            out_line=allof(r"^lithe: warning:", re.escape(fname)), check=starts_pk("out.pt"))
    # ---- ONNX Runtime libraries (convert --onnxruntime, LITHE_ONNXRUNTIME) ---------------------
    # Checked before the model is read, so the float LeNet serves: the library's error comes first.
    def convert_ort(library):
        return ["convert", "--model", "lenet.pt", "--input-shape", "1,1,28,28", "--output",
                "out.pt", "--json", "cert.json", "--onnx", "q.onnx", "--onnxruntime", library,
                "--threads", "1"]
    bad_runtimes = {
        "text": ("ort.so", b"This is a text file, not a shared library.\n", r"not an ELF file"),
        "empty": ("ort.so", b"", r"not an ELF file"),
        "elf_header_only": ("ort.so", b"\x7fELF\x02\x01\x01" + b"\x00" * 57,
                            r"not a 64-bit shared object"),
        "truncated": ("ort.so", truncated_real, r"(truncated|outside the file)"),
        "not_onnxruntime": ("ort.so", lambda: fx.real_plugin, r"exports no OrtGetApiBase"),
    }
    for name, (fname, data, rule) in bad_runtimes.items():
        add("onnxruntime_%s" % name, "onnxruntime library", convert_ort("libs/" + fname),
            files={"lenet.pt": L}, setup=put_file("libs", fname, data),
            where=q("--onnxruntime libs/" + fname), error=allof(rule, r"libonnxruntime\.so"))
    # Code loaded into the process: the same trust rule as a plugin's (checked before its bytes).
    add("onnxruntime_writable_by_others", "onnxruntime library", convert_ort("wlibs/ort.so"),
        files={"lenet.pt": L}, setup=put_file("wlibs", "ort.so", b"x", 0o666),
        where=q("--onnxruntime wlibs/ort.so"), error=allof(r"writable by others", r"go-w"))
    add("onnxruntime_in_a_group_writable_dir", "onnxruntime library",
        convert_ort("glibs/ort.so"), files={"lenet.pt": L},
        setup=steps(put_file("glibs", "ort.so", b"x"),
                    lambda d: os.chmod(os.path.join(d, "glibs"), 0o775)),
        where=q("--onnxruntime glibs/ort.so"), error=allof(r"glibs", r"writable by its group"))
    add("onnxruntime_missing", "onnxruntime library", convert_ort("nope.so"),
        files={"lenet.pt": L}, where=q("--onnxruntime nope.so"), error=r"no such file")
    add("onnxruntime_directory", "onnxruntime library", convert_ort("libdir"),
        files={"lenet.pt": L}, setup=mkdir("libdir"), where=q("--onnxruntime libdir"),
        error=r"not a regular file")
    add("onnxruntime_fifo", "onnxruntime library", convert_ort("ort.fifo"),
        files={"lenet.pt": L}, setup=mkfifo("ort.fifo"), where=q("ort.fifo"),
        error=r"not a regular file", timeout=HANG_TIMEOUT)
    add("onnxruntime_dev_zero", "onnxruntime library", convert_ort("/dev/zero"),
        files={"lenet.pt": L}, where=q("/dev/zero"), error=r"not a regular file",
        timeout=HANG_TIMEOUT)
    add("onnxruntime_env_not_a_library", "onnxruntime library",
        ["convert", "--model", "lenet.pt", "--input-shape", "1,1,28,28", "--output", "out.pt",
         "--onnx", "q.onnx", "--threads", "1"],
        files={"lenet.pt": L, "notes.txt": b"notes\n"}, env={"LITHE_ONNXRUNTIME": "notes.txt"},
        where=q("LITHE_ONNXRUNTIME notes.txt"), error=r"not an ELF file")
    add("data_fewer_than_a_batch_convert", "data file",
        ["convert", "--model", "lenet.pt", "--input-shape", "100,1,28,28", "--output", "out.pt",
         "--data", "data.pt", "--threads", "1"],
        files={"lenet.pt": L, "data.pt": DATA}, where=q("--data data.pt"),
        error=allof(r"\b64 images", r"fewer than one batch of 100"))
    add("onnxruntime_env_is_the_output", "onnxruntime library",
        ["convert", "--model", "lenet.pt", "--input-shape", "1,1,28,28", "--output", "ort.so",
         "--onnx", "q.onnx", "--threads", "1"],
        files={"lenet.pt": L, "ort.so": b"\x7fELF"}, env={"LITHE_ONNXRUNTIME": "ort.so"},
        where=q("--output"), error=r"LITHE_ONNXRUNTIME")
    add("onnxruntime_is_the_output", "onnxruntime library",
        ["convert", "--model", "lenet.pt", "--input-shape", "1,1,28,28", "--output", "ort.so",
         "--onnxruntime", "ort.so", "--threads", "1"],
        files={"lenet.pt": L, "ort.so": b"\x7fELF"}, where=q("--output"),
        error=r"--onnxruntime")

    add("plugin_dir_is_a_file", "plugin",
        ["compress", "--model", "lenet.pt", "--config", "extra.json", "--output", "out.pt",
         "--plugin-dir", "notadir.so"], files=dict(plugin_files, **{"notadir.so": b"x"}),
        error=allof(re.escape(plugin_algorithm),
                    r"(unknown|no plugin|not found|no algorithm|available)"))

    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SystemExit("duplicate case names: %s" % ", ".join(dupes))
    return cases


def no_algorithm_listed(algorithm):
    def check(d, result):
        for line in result.stdout.splitlines():
            if line.strip() == algorithm or line.strip().endswith(" " + algorithm):
                return ["'lithe plugins' lists algorithm '%s' from the insecure location"
                        % algorithm]
        return []
    return check


# ---------------------------------------------------------------------------------------------
# Running and checking
# ---------------------------------------------------------------------------------------------

class Result:
    def __init__(self, rc, stdout, stderr, seconds, timed_out):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr
        self.seconds, self.timed_out = seconds, timed_out


NOT_STARTED = 255  # the exit status reported when the executable could not be started


def base_env():
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "LC_ALL": "C"})
    return env


def run_process(argv, cwd, env, timeout):
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as e:  # e.g. the executable is being relinked by a concurrent build
        return Result(NOT_STARTED, "", "could not start %s: %s" % (argv[0], e),
                      time.monotonic() - start, False)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    return Result(proc.returncode, out.decode("utf-8", "replace"),
                  err.decode("utf-8", "replace"), time.monotonic() - start, timed_out)


def snapshot(root):
    """{relative path: identity} for everything under root, without following links or
    opening anything but regular files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                try:
                    with open(path, "rb") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            h.update(block)
                    out[rel] = ("file", h.hexdigest())
                except OSError as e:
                    out[rel] = ("file", "unreadable: %s" % e)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISFIFO(st.st_mode):
                out[rel] = ("fifo",)
            elif stat.S_ISCHR(st.st_mode):
                out[rel] = ("chardev", st.st_rdev)
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    return out


def devnull_problem():
    st = os.stat("/dev/null")
    if stat.S_ISCHR(st.st_mode):
        return None
    # Put it back, so the machine stays usable.
    try:
        os.remove("/dev/null")
        os.mknod("/dev/null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.chmod("/dev/null", 0o666)
    except OSError as e:
        return "/dev/null is no longer a character device and could not be restored: %s" % e
    return "/dev/null was replaced (no longer a character device; restored by the suite)"


PATH_OPTIONS = ("--model", "--config", "--output", "--masks", "--onnx", "--calibration", "--json",
                "--data", "--test-data", "--plugin-dir")
# A message that ends with the header of a TorchScript traceback has lost its reason.
LOST_REASON = re.compile(r"The following operation failed in the TorchScript interpreter\.?\s*$")


def masked(case, line):
    """`line` with the paths this case names replaced by <PATH>."""
    tokens = set(case.files)
    for i, arg in enumerate(case.argv[:-1]):
        if arg in PATH_OPTIONS:
            tokens.add(case.argv[i + 1])
    tokens |= {os.path.basename(t) for t in list(tokens)}
    for token in sorted((t for t in tokens if len(t) >= 3), key=len, reverse=True):
        line = line.replace(token, "<PATH>")
    return line


def stderr_problems(case, result, expect_error):
    problems = []
    text = result.stdout + "\n" + result.stderr
    for marker in CRASH_MARKERS:
        if marker in text:
            problems.append("crash marker %r in the output" % marker)
    if "error while loading shared libraries" in text:
        problems.append("lithe could not start (its libraries were being rebuilt?)")
    prefix = case.prefix or "lithe %s: error:" % case.verb
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith(prefix)]
    allowed = re.compile(r"^lithe: (warning|info|debug): |^lithe \S+: note: ")
    stray = [l for l in lines if not l.startswith(prefix) and not allowed.match(l)]
    if not expect_error:
        if errors:
            problems.append("error line printed: %s" % errors[0][:200])
        return problems, None
    if len(errors) != 1:
        problems.append("%d lines start with %r (expected exactly 1)" % (len(errors), prefix))
    if stray:
        problems.append("%d other stderr line(s), e.g. %r" % (len(stray), stray[0][:160]))
    line = errors[0] if errors else None
    if line is not None:
        if len(line) > MAX_ERROR_LINE:
            problems.append("error line is %d bytes long" % len(line))
        for where in case.where:
            if not re.search(where, line, re.I):
                problems.append("error line does not name /%s/" % where)
        if case.error and not re.search(case.error, masked(case, line), re.I):
            problems.append("error line does not match /%s/ (paths masked)" % case.error)
        if LOST_REASON.search(line):
            problems.append("error line ends with a TorchScript traceback header, not the reason")
    if case.max_stderr is not None and len(result.stderr.encode()) >= case.max_stderr:
        problems.append("stderr is %d bytes (limit %d)" % (len(result.stderr.encode()),
                                                          case.max_stderr))
    return problems, line


def exit_problems(result, expect_fail):
    if result.stderr.startswith("could not start "):
        return [result.stderr]
    if result.timed_out:
        return ["did not finish within its time limit (hang; killed)"]
    if expect_fail:
        if result.rc < 0:
            return ["killed by signal %d" % -result.rc]
        if result.rc in (134, 139):
            return ["exit status %d (abort/segfault)" % result.rc]
        if result.rc == 0:
            return ["exit status 0 (expected failure)"]
        return []
    return [] if result.rc == 0 else ["exit status %d (expected 0)" % result.rc]


def prepare_case(case, case_dir):
    os.makedirs(case_dir)
    for rel, data in case.files.items():
        path = os.path.join(case_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    if case.setup:
        case.setup(case_dir)
    if case.expect == "fail" and case.sentinels:
        opts = OUTPUT_OPTIONS.get(case.verb, ())
        for i, arg in enumerate(case.argv[:-1]):
            if arg in opts:
                value = case.argv[i + 1]
                if not value or os.path.isabs(value):
                    continue
                path = os.path.normpath(os.path.join(case_dir, value))
                if not path.startswith(case_dir + os.sep):
                    continue
                parent = os.path.dirname(path)
                if os.path.lexists(path) or not os.path.isdir(parent):
                    continue
                mode = stat.S_IMODE(os.stat(parent).st_mode)
                if not os.access(parent, os.W_OK):  # a read-only directory: still a sentinel
                    os.chmod(parent, mode | stat.S_IWUSR)
                with open(path, "wb") as f:
                    f.write(sentinel_bytes(value))
                os.chmod(parent, mode)


def run_case(case, lithe, scratch):
    try:
        return run_case_checked(case, lithe, scratch)
    except Exception as e:  # noqa: BLE001 - a harness error fails the case, not the suite
        return case, ["harness error: %s: %s" % (type(e).__name__, e)], None


def run_case_checked(case, lithe, scratch):
    case_dir = os.path.join(scratch, "cases", case.name)
    problems = []
    try:
        prepare_case(case, case_dir)
    except Exception as e:  # noqa: BLE001 - a setup that cannot be made is a failed case
        return case, ["setup failed: %s" % e], None
    before = snapshot(case_dir)
    env = base_env()
    env.update(case.env)
    if case.runner is not None:
        problems, result = case.runner(case, case_dir, env, lithe)
    else:
        result = run_process([lithe] + case.argv, case_dir, env, case.timeout)
        expect_fail = case.expect == "fail" or (case.expect == "either" and
                                               (result.rc != 0 or result.timed_out))
        problems += exit_problems(result, expect_fail)
        more, _ = stderr_problems(case, result, expect_fail)
        problems += more
        if not expect_fail and case.out_line:
            lines = (result.stdout + "\n" + result.stderr).splitlines()
            if not any(re.search(case.out_line, l, re.I) for l in lines):
                problems.append("no output line matches /%s/" % case.out_line)
    after = snapshot(case_dir)
    expect_fail = case.expect == "fail" or (case.expect == "either" and result is not None and
                                           result.rc != 0)
    for rel, ident in before.items():
        if rel not in after:
            problems.append("%s was removed" % rel)
        elif after[rel] != ident and not (rel in case.changes and result is not None and
                                          result.rc == 0):
            problems.append("%s changed (%s -> %s)" % (rel, ident[0], after[rel][0]))
    for rel in sorted(set(after) - set(before)):
        if ".tmp." in os.path.basename(rel):
            problems.append("left a temporary file %s" % rel)
        elif expect_fail:
            problems.append("created %s although it failed" % rel)
    if case.devnull:
        p = devnull_problem()
        if p:
            problems.append(p)
    if case.check is not None and result is not None and (expect_fail or not problems):
        problems += case.check(case_dir, result)
    return case, problems, result


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world_size_disagreement(case, case_dir, env, lithe):
    """Rank 0 of WORLD_SIZE=2 and rank 1 started with WORLD_SIZE=3 on the same rendezvous: both
    must fail, each naming the WORLD_SIZE disagreement (not only a rendezvous timeout)."""
    port = str(free_port())
    common = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, LITHE_DIST_TIMEOUT="2",
                  LOCAL_WORLD_SIZE="1")
    results = {}

    def rank(r, world, delay):
        time.sleep(delay)
        e = dict(common, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world))
        results[r] = run_process([lithe] + case.argv, case_dir, e, 40)

    threads = [threading.Thread(target=rank, args=(0, 2, 0)),
               threading.Thread(target=rank, args=(1, 3, 0.7))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    problems = []
    for r in (0, 1):
        res = results[r]
        p = exit_problems(res, True)
        more, _ = stderr_problems(case, res, True)
        problems += ["rank %d: %s" % (r, x) for x in p + more]
    merged = Result(results[0].rc, results[0].stdout,
                    "[rank 0] " + results[0].stderr + " [rank 1] " + results[1].stderr,
                    max(results[0].seconds, results[1].seconds),
                    results[0].timed_out or results[1].timed_out)
    return problems, merged


def build_stamp(lithe):
    """Sizes and mtimes of the executable, its libraries and plugins: a rebuild during the run
    (the build tree is shared) makes results unreliable, and is reported."""
    root = os.path.dirname(os.path.dirname(lithe))
    stamp = {}
    for d in (os.path.dirname(lithe), os.path.join(root, "lib"),
              os.path.join(root, "lib", "lithe", "plugins")):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            if n == "lithe" or ".so" in n:
                try:
                    st = os.stat(p)
                    stamp[p] = (st.st_size, st.st_mtime_ns)
                except OSError:
                    pass
    return stamp


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lithe")
    parser.add_argument("repo")
    parser.add_argument("scratch")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", help="run the cases whose name matches this regex")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--verbose", action="store_true", help="a line for every case")
    parser.add_argument("--report", help="write every result as JSON to this file")
    args = parser.parse_args()
    lithe = os.path.abspath(args.lithe)
    scratch = os.path.abspath(args.scratch)

    fx = Fixtures(os.path.abspath(args.repo), lithe)
    cases = build_cases(fx)
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    if args.list:
        families = {}
        for c in cases:
            families.setdefault(c.family, []).append(c)
        for fam, items in families.items():
            print("%-14s %4d" % (fam, len(items)))
        for c in cases:
            print("%-60s %-6s %s" % (c.name, c.expect, c.command()))
        print("%d cases" % len(cases))
        return 0
    if not os.access(lithe, os.X_OK):
        print("FAIL: %s is not an executable (not built yet?)" % lithe)
        print("hostile inputs: 0 passed, %d failed" % len(cases))
        return 1

    if os.path.isdir(scratch):
        for dirpath, dirnames, _ in os.walk(scratch):
            for d in dirnames:
                try:
                    p = os.path.join(dirpath, d)
                    if not os.path.islink(p):
                        os.chmod(p, 0o755)
                except OSError:
                    pass
        shutil.rmtree(scratch)
    os.makedirs(os.path.join(scratch, "cases"))
    os.chmod(scratch, 0o755)

    runnable = [c for c in cases if not c.skip]
    skipped = [c for c in cases if c.skip]
    # Longest first (fine-tuning, speedup, possible hangs) so that two workers finish together.
    weight = lambda c: (c.expect == "ok", c.verb in ("train", "speedup", "compress"),  # noqa
                        c.timeout)
    runnable.sort(key=weight, reverse=True)
    devnull_cases = [c for c in runnable if c.devnull]
    parallel = [c for c in runnable if not c.devnull]
    start = time.monotonic()
    stamp = build_stamp(lithe)
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_case, c, lithe, scratch) for c in parallel]
        for f in concurrent.futures.as_completed(futures):
            results.append(f.result())
    for c in devnull_cases:  # one at a time: they touch a shared device node
        results.append(run_case(c, lithe, scratch))

    # The case directories stay for inspection, but without the group/world-writable modes the
    # plugin cases gave them.
    for dirpath, dirnames, filenames in os.walk(scratch):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                    os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o022)
            except OSError:
                pass

    order = {c.name: i for i, c in enumerate(cases)}
    results.sort(key=lambda r: order[r[0].name])
    passed = failed = 0
    report = []
    for case, problems, result in results:
        ok = not problems
        passed += ok
        failed += not ok
        entry = {"name": case.name, "family": case.family, "expect": case.expect,
                 "command": case.command(), "env": case.env, "passed": ok,
                 "problems": problems}
        if result is not None:
            entry.update(rc=result.rc, seconds=round(result.seconds, 2),
                         stderr=result.stderr[-4000:], stdout=result.stdout[-2000:],
                         timed_out=result.timed_out)
        report.append(entry)
        if not ok or args.verbose:
            err = ""
            if result is not None:
                first = (result.stderr.strip() or result.stdout.strip()).replace("\n", " | ")
                err = "; rc=%s%s; stderr: %s" % (result.rc, " (timeout)" if result.timed_out
                                                 else "", first[:200])
            env = " ".join("%s=%s" % kv for kv in case.env.items())
            print("%s %s: %s; cmd: %s%s%s" % ("PASS" if ok else "FAIL", case.name,
                                             "; ".join(problems) or "ok",
                                             env + " " if env else "", case.command(), err))
    for case in skipped:
        print("SKIP %s: %s" % (case.name, case.skip))
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"seconds": round(time.monotonic() - start, 1), "cases": report,
                       "skipped": [{"name": c.name, "reason": c.skip} for c in skipped]},
                      f, indent=1)
    changed = sorted(k for k, v in build_stamp(lithe).items() if stamp.get(k) != v)
    if changed:
        print("NOTE: %d build output(s) changed during the run (a rebuild?), e.g. %s; rerun "
              "for reliable results" % (len(changed), changed[0]))
    print("hostile inputs: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
