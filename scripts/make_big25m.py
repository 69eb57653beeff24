#!/usr/bin/env python3
"""Recipe 1's "Big25M" model (shared/reference/recipes.md): torch.manual_seed(0), PyTorch
default init, eval mode, input 1x3x64x64, 25,618,112 prunable weights in 10 layers.
Usage: .venv/bin/python scripts/make_big25m.py OUT.pt
"""
import sys

import torch
from torch import nn


def conv(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = conv(c, c)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu1 = nn.ReLU()
        self.conv2 = conv(c, c)
        self.bn2 = nn.BatchNorm2d(c)
        self.relu2 = nn.ReLU()

    def forward(self, x):
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu2(y + x)


class Big25M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = conv(3, 64)
        self.conv2 = conv(64, 128, 2)
        self.conv3 = conv(128, 256, 2)
        self.conv4 = conv(256, 512, 2)
        self.block = Block(512)
        self.conv5 = conv(512, 1024, 2)
        self.pool = nn.AvgPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(4096, 2048)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(2048, 2048)
        self.relu2 = nn.ReLU()
        self.fc3 = nn.Linear(2048, 1000)

    def forward(self, x):
        x = self.conv4(self.conv3(self.conv2(self.conv1(x))))
        x = self.pool(self.conv5(self.block(x)))
        x = self.relu1(self.fc1(self.flatten(x)))
        return self.fc3(self.relu2(self.fc2(x)))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    torch.manual_seed(0)
    model = Big25M().eval()
    prunable = sum(m.weight.numel() for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))
    assert prunable == 25_618_112, prunable
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 1000)
    torch.jit.script(model).save(sys.argv[1])
    print("wrote", sys.argv[1], "with", prunable, "prunable weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
