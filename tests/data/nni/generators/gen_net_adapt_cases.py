"""NNI v2.0 NetAdaptPruner golden case, in the format of tests/data/nni/README.md.

Run with Debian's python3-torch and unmodified NNI v2.0 (never by the build or the tests; the
outputs are checked in):

    PYTHONPATH=NNI:NNI/deps:NNI/stubs PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 \
        /usr/bin/python3 tests/data/nni/generators/gen_net_adapt_cases.py tests/data/nni

with NNI = the nni-v2.0 checkout. Writes golden/net_adapt_lenet_level_s0.3 and
golden/net_adapt_lenet_l1_conv_s0.3 and adds them to golden/index.json.

NetAdapt fine-tunes every candidate before evaluating it, so the case fixes everything that
depends on: the short-term fine-tuner is NNI's documented shape (model.train(); a fresh
SGD(lr=0.01) over the recorded batches `train.0`, `train.1` with cross-entropy), the evaluator
minus the mean cross-entropy in eval mode on `batch.0`. Every candidate's metric is recorded in
order (`results.history`), then the final masks. The level case prunes every Conv2d/Linear
layer; the l1 case prunes the convolutions alone, so NNI's step and "previous and next
Conv2d/Linear module" count modules that are not compressed (plugins/net_adapt, SDK 1.9).
"""
import json
import pathlib
import sys
import tempfile

import torch
import torch.nn.functional as F

from golden_common import (NNI, LeNet, case_folder, record_mask, save_tensors,  # noqa: E402
                           stats, write_json)

torch.set_num_threads(1)
root = pathlib.Path(sys.argv[1])
TRAIN_BATCHES, LR = 2, 0.01


def net_adapt_case(name, description, config_list, kwargs):
    from nni.algorithms.compression.pytorch.pruning import NetAdaptPruner
    model = LeNet()
    model.load_state_dict(torch.load(str(root / "models/lenet_state.pt")))
    generator = torch.Generator().manual_seed(2027)
    train = [torch.randn(32, 1, 28, 28, generator=generator) for _ in range(TRAIN_BATCHES)]
    train_labels = [torch.randint(0, 10, (32,), generator=generator) for _ in range(TRAIN_BATCHES)]
    batch = torch.randn(64, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (64,), generator=generator)
    x = torch.randn(4, 1, 28, 28, generator=generator)
    history = []

    def fine_tuner(m):
        m.train()
        optimizer = torch.optim.SGD(m.parameters(), lr=LR)
        for data, target in zip(train, train_labels):
            optimizer.zero_grad()
            F.cross_entropy(m(data), target).backward()
            optimizer.step()

    def evaluator(m):
        m.eval()
        with torch.no_grad():
            metric = -float(F.cross_entropy(m(batch), labels))
        history.append(metric)
        return metric

    with tempfile.TemporaryDirectory() as folder:
        pruner = NetAdaptPruner(model, json.loads(json.dumps(config_list)), fine_tuner,
                                evaluator, experiment_data_dir=folder, **kwargs)
        pruned = pruner.compress()
        generated = pruner._config_list_generated
    tensors = {"batch.0": batch, "labels.0": labels}
    keys = ["batch.0", "labels.0"]
    for i in range(TRAIN_BATCHES):
        tensors[f"train.{i}"], tensors[f"train_labels.{i}"] = train[i], train_labels[i]
        keys += [f"train.{i}", f"train_labels.{i}"]
    masks = {}
    for wrapper in pruner.get_modules_wrapper():
        layer = wrapper.name
        bias = getattr(wrapper, "bias_mask", None)
        sparsity = next((c["sparsity"] for c in generated if layer in c["op_names"]), 0.0)
        masks[layer] = record_mask(tensors, keys, layer, type(wrapper.module).__name__,
                                   wrapper.weight_mask.detach().clone(),
                                   None if bias is None else bias.detach().clone(),
                                   {"sparsity": sparsity, "op_names": [layer]})
    pruned.eval()
    with torch.no_grad():
        tensors["input"], tensors["output"] = x, pruned(x)
    keys += ["input", "output"]
    folder = case_folder(root, name)
    save_tensors(folder, tensors)
    procedure = [
        "model = lenet with weights from models/lenet_state.pt",
        f"short_term_fine_tuner(m): m.train(); optimizer = SGD(m.parameters(), lr={LR}); for s "
        f"in range({TRAIN_BATCHES}): optimizer.zero_grad(); cross_entropy(m(train.s), "
        "train_labels.s).backward(); optimizer.step()",
        "evaluator(m) = -cross_entropy(m(batch.0), labels.0) in eval mode with torch.no_grad()",
        "pruner = NetAdaptPruner(model, config_list, short_term_fine_tuner, evaluator, "
        "**kwargs, experiment_data_dir=<temporary>); pruned = pruner.compress()",
        "results.history = every evaluator result, in order; masks = the wrappers' masks "
        "after compress",
        "output = pruned.eval()(input) with torch.no_grad()"]
    write_json(folder / "config.json", {
        "case": name, "description": description, "model": "lenet",
        "model_files": {"torchscript": "models/lenet.pt", "state": "models/lenet_state.pt"},
        "algorithm": "NetAdaptPruner",
        "algorithm_module": "nni.algorithms.compression.pytorch.pruning",
        "config_list": config_list, "kwargs": kwargs, "metric": "negative_cross_entropy",
        "trainer": {"optimizer": "SGD", "lr": LR, "loss": "cross_entropy", "mode": "train",
                    "batches_per_epoch": TRAIN_BATCHES, "batch": "train",
                    "labels": "train_labels", "optimizer_per_call": True},
        "procedure": procedure, "tensors_file": "tensors.pt", "tensor_keys": keys,
        "extra_files": [], "nni": NNI, "torch_version": torch.__version__})
    write_json(folder / "summary.json", {
        "tensors": {k: stats(v) for k, v in tensors.items()},
        "results": {"masks": masks, "history": history, "config_list_generated": generated}})
    print(f"{name}: {len(history)} candidates, generated {generated}")
    return {"status": "ok", "description": description, "algorithm": "NetAdaptPruner",
            "model": "lenet"}


def main():
    index_path = root / "golden/index.json"
    index = json.loads(index_path.read_text())
    index["cases"]["net_adapt_lenet_level_s0.3"] = net_adapt_case(
        "net_adapt_lenet_level_s0.3",
        "NetAdaptPruner level to 0.3 over every Conv2d/Linear layer of lenet in steps of 0.1, "
        "each candidate fine-tuned on 2 recorded batches (SGD 0.01) and scored by minus the "
        "cross-entropy of a third",
        [{"sparsity": 0.3, "op_types": ["default"]}],
        {"base_algo": "level", "sparsity_per_iteration": 0.1})
    index["cases"]["net_adapt_lenet_l1_conv_s0.3"] = net_adapt_case(
        "net_adapt_lenet_l1_conv_s0.3",
        "NetAdaptPruner l1 to 0.3 over the Conv2d layers of lenet in steps of 0.1: NNI's step "
        "counts every Conv2d/Linear weight of the model and a layer's neighbours are the "
        "model's Conv2d/Linear modules, compressed or not (SDK 1.9 weighted_modules)",
        [{"sparsity": 0.3, "op_types": ["Conv2d"]}],
        {"base_algo": "l1", "sparsity_per_iteration": 0.1})
    write_json(index_path, index)


if __name__ == "__main__":
    main()
