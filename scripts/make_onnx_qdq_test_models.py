#!/usr/bin/env python3
"""Builds the TorchScript model the QDQ export tests use for module calls that are not one call
per module (run with the project's .venv/bin/python). The output is committed (made
with torch 1.13; it loads in every later libtorch); rerun only to change it.

  tests/data/onnx_qdq_shared_calls.pt   input [1, 3, 8, 8]: conv and relu are each called twice
                                        (their quantization runs at both calls, with one weight
                                        initializer), and the parent also reads fc.weight
                                        itself (a tied weight: the runtime computes that read
                                        with the float weight, only fc's own read is quantized)
"""
import os
import sys

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SharedCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(3 * 8 * 8, 10)

    def forward(self, x):
        x = self.relu(self.conv(x))
        x = self.relu(self.conv(x))
        h = torch.flatten(x, 1)
        return self.fc(h) + nn.functional.linear(h, self.fc.weight)


def main():
    if os.environ.get("PYTHONHASHSEED") != "0":  # the archive's constant order follows hashing
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    torch.manual_seed(0)
    model = torch.jit.script(SharedCalls().eval())
    model.save(os.path.join(ROOT, "tests/data/onnx_qdq_shared_calls.pt"))


if __name__ == "__main__":
    main()
