#!/usr/bin/env python3
"""Builds tiny versions of torchvision's transformer architectures for the ONNX tests
(tests/host/onnx_runtime_test.cpp): the real block code of Swin, Swin v2 and MaxViT at a few
channels, scripted, so that a test exercises every op and pattern the full models use (shifted
windows: pad to the window, roll, the attention mask built by new_zeros and slice fills;
relative position bias by index; Swin v2's cosine attention with normalize and a clamped
logit scale; ViT's nn.MultiheadAttention, whose inference kernel runs with grad off; MaxViT's
einsum relative attention; MViT's pooled attention and in-place relative position bias) without
a 100 MB file; and torch 2.x's attention as PyTorch code calls it today: nn.TransformerEncoderLayer
(its fused inference kernel, aten::_transformer_encoder_layer_fwd), scaled_dot_product_attention
called directly (timm, research code) and by nn.MultiheadAttention's non-fused path. Needs the
.venv's torch and torchvision at build time only; outputs are committed (made with torch 2.15:
its scripted nn.MultiheadAttention takes is_causal and calls scaled_dot_product_attention).

    .venv/bin/python scripts/make_transformer_models.py
"""
import os
import sys

import torch
import torch.nn.functional as F
from torchvision.models.maxvit import MaxVit
from torchvision.models.video.mvit import MSBlockConfig, MViT
from torchvision.models.vision_transformer import VisionTransformer
from torchvision.models.swin_transformer import (PatchMergingV2, SwinTransformer,
                                                 SwinTransformerBlockV2)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MhaCalls(torch.nn.Module):
    """nn.MultiheadAttention called three ways: batch-first self-attention without weights (the
    inference kernel), sequence-first, and with its attention weights read."""

    def __init__(self):
        super().__init__()
        self.plain = torch.nn.MultiheadAttention(16, 4, batch_first=True)
        self.sequence_first = torch.nn.MultiheadAttention(16, 4)
        self.weights_read = torch.nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):  # [N, L, 16]
        a, _ = self.plain(x, x, x, need_weights=False)
        s = x.transpose(0, 1)
        b, _ = self.sequence_first(s, s, s, need_weights=False)
        c, w = self.weights_read(x, x, x)
        assert w is not None
        return a + b.transpose(0, 1) + c + w.mean()


class AttentionEncoder(torch.nn.Module):
    """Three stock nn.TransformerEncoderLayers on [N, L, 16] tokens (4 heads, 32 feed-forward
    channels): ReLU with the norms after each block, then GELU with the norms before (in eval
    with grad off each runs the fused kernel), then SiLU, which the kernel does not do (that layer
    runs its module calls); a Linear head reads the mean token."""

    def __init__(self):
        super().__init__()
        self.post = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
        self.pre = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                                    activation="gelu", norm_first=True)
        self.silu = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                                     activation=torch.nn.SiLU())
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):  # [N, L, 16]
        return self.head(self.silu(self.pre(self.post(x))).mean(1))


class AttentionSdpa(torch.nn.Module):
    """scaled_dot_product_attention as timm's Attention calls it (one qkv Linear, heads split by
    reshape/permute/unbind), plain, causal, and with a boolean mask and an explicit scale; then a
    sequence-first nn.MultiheadAttention, whose torch 2.x path packs its projections with
    unflatten and attends through scaled_dot_product_attention too."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.proj = torch.nn.Linear(16, 16)
        self.sequence_first = torch.nn.MultiheadAttention(16, 4)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 16)

    def forward(self, x):  # [N, L, 16]
        n, length, c = x.shape
        q, k, v = self.qkv(x).reshape(n, length, 3, 4, c // 4).permute(2, 0, 3, 1, 4).unbind(0)
        plain = F.scaled_dot_product_attention(q, k, v)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mask = torch.ones(length, length, dtype=torch.bool).triu(1)
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
        x = x + self.proj((plain + causal + masked).transpose(1, 2).reshape(n, length, c))
        s = x.transpose(0, 1)
        attended, _ = self.sequence_first(s, s, s, need_weights=False)
        x = x + attended.transpose(0, 1)
        return x + self.fc2(F.gelu(self.fc1(x)))


def models():
    swin = dict(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                window_size=[4, 4], num_classes=10)
    yield "tv_swin_tiny", lambda: SwinTransformer(**swin)
    yield "tv_swin_v2_tiny", lambda: SwinTransformer(block=SwinTransformerBlockV2,
                                                     downsample_layer=PatchMergingV2, **swin)
    # torchvision initialises ViT's head to zero: its output would be 0 whatever the input.
    def vit(num_heads):
        model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=num_heads,
                                  hidden_dim=16, mlp_dim=32, num_classes=10)
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
        return model
    yield "tv_vit_tiny", lambda: vit(2)
    yield "tv_maxvit_tiny", lambda: MaxVit(input_size=(32, 32), stem_channels=8,
                                           partition_size=2, block_channels=[16, 32],
                                           block_layers=[1, 1], head_dim=8,
                                           stochastic_depth_prob=0.0, num_classes=10)
    # MViT v2 (video): pooled attention with a class token split off by tensor_split, q/k/v by
    # unbind, relative position tables indexed by distances its shapes decide, written into a
    # slice of the scores in place (attn[:, :, 1:, 1:] += rel_pos). Input 1x3x4x16x16.
    blocks = [MSBlockConfig(num_heads=1, input_channels=8, output_channels=8,
                            kernel_q=[3, 3, 3], kernel_kv=[3, 3, 3], stride_q=[1, 1, 1],
                            stride_kv=[1, 2, 2]),
              MSBlockConfig(num_heads=2, input_channels=8, output_channels=16,
                            kernel_q=[3, 3, 3], kernel_kv=[3, 3, 3], stride_q=[1, 2, 2],
                            stride_kv=[1, 1, 1])]
    yield "tv_mvit_tiny", lambda: MViT(spatial_size=(16, 16), temporal_size=4,
                                       block_setting=blocks, residual_pool=True,
                                       residual_with_cls_embed=False, rel_pos_embed=True,
                                       proj_after_attn=True, num_classes=10)
    # MViT v1's settings: absolute positional embedding (repeat_interleave, then add_ into it),
    # residual adds that include the class token, projection inside the attention.
    yield "tv_mvit_v1_tiny", lambda: MViT(spatial_size=(16, 16), temporal_size=4,
                                          block_setting=blocks, residual_pool=False,
                                          residual_with_cls_embed=True, rel_pos_embed=False,
                                          proj_after_attn=False, num_classes=10)
    # Four heads of 4 channels: speedup's head removal keeps a non-contiguous subset.
    yield "tv_vit_heads", lambda: vit(4)
    yield "mha_calls", MhaCalls
    yield "attention_encoder", AttentionEncoder
    yield "attention_sdpa", AttentionSdpa


def main():
    # TorchScript writes a module's constants in set order: a fixed hash seed makes reruns
    # byte-identical.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  dict(os.environ, PYTHONHASHSEED="0"))
    for seed, (name, make) in enumerate(models()):
        torch.manual_seed(60 + seed)
        path = os.path.join(ROOT, "tests", "data", name + ".pt")
        torch.jit.script(make().eval()).save(path)
        print("wrote", os.path.relpath(path, ROOT), os.path.getsize(path), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
