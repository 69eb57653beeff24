"""Golden cases beyond the bundled NNI v2.0 set, in the same format (tests/data/nni/README.md).

Run with Debian's python3-torch and unmodified NNI v2.0 (never by the build or the tests; the
outputs are checked in):

    PYTHONPATH=NNI:NNI/deps:NNI/stubs PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 \
        /usr/bin/python3 tests/data/nni/generators/gen_extra_cases.py tests/data/nni

with NNI = the nni-v2.0 checkout. Writes:
  models/seqnet{,_state,_io}.pt
                           a net whose layers are numbered children of nn.Sequential
                           (features.0, features.3, classifier.0, classifier.2)
  golden/naive_seqnet_w8, golden/dorefa_seqnet_w8
                           NNI's NaiveQuantizer / DoReFaQuantizer on it, two eval forwards
  golden/lottery_ticket_lenet_partial_masks
                           NNI's lottery_ticket_lenet case with the masks of rounds 2 and 4
                           left out (the format lets a case store some rounds only)
"""
import copy
import json
import os
import pathlib
import shutil
import sys

import torch
import torch.nn as nn

from golden_common import NNI, stats, write_json  # noqa: E402

torch.set_num_threads(2)
root = pathlib.Path(sys.argv[1])




class SeqNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(4, 8, 3), nn.ReLU(), nn.MaxPool2d(2))
        self.flatten = nn.Flatten()
        self.classifier = nn.Sequential(nn.Linear(200, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.classifier(self.flatten(self.features(x)))


def make_seqnet():
    torch.manual_seed(1006)
    model = SeqNet().eval()
    models = root / "models"
    torch.jit.script(model).save(str(models / "seqnet.pt"))
    # Plain dicts: libtorch's unpickler reads a dict, not an OrderedDict.
    torch.save(dict(model.state_dict()), str(models / "seqnet_state.pt"))
    torch.manual_seed(1007)
    x = torch.randn(1, 1, 28, 28)
    with torch.no_grad():
        torch.save({"input": x, "output_eval": model(x)}, str(models / "seqnet_io.pt"))
    return model


LAYERS = ["features.0", "features.3", "classifier.0", "classifier.2"]


def quantizer_case(name, cls, description, with_scale):
    from nni.algorithms.compression.pytorch.quantization import DoReFaQuantizer, NaiveQuantizer
    quantizer_class = {"NaiveQuantizer": NaiveQuantizer, "DoReFaQuantizer": DoReFaQuantizer}[cls]
    model = SeqNet()
    model.load_state_dict(torch.load(str(root / "models/seqnet_state.pt")))
    config_list = [{"quant_types": ["weight"], "quant_bits": {"weight": 8},
                    "op_types": ["default"]}]
    quantizer = quantizer_class(model, copy.deepcopy(config_list))
    quantizer.compress()
    model.eval()
    wrappers = {n: m for n, m in model.named_modules() if hasattr(m, "module") and n in LAYERS}
    assert sorted(wrappers) == sorted(LAYERS), sorted(wrappers)
    torch.manual_seed(7)
    tensors, keys = {}, []
    for i in range(2):
        x = torch.randn(4, 1, 28, 28)
        with torch.no_grad():
            out = model(x)
        tensors[f"input.{i}"], tensors[f"output.{i}"] = x, out
        keys += [f"input.{i}", f"output.{i}"]
        for layer in LAYERS:
            key = f"fwd{i}/{layer}.weight"
            tensors[key] = wrappers[layer].module.weight.detach().clone()
            keys.append(key)
        if with_scale:
            for layer in LAYERS:
                key = f"fwd{i}/layer_scale.{layer}"
                tensors[key] = torch.as_tensor(quantizer.layer_scale[layer]).detach().clone()
                keys.append(key)
    folder = root / "golden" / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    torch.save(tensors, str(folder / "tensors.pt"))
    procedure = [f"q = {cls}(model, config_list); q.compress(); model.eval()",
                 "for i in range(2): with no_grad: output.i = model(input.i); "
                 "fwd<i>/<layer>.weight = wrapper.module.weight (the quantized weight buffer used "
                 "by the forward)"]
    write_json(folder / "config.json", {
        "case": name, "description": description, "model": "seqnet",
        "model_files": {"torchscript": "models/seqnet.pt", "state": "models/seqnet_state.pt"},
        "algorithm": cls,
        "algorithm_module": "nni.algorithms.compression.pytorch.quantization",
        "config_list": config_list, "kwargs": {}, "procedure": procedure,
        "tensors_file": "tensors.pt", "tensor_keys": keys, "extra_files": [], "nni": NNI,
        "torch_version": torch.__version__})
    write_json(folder / "summary.json", {
        "tensors": {k: stats(v) for k, v in tensors.items()},
        "results": {"wrappers": {layer: {"type": type(wrappers[layer].module).__name__,
                                         "config": json.loads(json.dumps(wrappers[layer].config))}
                                 for layer in LAYERS}}})
    return {"status": "ok", "description": description, "algorithm": cls, "model": "seqnet"}


def partial_lottery_case():
    source = root / "golden" / "lottery_ticket_lenet"
    name = "lottery_ticket_lenet_partial_masks"
    folder = root / "golden" / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    dropped = ["iter2/", "iter4/"]
    config = json.loads((source / "config.json").read_text())
    config["case"] = name
    config["description"] += " (masks of rounds 2 and 4 not stored)"
    config["tensor_keys"] = [k for k in config["tensor_keys"]
                             if not any(k.startswith(d) for d in dropped)]
    summary = json.loads((source / "summary.json").read_text())
    for r in (2, 4):
        del summary["results"][f"masks_iter{r}"]
    summary["tensors"] = {k: v for k, v in summary["tensors"].items()
                          if not any(k.startswith(d) for d in dropped)}
    tensors = torch.load(str(source / "tensors.pt"))
    tensors = {k: v for k, v in tensors.items() if not any(k.startswith(d) for d in dropped)}
    torch.save(tensors, str(folder / "tensors.pt"))
    write_json(folder / "config.json", config)
    write_json(folder / "summary.json", summary)
    index = json.loads((root / "golden/index.json").read_text())["cases"]["lottery_ticket_lenet"]
    return dict(index, description=config["description"])


def main():
    make_seqnet()
    index_path = root / "golden/index.json"
    index = json.loads(index_path.read_text())
    index["cases"]["naive_seqnet_w8"] = quantizer_case(
        "naive_seqnet_w8", "NaiveQuantizer",
        "NaiveQuantizer 8-bit weights on seqnet, whose layers are numbered nn.Sequential children",
        with_scale=True)
    index["cases"]["dorefa_seqnet_w8"] = quantizer_case(
        "dorefa_seqnet_w8", "DoReFaQuantizer",
        "DoReFaQuantizer 8-bit weights on seqnet, whose layers are numbered nn.Sequential children",
        with_scale=False)
    index["cases"]["lottery_ticket_lenet_partial_masks"] = partial_lottery_case()
    write_json(index_path, index)


if __name__ == "__main__":
    main()
