"""NNI v2.0 ADMMPruner golden cases, in the format of tests/data/nni/README.md.

Run with Debian's python3-torch and unmodified NNI v2.0 (never by the build or the tests; the
outputs are checked in):

    PYTHONPATH=NNI:NNI/deps:NNI/stubs PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 \
        /usr/bin/python3 tests/data/nni/generators/gen_admm_cases.py tests/data/nni

with NNI = the nni-v2.0 checkout. Writes golden/admm_lenet_level_s0.8 and
golden/admm_lenet_l1_s0.5 and adds them to golden/index.json.

ADMM trains, so a case fixes everything training depends on: the model's starting weights
(models/lenet_state.pt), the batches and labels of every epoch (recorded, the same each epoch,
in order) and NNI's own optimizer (ADMMPruner.compress builds Adam(lr=1e-3, weight_decay=5e-5)
and keeps it across iterations) with cross-entropy. The trainer is NNI's documented one:
model.train(); per batch zero_grad, loss, backward, callback() (the proximal step), step.

NNI v2.0 has no LinearPruner and no sparse training in SlimPruner (both arrived in later
versions), so there are no v2.0 cases for them.
"""
import json
import pathlib
import sys

import torch

from golden_common import (NNI, LeNet, case_folder, record_mask, save_tensors,  # noqa: E402
                           stats, write_json)

torch.set_num_threads(1)
root = pathlib.Path(sys.argv[1])
BATCHES, BATCH_SIZE = 4, 16


def admm_case(name, description, config_list, kwargs):
    from nni.algorithms.compression.pytorch.pruning import ADMMPruner
    model = LeNet()
    model.load_state_dict(torch.load(str(root / "models/lenet_state.pt")))
    generator = torch.Generator().manual_seed(2024)
    batches = [torch.randn(BATCH_SIZE, 1, 28, 28, generator=generator) for _ in range(BATCHES)]
    labels = [torch.randint(0, 10, (BATCH_SIZE,), generator=generator) for _ in range(BATCHES)]
    x = torch.randn(4, 1, 28, 28, generator=generator)
    steps = []

    def trainer(model, optimizer, criterion, epoch, callback):
        model.train()
        for data, target in zip(batches, labels):
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
            if callback:
                callback()
            optimizer.step()
            steps.append(float(loss))

    pruner = ADMMPruner(model, json.loads(json.dumps(config_list)), trainer=trainer, **kwargs)
    pruner.compress()
    tensors, keys, masks = {}, [], {}
    for i in range(BATCHES):
        tensors[f"batch.{i}"], tensors[f"labels.{i}"] = batches[i], labels[i]
        keys += [f"batch.{i}", f"labels.{i}"]
    for wrapper in pruner.get_modules_wrapper():
        layer = wrapper.name
        # The trained weight (W after the last iteration), before the masks multiply it.
        tensors[f"trained.{layer}"] = wrapper.module.weight.detach().clone()
        keys.append(f"trained.{layer}")
        bias = getattr(wrapper, "bias_mask", None)
        masks[layer] = record_mask(tensors, keys, layer, type(wrapper.module).__name__,
                                   wrapper.weight_mask.detach().clone(),
                                   None if bias is None else bias.detach().clone(),
                                   json.loads(json.dumps(wrapper.config)))
    model.eval()
    with torch.no_grad():
        tensors["input"], tensors["output"] = x, model(x)
    keys += ["input", "output"]
    folder = case_folder(root, name)
    save_tensors(folder, tensors)
    procedure = [
        "model = lenet with weights from models/lenet_state.pt",
        "trainer(model, optimizer, criterion, epoch, callback): model.train(); for s in "
        f"range({BATCHES}): optimizer.zero_grad(); loss = criterion(model(batch.s), labels.s); "
        "loss.backward(); callback(); optimizer.step()",
        "pruner = ADMMPruner(model, config_list, trainer=trainer, **kwargs); pruner.compress() "
        "(NNI's optimizer: Adam(model.parameters(), lr=1e-3, weight_decay=5e-5), one for all "
        "iterations; criterion CrossEntropyLoss)",
        "trained.<layer> = wrapper.module.weight after compress (W before masking); masks = "
        "wrapper.weight_mask / wrapper.bias_mask",
        "output = model.eval()(input) with torch.no_grad() (wrapped model: weights multiplied "
        "by masks)"]
    write_json(folder / "config.json", {
        "case": name, "description": description, "model": "lenet",
        "model_files": {"torchscript": "models/lenet.pt", "state": "models/lenet_state.pt"},
        "algorithm": "ADMMPruner",
        "algorithm_module": "nni.algorithms.compression.pytorch.pruning",
        "config_list": config_list, "kwargs": kwargs,
        "trainer": {"optimizer": "Adam", "lr": 1e-3, "weight_decay": 5e-5,
                    "loss": "cross_entropy", "mode": "train", "batches_per_epoch": BATCHES},
        "procedure": procedure, "tensors_file": "tensors.pt", "tensor_keys": keys,
        "extra_files": [], "nni": NNI, "torch_version": torch.__version__})
    write_json(folder / "summary.json", {
        "tensors": {k: stats(v) for k, v in tensors.items()},
        "results": {"masks": masks, "training_losses": steps}})
    return {"status": "ok", "description": description, "algorithm": "ADMMPruner",
            "model": "lenet"}


def main():
    index_path = root / "golden/index.json"
    index = json.loads(index_path.read_text())
    index["cases"]["admm_lenet_level_s0.8"] = admm_case(
        "admm_lenet_level_s0.8",
        "ADMMPruner level 0.8 on every weighted layer of lenet, 3 iterations of 1 epoch "
        "(4 recorded batches), row 0.1",
        [{"sparsity": 0.8, "op_types": ["default"]}],
        {"num_iterations": 3, "training_epochs": 1, "row": 0.1, "base_algo": "level"})
    index["cases"]["admm_lenet_l1_s0.5"] = admm_case(
        "admm_lenet_l1_s0.5",
        "ADMMPruner l1 0.5 on the Conv2d filters of lenet, 2 iterations of 2 epochs "
        "(4 recorded batches), row 0.1",
        [{"sparsity": 0.5, "op_types": ["Conv2d"]}],
        {"num_iterations": 2, "training_epochs": 2, "row": 0.1, "base_algo": "l1"})
    write_json(index_path, index)


if __name__ == "__main__":
    main()
