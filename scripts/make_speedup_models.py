#!/usr/bin/env python3
"""Writes the two CIFAR-sized TorchScript models of scripts/bench-speedup.sh.

- vgg16_bn.pt: VGG-16 with BatchNorm (CIFAR variant: 13 convs 3x3/pad 1 with BN + ReLU, five
  2x2 max-pools, 512x1x1 features flattened into one Linear(512, 10)). 14.7 M parameters.
- resnet18.pt: ResNet-18 for CIFAR (3x3 stem without max-pool, four stages of two BasicBlocks,
  64/128/256/512 channels, identity shortcuts inside a stage and 1x1-conv + BN shortcuts where
  the stride or width changes, adaptive average pool, fc). 11.2 M parameters.

Input 3x32x32 for both. Built with fixed seeds (default PyTorch init), then every BatchNorm2d
gets deterministic non-trivial affine parameters and running statistics as the conformance
models do (weight in [0.2, 1.5), bias in [-0.2, 0.2), running_mean in [-0.2, 0.2), running_var in
[0.5, 1.5)), so that the BatchNorm shift `lithe speedup` reports is not zero. Saved in eval mode
with torch.jit.script. The weights are untrained: the benchmark measures size and speed, not
accuracy. Run with an interpreter that has torch (on the development machines:
/usr/bin/python3):

    .venv/bin/python scripts/make_speedup_models.py [OUT_DIR]   # default build/bench/speedup
"""
import os
import sys
from typing import List, Union

import torch
from torch import Tensor, nn

VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


class VGG(nn.Module):
    def __init__(self, cfg: List[Union[int, str]], num_classes: int = 10):
        super().__init__()
        layers: List[nn.Module] = []
        cin = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.BatchNorm2d(int(v)),
                           nn.ReLU(inplace=True)]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(cin, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.flatten(self.features(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU(inplace=True)
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))
        else:
            self.shortcut = nn.Sequential()

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(64, 64, 1), BasicBlock(64, 64, 1))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128, 1))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256, 1))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512, 1))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flatten(self.avgpool(x)))


def randomise_batchnorm(model: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)

    def uniform(n: int, lo: float, hi: float) -> Tensor:
        return lo + (hi - lo) * torch.rand(n, generator=g)

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(uniform(c, 0.2, 1.5))
                m.bias.copy_(uniform(c, -0.2, 0.2))
                m.running_mean.copy_(uniform(c, -0.2, 0.2))
                m.running_var.copy_(uniform(c, 0.5, 1.5))


def build(name: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = VGG(VGG16) if name == "vgg16_bn" else ResNet18()
    randomise_batchnorm(model, seed + 1)
    return model.eval()


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "bench", "speedup")
    os.makedirs(out, exist_ok=True)
    for name, seed in (("vgg16_bn", 0), ("resnet18", 1)):
        model = build(name, seed)
        scripted = torch.jit.script(model)
        x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            diff = (scripted(x) - model(x)).abs().max().item()
        assert diff <= 1e-5, (name, diff)
        path = os.path.join(out, name + ".pt")
        scripted.save(path)
        params = sum(p.numel() for p in model.parameters())
        print("wrote %s (%d parameters)" % (path, params))


if __name__ == "__main__":
    main()
