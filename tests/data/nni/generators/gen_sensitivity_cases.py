"""NNI v2.0 SensitivityAnalysis golden cases, in the format of tests/data/nni/README.md.

Run with Debian's python3-torch and unmodified NNI v2.0 (never by the build or the tests; the
outputs are checked in):

    PYTHONPATH=NNI:NNI/deps:NNI/stubs PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 \
        /usr/bin/python3 tests/data/nni/generators/gen_sensitivity_cases.py tests/data/nni

with NNI = the nni-v2.0 checkout. Writes golden/sensitivity_lenet_l1,
golden/sensitivity_lenet_level_raised and golden/sensitivity_vgg_bn_l2 and adds them to
golden/index.json.

The metric (val_func) is continuous so that the comparison is strong: minus the mean
cross-entropy of the model in eval mode on one recorded batch (`batch.0`, `labels.0`); higher is
better, as NNI's early stop modes assume. NNI's export (sensitivity.csv) is kept as an extra
file.
"""
import json
import pathlib
import shutil
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from golden_common import NNI, LeNet, stats, write_json  # noqa: E402

torch.set_num_threads(1)
root = pathlib.Path(sys.argv[1])


class VggBn(nn.Module):  # models/vgg_bn.pt, by module name
    def __init__(self):
        super().__init__()
        for i, (cin, cout) in enumerate([(3, 16), (16, 32), (32, 64)], 1):
            setattr(self, f"conv{i}", nn.Conv2d(cin, cout, 3, padding=1))
            setattr(self, f"bn{i}", nn.BatchNorm2d(cout))
            setattr(self, f"relu{i}", nn.ReLU())
            setattr(self, f"pool{i}", nn.MaxPool2d(2))
        self.avgpool = nn.AvgPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(256, 10)

    def forward(self, x):
        for i in range(1, 4):
            x = getattr(self, f"pool{i}")(getattr(self, f"relu{i}")(
                getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x))))
        return self.fc1(self.flatten(self.avgpool(x)))


def sensitivity_case(name, model_name, model, shape, description, kwargs):
    from nni.compression.pytorch.utils.sensitivity_analysis import SensitivityAnalysis
    model.load_state_dict(torch.load(str(root / f"models/{model_name}_state.pt")))
    model.eval()
    generator = torch.Generator().manual_seed(2025)
    batch = torch.randn(64, *shape, generator=generator)
    labels = torch.randint(0, 10, (64,), generator=generator)

    def val():
        model.eval()
        with torch.no_grad():
            return -float(F.cross_entropy(model(batch), labels))

    analysis = SensitivityAnalysis(model, val, **kwargs)
    table = analysis.analysis()
    folder = root / "golden" / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    analysis.export(str(folder / "sensitivity.csv"))
    tensors = {"batch.0": batch, "labels.0": labels}
    torch.save(tensors, str(folder / "tensors.pt"))
    procedure = [
        f"model = {model_name} with weights from models/{model_name}_state.pt, eval mode",
        "val() = -cross_entropy(model(batch.0), labels.0) in eval mode with torch.no_grad()",
        "analysis = SensitivityAnalysis(model, val, **kwargs); analysis.analysis(); "
        "analysis.export('sensitivity.csv')",
        "results.sensitivities = analysis.sensitivities ({layer: {sparsity: metric}}, the "
        "sparsities a layer reached); results.original = analysis.ori_metric"]
    write_json(folder / "config.json", {
        "case": name, "description": description, "model": model_name,
        "model_files": {"torchscript": f"models/{model_name}.pt",
                        "state": f"models/{model_name}_state.pt"},
        "algorithm": "SensitivityAnalysis",
        "algorithm_module": "nni.compression.pytorch.utils.sensitivity_analysis",
        "api": "SensitivityAnalysis", "config_list": [], "kwargs": kwargs,
        "metric": "negative_cross_entropy",
        "procedure": procedure, "tensors_file": "tensors.pt", "tensor_keys": list(tensors),
        "extra_files": ["sensitivity.csv"], "nni": NNI, "torch_version": torch.__version__})
    write_json(folder / "summary.json", {
        "tensors": {k: stats(v) for k, v in tensors.items()},
        "results": {"original": analysis.ori_metric,
                    "sparsities": [float(s) for s in analysis.sparsities],
                    "sensitivities": {layer: [[float(s), float(m)] for s, m in
                                              sorted(row.items())]
                                      for layer, row in table.items()}}})
    return {"status": "ok", "description": description, "algorithm": "SensitivityAnalysis",
            "model": model_name}


def main():
    index_path = root / "golden/index.json"
    index = json.loads(index_path.read_text())
    cases = index["cases"]
    cases["sensitivity_lenet_l1"] = sensitivity_case(
        "sensitivity_lenet_l1", "lenet", LeNet(), (1, 28, 28),
        "SensitivityAnalysis of lenet's Conv2d layers with L1 filter pruning at NNI's default "
        "sparsities 0.1..0.9, no early stop", {"prune_type": "l1"})
    cases["sensitivity_lenet_level_raised"] = sensitivity_case(
        "sensitivity_lenet_level_raised", "lenet", LeNet(), (1, 28, 28),
        "SensitivityAnalysis with level pruning at 0.95, 0.2, 0.5, 0.8 (sorted by NNI), early "
        "stop once the metric rose by more than 0.002 (conv1 stops at 0.8)",
        {"prune_type": "level", "sparsities": [0.95, 0.2, 0.5, 0.8],
         "early_stop_mode": "raised", "early_stop_value": 0.002})
    cases["sensitivity_vgg_bn_l2"] = sensitivity_case(
        "sensitivity_vgg_bn_l2", "vgg_bn", VggBn(), (3, 32, 32),
        "SensitivityAnalysis of vgg_bn's three Conv2d layers with L2 filter pruning at 0.25, "
        "0.5, 0.75", {"prune_type": "l2", "sparsities": [0.25, 0.5, 0.75]})
    write_json(index_path, index)


if __name__ == "__main__":
    main()
