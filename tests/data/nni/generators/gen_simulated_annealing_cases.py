"""NNI v2.0 SimulatedAnnealingPruner golden cases, in the format of tests/data/nni/README.md.

Run with Debian's python3-torch and unmodified NNI v2.0 (never by the build or the tests; the
outputs are checked in):

    PYTHONPATH=NNI:NNI/deps:NNI/stubs PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 \
        /usr/bin/python3 tests/data/nni/generators/gen_simulated_annealing_cases.py tests/data/nni

with NNI = the nni-v2.0 checkout. Writes golden/sa_lenet_l1_s0.5 and golden/sa_lenet_level_s0.6
and adds them to golden/index.json.

The search is random: each case seeds NumPy (np.random.seed(config.json `seed`)) right before
compress(), and Lithe's plugin takes the same number as its `seed` option (it draws NumPy's
numbers). The evaluator is continuous so that the comparison is strong: minus the mean
cross-entropy of the pruned model in eval mode on one recorded batch (`batch.0`, `labels.0`).
The case records every candidate's metric in order (`results.history`: the whole path of the
search) and the best candidate's masks; layers the best candidate leaves unpruned get all-ones
masks.
"""
import json
import pathlib
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

from golden_common import (NNI, LeNet, case_folder, record_mask, save_tensors,  # noqa: E402
                           stats, write_json)

torch.set_num_threads(1)
root = pathlib.Path(sys.argv[1])


def sa_case(name, description, config_list, kwargs, seed):
    from nni.algorithms.compression.pytorch.pruning import SimulatedAnnealingPruner
    model = LeNet()
    model.load_state_dict(torch.load(str(root / "models/lenet_state.pt")))
    model.eval()
    generator = torch.Generator().manual_seed(2026)
    batch = torch.randn(64, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (64,), generator=generator)
    x = torch.randn(4, 1, 28, 28, generator=generator)

    def evaluator(m):
        m.eval()
        with torch.no_grad():
            return -float(F.cross_entropy(m(batch), labels))

    with tempfile.TemporaryDirectory() as folder:
        pruner = SimulatedAnnealingPruner(model, json.loads(json.dumps(config_list)), evaluator,
                                          experiment_data_dir=folder, **kwargs)
        np.random.seed(seed)
        pruned = pruner.compress()
        history = [item["performance"] for item in pruner._search_history]
        history_configs = [item["config_list"] for item in pruner._search_history]
        best_config = pruner._best_config_list
        best = pruner._best_performance
    tensors = {"batch.0": batch, "labels.0": labels}
    keys = ["batch.0", "labels.0"]
    wrapped = {w.name: w for w in pruner.get_modules_wrapper()}
    masks = {}
    selected = [n for n, m in LeNet().named_modules()
                if type(m).__name__ in ("Conv2d", "Linear") and
                (config_list[0]["op_types"] == ["default"] or
                 type(m).__name__ in config_list[0]["op_types"])]
    modules = dict(pruned.named_modules())
    for layer in selected:
        wrapper = wrapped.get(layer)
        module = wrapper.module if wrapper is not None else modules[layer]
        bias = getattr(wrapper, "bias_mask", None) if wrapper is not None else None
        masks[layer] = record_mask(
            tensors, keys, layer, type(module).__name__,
            (wrapper.weight_mask.detach().clone() if wrapper is not None
             else torch.ones_like(module.weight)),
            None if bias is None else bias.detach().clone(),
            json.loads(json.dumps(wrapper.config)) if wrapper else {"sparsity": 0.0})
    with torch.no_grad():
        tensors["input"], tensors["output"] = x, pruned(x)
    keys += ["input", "output"]
    folder = case_folder(root, name)
    save_tensors(folder, tensors)
    procedure = [
        "model = lenet with weights from models/lenet_state.pt, eval mode",
        "evaluator(m) = -cross_entropy(m(batch.0), labels.0) in eval mode with torch.no_grad()",
        "pruner = SimulatedAnnealingPruner(model, config_list, evaluator, **kwargs, "
        "experiment_data_dir=<temporary>); np.random.seed(seed); pruned = pruner.compress()",
        "results.history = [h['performance'] for h in pruner._search_history] (every "
        "candidate, in order); results.best = pruner._best_performance; masks = the best "
        "candidate's wrappers' masks, all ones for selected layers it left unpruned",
        "output = pruned(input) with torch.no_grad()"]
    write_json(folder / "config.json", {
        "case": name, "description": description, "model": "lenet",
        "model_files": {"torchscript": "models/lenet.pt", "state": "models/lenet_state.pt"},
        "algorithm": "SimulatedAnnealingPruner",
        "algorithm_module": "nni.algorithms.compression.pytorch.pruning",
        "config_list": config_list, "kwargs": kwargs, "seed": seed,
        "metric": "negative_cross_entropy",
        "procedure": procedure, "tensors_file": "tensors.pt", "tensor_keys": keys,
        "extra_files": [], "nni": NNI, "torch_version": torch.__version__})
    write_json(folder / "summary.json", {
        "tensors": {k: stats(v) for k, v in tensors.items()},
        "results": {"masks": masks, "history": history, "best": best,
                    "history_config_lists": history_configs, "best_config_list": best_config}})
    print(f"{name}: {len(history)} candidates, best {best:.6f}")
    return {"status": "ok", "description": description, "algorithm": "SimulatedAnnealingPruner",
            "model": "lenet"}


def main():
    index_path = root / "golden/index.json"
    index = json.loads(index_path.read_text())
    index["cases"]["sa_lenet_l1_s0.5"] = sa_case(
        "sa_lenet_l1_s0.5",
        "SimulatedAnnealingPruner l1 to 0.5 over lenet's Conv2d layers, NNI's default "
        "schedule (start 100, stop 20, cool-down 0.9, perturbation 0.35), seed 7",
        [{"sparsity": 0.5, "op_types": ["Conv2d"]}], {"base_algo": "l1"}, 7)
    index["cases"]["sa_lenet_level_s0.6"] = sa_case(
        "sa_lenet_level_s0.6",
        "SimulatedAnnealingPruner level to 0.6 over every weighted layer of lenet, start "
        "0.0005, stop 0.0001, cool-down 0.7, perturbation 0.2, seed 3: temperatures near the "
        "metric's differences, so that candidates are also rejected",
        [{"sparsity": 0.6, "op_types": ["default"]}],
        {"base_algo": "level", "start_temperature": 0.0005, "stop_temperature": 0.0001,
         "cool_down_rate": 0.7, "perturbation_magnitude": 0.2}, 3)
    write_json(index_path, index)


if __name__ == "__main__":
    main()
