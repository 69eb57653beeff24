#!/usr/bin/env python3
"""Builds the TorchScript models that exercise the op table's families (tests/host/
onnx_runtime_test.cpp, speedup_test.cpp). Run with the project's .venv/bin/python;
outputs are committed (made with torch 1.13; they load in every later libtorch), rerun only to
change them.

  tests/data/ops_gates.pt      SiLU, squeeze-and-excitation with a Hardsigmoid gate, Hardswish,
                               GELU, ELU, Softplus, a channel-last LayerNorm between two
                               permutes, a transpose into a Linear: every activation and layout
                               op the ONNX export writes
  tests/data/ops_dense_cat.pt  DenseNet's growing concatenation: a list literal, then appends,
                               concatenated along channels before each layer
  tests/data/ops_pools.pt      adaptive average pooling to uneven windows (8 -> 3x5) and to
                               an output larger than its input (8 -> 12x12)
  tests/data/ops_channel_last.pt  a ConvNeXt block (depthwise conv, permute to channel-last,
                               LayerNorm, Linear-GELU-Linear, permute back, residual add) and a
                               ViT-style MLP on tokens ([N, H*W, C] by flatten + transpose):
                               the hidden widths of both MLPs can shrink
  tests/data/ops_module_list.pt  blocks in an nn.ModuleList that forward iterates: the inlined
                               call stack records only each block's index, not the list's name
  tests/data/ops_video.pt      a video-style net: Conv3d, BatchNorm3d, a Conv3d subclass that
                               adds nothing (torchvision's Conv3DSimple), a depthwise Conv3d,
                               3-d global pooling
  tests/data/ops_segmentation.pt  torchvision's segmentation pattern: an IntermediateLayerGetter
                               (`if name in self.return_layers`, an OrderedDict of features), a
                               head that reads two features, F.interpolate (bilinear and
                               nearest) to another tensor's `shape[-2:]`, a dict result read as
                               ["out"]
  tests/data/ops_tokens.pt     ShuffleNet's channel split (x.chunk(2, dim=1) unpacked) and shuffle
                               (view, transpose, view), ViT's class token (expand, cat), token
                               selection (x[:, 0], x[:, 1:]) and attention-style products
                               (matmul, bmm, softmax)
  tests/data/ops_containers.pt a tensor stored into a list by index (parts[0] = y) and read back:
                               the list's contents are not known from the graph, so y keeps its
                               channels
  tests/data/ops_tuple_out.pt  a forward returning (tensor, None) through a tuple it unpacks
                               (GoogLeNet's outputs in eval)
  tests/data/ops_pools_nd.pt   max and average pooling over 3 spatial axes (video) and over 1
                               (a sequence), with per-axis kernels, strides and padding
  tests/data/ops_class_token.pt  a ViT encoder block's pattern: patch tokens concatenated after
                               a class-token parameter, a pre-norm residual MLP, the class
                               token read out: the MLP's hidden width can shrink
"""
import os
import sys
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Gates(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.squeeze = nn.Conv2d(8, 4, 1)
        self.excite = nn.Conv2d(4, 8, 1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.silu(self.bn(self.stem(x)))
        gate = F.hardsigmoid(self.excite(F.relu(self.squeeze(F.adaptive_avg_pool2d(x, 1)))))
        x = x * gate
        x = F.hardswish(self.conv(x))
        x = F.elu(F.gelu(x), 0.5) + F.softplus(x)
        x = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        tokens = x.flatten(2).transpose(1, 2)  # [N, H*W, C]
        return self.fc(tokens).mean(1)


class DenseLayer(nn.Module):
    def __init__(self, channels, growth):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.conv = nn.Conv2d(channels, growth, 3, padding=1, bias=False)

    def forward(self, features: List[Tensor]) -> Tensor:
        return self.conv(F.relu(self.bn(torch.cat(features, 1))))


class DenseCat(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.layers = nn.ModuleList([DenseLayer(8 + 4 * i, 4) for i in range(3)])
        self.fc = nn.Linear(20, 10)

    def forward(self, x: Tensor) -> Tensor:
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(features))
        y = torch.cat(features, 1)
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.aux: Optional[nn.Module] = None

    def _forward(self, x: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        aux: Optional[Tensor] = None
        if self.aux is not None:
            aux = self.aux(x)
        return torch.relu(self.conv(x)), aux

    def forward(self, x: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        y, aux = self._forward(x)
        return y, aux


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)
        uneven = F.adaptive_avg_pool2d(y, (3, 5))
        larger = F.adaptive_avg_pool2d(y, (12, 12))
        return torch.cat([uneven.flatten(1), larger.flatten(1)], 1)


class ChannelLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dwconv = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.norm = nn.LayerNorm(8)
        self.pwconv1 = nn.Linear(8, 16)
        self.pwconv2 = nn.Linear(16, 8)
        self.token_fc1 = nn.Linear(8, 12)
        self.token_fc2 = nn.Linear(12, 8)
        self.head = nn.Linear(8, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        x = x + y.permute(0, 3, 1, 2)
        tokens = x.flatten(2).transpose(1, 2)
        tokens = tokens + self.token_fc2(F.gelu(self.token_fc1(tokens)))
        return self.head(tokens.mean(1))


class ListBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.conv(x))


class ModuleListNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.blocks = nn.ModuleList([ListBlock(), ListBlock()])
        self.fc = nn.Linear(4, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class PlainConv3d(nn.Conv3d):
    """Like torchvision.models.video.resnet.Conv3DSimple: a subclass that only fixes arguments."""

    def __init__(self, cin, cout):
        super().__init__(cin, cout, kernel_size=(3, 3, 3), padding=(1, 1, 1), bias=False)


class Video(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv3d(3, 8, (1, 3, 3), padding=(0, 1, 1))
        self.bn = nn.BatchNorm3d(8)
        self.conv = PlainConv3d(8, 8)
        self.dw = nn.Conv3d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.bn(self.stem(x)))
        x = F.relu(self.dw(F.relu(self.conv(x))))
        return self.fc(F.adaptive_avg_pool3d(x, 1).flatten(1))


class LayerGetter(nn.ModuleDict):
    def __init__(self, layers, return_layers: Dict[str, str]):
        super().__init__(layers)
        self.return_layers = return_layers

    def forward(self, x: Tensor) -> Dict[str, Tensor]:
        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out_name = self.return_layers[name]
                out[out_name] = x
        return out


class Segmentation(nn.Module):
    def __init__(self):
        super().__init__()
        layers = OrderedDict([("stem", nn.Conv2d(3, 8, 3, padding=1)), ("relu", nn.ReLU()),
                              ("down", nn.Conv2d(8, 8, 3, stride=2, padding=1)),
                              ("deep", nn.Conv2d(8, 12, 3, stride=2, padding=1))])
        self.backbone = LayerGetter(layers, {"relu": "low", "deep": "high"})
        self.low_head = nn.Conv2d(8, 5, 1)
        self.high_head = nn.Conv2d(12, 5, 1)

    def forward(self, x: Tensor) -> Tensor:
        features = self.backbone(x)
        low, high = features["low"], features["high"]
        high = F.interpolate(self.high_head(high), size=low.shape[-2:], mode="bilinear",
                             align_corners=False)
        y = self.low_head(low) + high
        y = F.interpolate(y, scale_factor=2.0, mode="nearest")
        result = OrderedDict()
        result["out"] = F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return result["out"]


class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)
        self.proj = nn.Conv2d(8, 6, 2, stride=2)
        self.class_token = nn.Parameter(torch.randn(1, 1, 6))
        self.qkv = nn.Linear(6, 18)
        self.head = nn.Linear(12, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.cat([x, x[:, :1]], 1)                  # 4 channels from 3
        a, b = x.chunk(2, dim=1)
        x = torch.cat([a, self.conv(b)], 1)
        n, c, h, w = x.size()
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        x = torch.cat([x, x], 1)
        t = self.proj(x).flatten(2).transpose(1, 2)     # [N, 16, 6]
        t = torch.cat([self.class_token.expand(n, -1, -1), t], 1)
        q, k, v = self.qkv(t).split(6, dim=2)
        attention = torch.softmax(torch.matmul(q, k.transpose(1, 2)) / 2.0, dim=-1)
        t = torch.bmm(attention, v)
        return self.head(torch.cat([t[:, 0], t[:, 1:].mean(1)], 1))


class Containers(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv1(x)
        parts: List[Tensor] = [x]
        parts[0] = y
        return self.conv2(parts[0])


def randomize_batchnorm(module):
    for m in module.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d)):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return module


class PoolsNd(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        y = F.max_pool3d(x, (1, 3, 3), (1, 2, 2), (0, 1, 1))
        y = F.avg_pool3d(y, (2, 2, 2), (1, 2, 2), (1, 0, 0), count_include_pad=False)
        s = y.flatten(2)                                   # [N, C, L]
        return torch.cat([F.max_pool1d(s, 3, 2, 1), F.avg_pool1d(s, 3, 2, 1)], dim=2)


class ClassToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 2, stride=2)
        self.class_token = nn.Parameter(torch.randn(1, 1, 8))
        self.norm = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 12)
        self.fc2 = nn.Linear(12, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: Tensor) -> Tensor:
        t = self.proj(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.class_token.expand(t.size(0), -1, -1), t], dim=1)
        t = t + self.fc2(F.gelu(self.fc1(self.norm(t))))
        return self.head(t[:, 0])


def main():
    for seed, (cls, name) in enumerate([(Gates, "ops_gates"), (DenseCat, "ops_dense_cat"),
                                        (TupleOut, "ops_tuple_out"), (Pools, "ops_pools"),
                                        (ChannelLast, "ops_channel_last"),
                                        (ModuleListNet, "ops_module_list"),
                                        (Video, "ops_video"),
                                        (Segmentation, "ops_segmentation"),
                                        (Tokens, "ops_tokens"),
                                        (Containers, "ops_containers"),
                                        (ClassToken, "ops_class_token"),
                                        (PoolsNd, "ops_pools_nd")]):
        torch.manual_seed(40 + seed)
        path = os.path.join(ROOT, "tests", "data", name + ".pt")
        torch.jit.script(randomize_batchnorm(cls()).eval()).save(path)
        print("wrote", os.path.relpath(path, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
