#!/usr/bin/env python3
"""Writes the small TorchScript models of tests/host/dependency_test.cpp to tests/data/.

Each model isolates one rule of NNI v2.0's ChannelDependency / GroupDependency (reference
§2.8) that the conformance models do not exercise. Run with an interpreter that has torch
(on the development machines: /usr/bin/python3):

    .venv/bin/python scripts/make_dependency_models.py

The expected dependencies are asserted in the C++ test, next to each model's name.
"""
import os
from typing import List, Tuple

import torch
from torch import Tensor, nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")


def conv(cin: int = 4, cout: int = 4, k: int = 3, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups)


class CatNet(nn.Module):
    """cat along dim 1 does not couple; cat along dim 0 does (also of a list built by append)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = conv(), conv(), conv()
        self.c4, self.c5, self.c6 = conv(), conv(), conv()

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        wide = torch.cat([self.c1(x), self.c2(x)], dim=1)
        tall = torch.cat([self.c3(x), self.c4(x)], 0)
        parts: List[Tensor] = []
        parts.append(self.c5(x))
        parts.append(torch.relu(self.c6(x)))
        return wide, tall, torch.cat(parts, dim=0)


class AddNet(nn.Module):
    """Chained adds merge sets; operator +, torch.add and += all couple; nn.Sequential names."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3, self.c4 = conv(), conv(), conv(), conv()
        self.c5, self.c6, self.c7, self.c8 = conv(), conv(), conv(), conv(k=1)
        self.head = nn.Sequential(conv(), nn.BatchNorm2d(4), nn.ReLU(), conv(k=1))

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        s = self.c1(x) + self.c2(x)             # {c1, c2}
        t = s + self.c3(x)                      # through the first add: {c1, c2, c3}
        y5 = self.c5(x)
        a = torch.add(self.c4(x), y5)           # {c4, c5}
        y6 = self.c6(x)
        b = y6 + self.c7(x)                     # {c6, c7}
        m = torch.relu(y5)
        m += y6                                 # add_: merges {c4, c5} with {c6, c7}
        out = self.head(t) + self.c8(x)         # {head.3, c8}; the BFS stops at head.3
        return out, a, b, m


class SharedNet(nn.Module):
    """conv_a runs twice (its second call meets conv_c in an add); `unused` never runs."""

    def __init__(self):
        super().__init__()
        self.conv_a, self.conv_b, self.conv_c = conv(), conv(), conv()
        self.unused = conv(groups=2)

    def forward(self, x: Tensor) -> Tensor:
        y = torch.relu(self.conv_a(x))
        z = self.conv_b(y)
        return self.conv_a(z) + self.conv_c(x)


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.left, self.right = conv(), conv()

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        return self.left(x), self.right(x)


class ControlNet(nn.Module):
    """Script keeps control flow and tuples that tracing would remove; the walk sees through
    if-branches, loop-carried values and tuple unpacking (only the element used)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3, self.c4 = conv(), conv(), conv(), conv()
        self.pair = Pair()

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        if bool(x.sum() > 0):
            y = self.c1(x)
        else:
            y = self.c2(x)
        z = self.c3(x)
        for _ in range(2):
            z = torch.relu(z)
        p, q = self.pair(x)
        return y + z, p + self.c4(x), q       # {c1, c2, c3}, {pair.left, c4}, {pair.right}


class GroupNet(nn.Module):
    """Grouped convolutions pass their group count to the nearest parent convolutions (max)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 12, 1)
        self.bn = nn.BatchNorm2d(12)
        self.g4 = nn.Conv2d(12, 12, 1, groups=4)
        self.g6 = nn.Conv2d(12, 12, 1, groups=6)
        self.pw = nn.Conv2d(3, 12, 1, bias=False)
        self.dw = nn.Conv2d(12, 12, 3, padding=1, groups=12, bias=False)
        self.up = nn.ConvTranspose2d(12, 12, 2, stride=2, groups=3)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        s = torch.relu(self.bn(self.stem(x)))
        a = self.g4(s)                          # stem <- 4
        b = self.g6(s)                          # stem <- max(4, 6) = 6 (lcm would be 12)
        d = self.dw(torch.relu(self.pw(x)))     # pw <- 12 (depthwise)
        return a, b, self.up(d)                 # dw <- max(12, 3) = 12


class LayerTypesNet(nn.Module):
    """Conv1d, Conv3d and Linear end the walk like Conv2d, and each gets a set (NNI v2.0 lists
    Conv2d sets only and walks through Conv1d/Conv3d as if they kept channels)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 3, padding=1)
        self.c1b = nn.Conv1d(8, 8, 1)
        self.c1c = nn.Conv1d(4, 8, 1)
        self.dw1 = nn.Conv1d(8, 8, 3, padding=1, groups=8)
        self.embed = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.wide = nn.Linear(16, 32)
        self.narrow = nn.Linear(16, 16)
        self.v1 = nn.Conv3d(2, 6, 1)
        self.v2 = nn.Conv3d(6, 6, 1)
        self.unused = nn.Linear(3, 3)

    def forward(self, s: Tensor, v: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        y = self.c1b(self.c1(s)) + self.c1c(s)   # {c1b, c1c}: c1 is behind c1b, not coupled
        y = self.dw1(y)                           # c1b, c1c <- groups 8
        h = self.embed(y.transpose(1, 2))         # tokens [N, L, 16]
        h = h + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(h))))  # {embed, fc2}
        # A reshape ends the walk: the 32 outputs of `wide` are not the 16 channels of the sum,
        # so wide and narrow are not coupled (NNI would couple them).
        n, l, c = h.size()
        m = self.wide(h).reshape(n, l, 2, 16).sum(2) + self.narrow(h)
        u = self.v1(v)
        return h, self.v2(u) + u, m               # {v1, v2}


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    x = torch.randn(1, 4, 8, 8)
    for name, cls, inp in [("dep_cat", CatNet, x), ("dep_add", AddNet, x),
                           ("dep_shared", SharedNet, x), ("dep_control", ControlNet, x),
                           ("dep_groups", GroupNet, torch.randn(1, 3, 8, 8))]:
        torch.manual_seed(0)
        model = cls().eval()
        scripted = torch.jit.script(model)
        scripted(inp)  # the model must run: its structure is what the test relies on
        save(scripted, name)
    torch.manual_seed(0)
    layers = torch.jit.script(LayerTypesNet().eval())
    layers(torch.randn(1, 4, 6), torch.randn(1, 2, 3, 4, 4))
    save(layers, "dep_layer_types")
    # A traced model: layers run as aten::_convolution (groups at input 8), no control flow.
    torch.manual_seed(0)
    save(torch.jit.trace(AddNet().eval(), x), "dep_add_traced")


def save(module: torch.jit.ScriptModule, name: str) -> None:
    path = os.path.join(OUT, name + ".pt")
    module.save(path)
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
