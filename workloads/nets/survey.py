"""The survey's five graphs as PyTorch modules (their sizes and inputs: workloads/survey.py)."""
from __future__ import annotations

import math

import torch
from torch import nn


class ElementwiseChain(nn.Module):
    """A long chain of pointwise ops: the textbook case for operator fusion."""

    def forward(self, x):
        y = torch.sin(x)
        y = y * 1.5 + 0.25
        y = torch.exp(-y * y)
        y = torch.tanh(y * 3.0)
        y = y + torch.cos(x)
        y = torch.sigmoid(y)
        y = y * x
        y = torch.abs(y) + 1.0
        y = torch.log(y)
        y = torch.sqrt(y + 0.5)
        y = torch.relu(y - 0.75)
        y = y * y - x * 0.1
        return torch.clamp(y, -4.0, 4.0)


class NormResidual(nn.Module):
    """LayerNorm + residual add + activation, repeated."""

    def __init__(self, dim: int, blocks: int):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(blocks))
        self.scales = nn.ParameterList(nn.Parameter(torch.randn(dim) * 0.1 + 1.0) for _ in range(blocks))

    def forward(self, x):
        for norm, scale in zip(self.norms, self.scales):
            x = x + torch.nn.functional.gelu(norm(x)) * scale
        return x


class ConvBlocks(nn.Module):
    """Conv2d + BatchNorm + ReLU blocks in eval mode (BN foldable into the conv)."""

    def __init__(self, in_ch: int, widths: list[int]):
        super().__init__()
        layers = []
        ch = in_ch
        for width in widths:
            layers += [nn.Conv2d(ch, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
            ch = width
        self.body = nn.Sequential(*layers)
        # Non-trivial BN statistics so folding them is actually exercised.
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        return self.body(x)


class MLP(nn.Module):
    """Three linear layers with GELU in between."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, dim)
        self.act = nn.GELU()

    def forward(self, x):
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))


class SelfAttention(nn.Module):
    """Multi-head self-attention with an explicit softmax, plus the residual."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        assert dim % heads == 0
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(x).reshape(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, s, d)
        return x + self.proj(out)
