#!/usr/bin/env python3
"""Builds the TorchScript models the ONNX export error tests use (run with the
project's .venv/bin/python). Outputs are committed (made with torch 1.13; TorchScript files load in
every later libtorch); rerun only to change them.
Each model is tiny (3 input channels, 8x8 input) and holds one thing the exporter must refuse:

  tests/data/onnx_error_conv_transpose.pt           ConvTranspose2d, traced: aten::_convolution
                                                    with transposed=True
  tests/data/onnx_error_conv_transpose_scripted.pt  the same, scripted: aten::conv_transpose2d
  tests/data/onnx_error_conv_same.pt                Conv2d(padding='same'): string padding
  tests/data/onnx_error_avg_pool_divisor.pt         AvgPool2d(divisor_override=3)
  tests/data/onnx_error_add_alpha.pt                torch.add(x, y, alpha=2) in the model's own
                                                    forward
  tests/data/onnx_error_div_floor.pt                torch.div(x, y, rounding_mode='floor') in
                                                    submodule 'head'
  tests/data/onnx_error_batchnorm_no_stats.pt       BatchNorm2d(track_running_stats=False), saved
                                                    in eval mode
  tests/data/onnx_error_second_input.pt             forward(x, y: Optional[Tensor] = None)
  tests/data/onnx_error_two_inputs.pt               forward(x, y): two required tensor inputs
  tests/data/onnx_error_sort.pt                     x.sort(dim=1) inside submodule 'body'
"""
import os
import sys
from typing import Optional

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUT = (1, 3, 8, 8)


class ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)

    def forward(self, x):
        return self.up(torch.relu(self.conv(x)))


class ConvSame(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding="same")

    def forward(self, x):
        return torch.relu(self.conv(x))


class AvgPoolDivisor(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AvgPool2d(2, divisor_override=3)

    def forward(self, x):
        return self.pool(self.conv(x))


class AddAlpha(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_a = nn.Conv2d(3, 4, 3, padding=1)
        self.conv_b = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.add(self.conv_a(x), self.conv_b(x), alpha=2)


class FloorDivide(nn.Module):
    def forward(self, x, y):
        return torch.div(x, y, rounding_mode="floor")


class DivFloor(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_a = nn.Conv2d(3, 4, 3, padding=1)
        self.conv_b = nn.Conv2d(3, 4, 3, padding=1)
        self.head = FloorDivide()

    def forward(self, x):
        return self.head(self.conv_a(x), torch.sigmoid(self.conv_b(x)) + 1.0)


class BatchNormNoStats(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4, track_running_stats=False)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class SecondInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x, y: Optional[torch.Tensor] = None):
        out = self.conv(x)
        if y is not None:
            out = out + y
        return out


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x, y):
        return self.conv(x) + self.conv(y)


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        values, _ = self.conv(x).sort(dim=1)
        return values


class Sort(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Body()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.pool(self.body(x)).flatten(1))


class DataBranch(nn.Module):
    """A branch on the input's contents: no input shape decides it, so it is not folded."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if bool(y.sum() > 0):
            y = y * 2.0
        return y


class DataMask(nn.Module):
    """A tensor filled where the input is positive: its contents depend on the input, so it is
    not written as a constant (a mask built from shapes alone would be)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = x.new_zeros(x.shape)
        mask[x > 0] = 1.0
        return x * mask


class ReadBeforeWrite(nn.Module):
    """A tensor no input reaches, read before a later in-place write: written as a constant, it
    would hold what it holds at the end, not what the earlier read saw, so it is not."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.new_zeros(x.shape[-2:])
        early = m + 1.0
        m.fill_(5.0)
        return x * early + m


def save(module, name, traced=False):
    relative = f"tests/data/onnx_error_{name}.pt"
    module = module.eval()
    scripted = torch.jit.trace(module, torch.zeros(INPUT)) if traced else torch.jit.script(module)
    scripted.save(os.path.join(ROOT, relative))
    print("wrote", relative)


def main():
    # TorchScript writes a module's constants in set order: a fixed hash seed makes reruns
    # byte-identical.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  dict(os.environ, PYTHONHASHSEED="0"))
    models = [("conv_transpose", ConvTranspose, True),
              ("conv_transpose_scripted", ConvTranspose, False),
              ("conv_same", ConvSame, False),
              ("avg_pool_divisor", AvgPoolDivisor, False),
              ("add_alpha", AddAlpha, False),
              ("div_floor", DivFloor, False),
              ("batchnorm_no_stats", BatchNormNoStats, False),
              ("second_input", SecondInput, False),
              ("two_inputs", TwoInputs, False),
              ("sort", Sort, False),
              ("data_branch", DataBranch, False),
              ("data_mask", DataMask, False),
              ("read_before_write", ReadBeforeWrite, False)]
    for seed, (name, cls, traced) in enumerate(models):
        torch.manual_seed(40 + seed)
        save(cls(), name, traced)
    return 0


if __name__ == "__main__":
    sys.exit(main())
