#!/usr/bin/env python3
"""Builds the TorchScript models the speedup tests use (run with the project's
.venv/bin/python). Outputs are committed (made with torch 2.15; files scripted by older
torch load too, see the other tests/data models); rerun only to change them.

  tests/data/speedup_blocked.pt     a channel-mixing op (cumsum over channels) on one branch, a
                                    squeeze-excitation gate on the other: the first must block
                                    only its own convolution, the second must shrink
  tests/data/speedup_twin_dw.pt     two depthwise convolutions with equal configuration (one
                                    shared TorchScript class type) pruned to different widths
  tests/data/speedup_const_view.pt  LeNet whose flatten is x.view(-1, 256): a constant size
  tests/data/speedup_grouped.pt     a convolution with groups=2 between two others
  tests/data/constant_branches.pt   MobileNet-style blocks that branch on constant attributes
                                    (`use_res_connect`, a `downsample` that may be None) and a
                                    stem that branches on the input's rank: after folding, a
                                    straight graph for the dependency analysis and speedup
  tests/data/speedup_rule_*.pt      one model per rule a channel must not be removed against
                                    (in-place ops, softmax over channels, a depthwise bias, a
                                    read channel count, a tied weight) or that must not crash
                                    (gated cat, BatchNorm without running statistics, dict
                                    output), and slices (through crops and full-range slices,
                                    kept at a partial channel slice)
"""
import os
import sys

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Blocked(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.relu3 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(8, 10)
        self.fc2 = nn.Linear(8, 10)

    def forward(self, x):
        x = self.relu1(self.conv1(x))
        mixed = torch.cumsum(self.conv2(x), dim=1)
        y = self.relu3(self.conv3(x))
        gate = torch.sigmoid(y.mean((2, 3), keepdim=True))
        y = y * gate
        return self.fc1(self.pool(y).flatten(1)) + self.fc2(self.pool(mixed).flatten(1))


class TwinDepthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu1 = nn.ReLU()
        self.dw_a = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.pw_a = nn.Conv2d(16, 16, 1, bias=False)
        self.relu2 = nn.ReLU()
        self.dw_b = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.pw_b = nn.Conv2d(16, 16, 1, bias=False)
        self.relu3 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.relu2(self.pw_a(self.dw_a(x)))
        x = self.relu3(self.pw_b(self.dw_b(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class ConstView(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.pool1(torch.relu(self.conv1(x)))
        x = self.pool2(torch.relu(self.conv2(x)))
        return self.fc1(x.view(-1, 256))


class Grouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.gconv = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = torch.relu(self.gconv(torch.relu(self.conv1(x))))
        return self.fc(self.pool(x).flatten(1))


def conv(cin, cout, **kw):
    return nn.Conv2d(cin, cout, 3, padding=1, **kw)


class InPlaceAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = conv(3, 8), conv(8, 4)

    def forward(self, x):
        y = self.conv1(x)
        y.add_(1.0)
        return self.conv2(y)


class ChannelSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = conv(3, 8), conv(8, 4)

    def forward(self, x):
        y = self.conv1(x)
        return self.conv2(y * torch.softmax(y, 1))


class Slices(nn.Module):
    """Slices as hand-written code makes them: a spatial crop (y[:, :, 1:, :]), a squeeze-and-
    excitation gate broadcast by s[:, :, None, None] (torch 2.x scripts full-range slices there),
    a full-range channel slice, and a partial one (z[:, :4]) that reads only some channels."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2, self.conv3 = conv(3, 8), conv(8, 8), conv(4, 4)
        self.fc1, self.fc2 = nn.Linear(8, 4), nn.Linear(4, 8)

    def forward(self, x):
        y = torch.relu(self.conv1(x))[:, :, 1:, :]
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3))))))
        z = self.conv2((y * s[:, :, None, None])[:, :8])
        return torch.cat([z, self.conv3(z[:, :4])], 1)


class GatedCat(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_a, self.conv_b, self.conv_g = conv(3, 4), conv(3, 4), conv(3, 8)
        self.conv_out = conv(8, 4)

    def forward(self, x):
        c = torch.cat([self.conv_a(x), self.conv_b(x)], 1)
        return self.conv_out(c * self.conv_g(x))


class DepthwiseBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = conv(3, 8)
        self.dw = conv(8, 8, groups=8)
        self.pw = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.pw(self.dw(torch.relu(self.conv1(x))))


class ChannelAssert(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = conv(3, 8), conv(8, 4)

    def forward(self, x):
        y = self.conv1(x)
        assert y.size(1) == 8
        return self.conv2(y)


class BatchNormNoStats(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = conv(3, 8), conv(8, 4)
        self.bn = nn.BatchNorm2d(8, track_running_stats=False)

    def forward(self, x):
        return self.conv2(torch.relu(self.bn(self.conv1(x))))


class BatchNormNoAffine(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = conv(3, 8), conv(8, 4)
        self.bn = nn.BatchNorm2d(8, affine=False)

    def forward(self, x):
        return self.conv2(torch.relu(self.bn(self.conv1(x))))


class TiedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) + x @ self.fc1.weight


class DictOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = conv(3, 8), conv(8, 4)

    def forward(self, x):
        return {"out": self.conv2(torch.relu(self.conv1(x)))}


class ConstantBlock(nn.Module):
    def __init__(self, channels, residual, downsample):
        super().__init__()
        self.use_res_connect = residual
        self.conv = nn.Sequential(conv(channels, channels, bias=False), nn.BatchNorm2d(channels),
                                  nn.ReLU())
        self.downsample = nn.Conv2d(channels, channels, 1) if downsample else None

    def forward(self, x):
        y = self.conv(x)
        if self.downsample is not None:
            y = self.downsample(y)
        if self.use_res_connect:
            return x + y
        return y


class ConstantBranches(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.Sequential(ConstantBlock(8, True, False), ConstantBlock(8, False, True),
                                    ConstantBlock(8, True, False))
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        if x.dim() == 4:
            y = self.stem(x)
        else:
            y = self.stem(x.unsqueeze(0))
        y = self.blocks(y)
        return self.fc(nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


def randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                if m.affine:
                    m.weight.uniform_(0.2, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
                if m.running_mean is not None:
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 1.5)
    return module


def save(module, relative):
    path = os.path.join(ROOT, relative)
    torch.jit.script(module.eval()).save(path)
    print("wrote", relative)


def main():
    torch.manual_seed(11)
    save(Blocked(), "tests/data/speedup_blocked.pt")
    torch.manual_seed(12)
    save(randomize_batchnorm(TwinDepthwise()), "tests/data/speedup_twin_dw.pt")
    torch.manual_seed(13)
    save(ConstView(), "tests/data/speedup_const_view.pt")
    torch.manual_seed(14)
    save(Grouped(), "tests/data/speedup_grouped.pt")
    torch.manual_seed(15)
    save(randomize_batchnorm(ConstantBranches()), "tests/data/constant_branches.pt")
    rules = {"inplace_add": InPlaceAdd, "channel_softmax": ChannelSoftmax,
             "gated_cat": GatedCat, "depthwise_bias": DepthwiseBias,
             "channel_assert": ChannelAssert, "batchnorm_no_stats": BatchNormNoStats,
             "tied_weight": TiedWeight, "dict_output": DictOutput,
             "batchnorm_no_affine": BatchNormNoAffine, "slices": Slices}
    for seed, (name, cls) in enumerate(rules.items()):
        torch.manual_seed(20 + seed)
        save(randomize_batchnorm(cls()), f"tests/data/speedup_rule_{name}.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
