"""What the golden-case generators share: NNI's identity, the tensor summaries and JSON layout of
summary.json/config.json (tests/data/nni/README.md), and the Python classes of the bundled
models, by module name, so that a generator can load models/NAME_state.pt into them."""
import json

import torch
import torch.nn as nn

NNI = {"tag": "v2.0", "commit": "649ee5975b5206ac2b801fb92874f826eeb7a33c"}


def stats(t):
    t = t.detach()
    flat = t.reshape(-1).double()
    index = torch.arange(1, flat.numel() + 1, dtype=torch.float64)
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
            "numel": t.numel(), "zeros": int((flat == 0).sum()), "sum": float(flat.sum()),
            "abs_sum": float(flat.abs().sum()), "wsum": float((flat * index).sum()),
            "min": float(flat.min()) if flat.numel() else 0.0,
            "max": float(flat.max()) if flat.numel() else 0.0}


def write_json(path, value):
    path.write_text(json.dumps(value, indent=1) + "\n")


class LeNet(nn.Module):  # models/lenet.pt, by module name
    def __init__(self):
        super().__init__()
        self.conv1, self.relu1, self.pool1 = nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2)
        self.conv2, self.relu2, self.pool2 = nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2)
        self.fc1, self.relu3 = nn.Linear(256, 120), nn.ReLU()
        self.fc2, self.relu4 = nn.Linear(120, 84), nn.ReLU()
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.relu3(self.fc1(torch.flatten(x, 1)))
        return self.fc3(self.relu4(self.fc2(x)))


def record_mask(tensors, keys, layer, module_type, weight_mask, bias_mask, config):
    """Adds LAYER.weight_mask (and LAYER.bias_mask when given) to a case's tensors and keys;
    returns the layer's `results.masks` entry."""
    tensors[f"{layer}.weight_mask"] = weight_mask
    keys.append(f"{layer}.weight_mask")
    bias_key = None
    if bias_mask is not None:
        bias_key = f"{layer}.bias_mask"
        tensors[bias_key] = bias_mask
        keys.append(bias_key)
    return {"type": module_type, "config": config, "weight": f"{layer}.weight_mask",
            "bias": bias_key, "weight_numel": weight_mask.numel(),
            "weight_zeros": int((weight_mask == 0).sum())}


def case_folder(root, name):
    """golden/NAME, emptied."""
    import shutil
    folder = root / "golden" / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def save_tensors(folder, tensors):
    torch.save({k: v.contiguous() for k, v in tensors.items()}, str(folder / "tensors.pt"))
