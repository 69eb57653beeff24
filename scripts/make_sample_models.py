#!/usr/bin/env python3
"""Builds the small TorchScript models bundled with Lithe (run with the project's
.venv/bin/python). Outputs are committed (made with torch 1.13; they load in every later
libtorch); rerun only to change them.

  samples/models/lenet.pt          LeNet-5 for 1x28x28 inputs (seed 0), the README's main job
  tests/data/shared_blocks.pt      two identical Blocks (shared TorchScript class types)
"""
import os
import sys

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(256, 120)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(120, 84)
        self.relu4 = nn.ReLU()
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu3(self.fc1(x))
        x = self.relu4(self.fc2(x))
        return self.fc3(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.fc(x))


class SharedBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.blocks(x))


def save(module, relative):
    path = os.path.join(ROOT, relative)
    scripted = torch.jit.script(module.eval())
    scripted.save(path)
    print("wrote", relative)


def main():
    torch.manual_seed(0)
    save(LeNet(), "samples/models/lenet.pt")
    torch.manual_seed(1)
    save(SharedBlocks(), "tests/data/shared_blocks.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
