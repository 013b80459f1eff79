"""The model suite's architectures in plain PyTorch (sizes and inputs: workloads/models.py)."""
from __future__ import annotations

import math

import torch
from torch import nn


def _randomize_batchnorm(model: nn.Module) -> None:
    """Non-trivial BN statistics (so folding is exercised), scaled so activations of
    a deep random network stay O(1) and reduced precision does not overflow."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.3, 0.7)
            m.bias.data.uniform_(-0.1, 0.1)


# ----------------------------------------------------------------------------- ResNet

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.down = None
        if stride != 1 or cin != width:
            self.down = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), nn.BatchNorm2d(width))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


RESNET_LAYERS = {18: (BasicBlock, [2, 2, 2, 2]), 34: (BasicBlock, [3, 4, 6, 3]), 50: (Bottleneck, [3, 4, 6, 3])}


class ResNet(nn.Module):
    """He et al. 2015, torchvision's layout (stride on the 3x3), eval mode."""

    def __init__(self, depth: int, width: int = 64, classes: int = 1000):
        super().__init__()
        block, counts = RESNET_LAYERS[depth]
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for stage, count in enumerate(counts):
            w = width * 2**stage
            for i in range(count):
                layers.append(block(cin, w, 2 if (i == 0 and stage > 0) else 1))
                cin = w * block.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)
        _randomize_batchnorm(self)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean((2, 3)))


# ----------------------------------------------------------------------------- MobileNetV2

def _make_divisible(value: float, divisor: int = 8) -> int:
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * value else new


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),  # depthwise
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout),  # pointwise, linear
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """Sandler et al. 2018: inverted residuals with depthwise 3x3 convolutions."""

    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]  # expand t, channels c, repeats n, first stride s

    def __init__(self, width_mult: float = 1.0, classes: int = 1000):
        super().__init__()
        cin = _make_divisible(32 * width_mult)
        last = _make_divisible(1280 * max(1.0, width_mult))
        layers: list[nn.Module] = [nn.Conv2d(3, cin, 3, 2, 1, bias=False), nn.BatchNorm2d(cin), nn.ReLU6()]
        for t, c, n, s in self.SETTINGS:
            cout = _make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(last, classes)
        _randomize_batchnorm(self)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


# ----------------------------------------------------------------------------- transformers

class Attention(nn.Module):
    """Multi-head attention written out (matmul, scale, optional additive mask, softmax)."""

    def __init__(self, dim: int, heads: int, causal_len: int | None = None):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        if causal_len is not None:
            # Additive mask, not -inf: stays finite in fp16/bf16 and through every exporter.
            mask = torch.triu(torch.full((causal_len, causal_len), -1e4), diagonal=1)
            self.register_buffer("mask", mask, persistent=False)
        else:
            self.mask = None

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(x).reshape(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if self.mask is not None:
            scores = scores + self.mask[:s, :s]
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(b, s, d))


class EncoderLayer(nn.Module):
    """Post-LN (BERT) or pre-LN (GPT-2, ViT) transformer layer."""

    def __init__(self, dim: int, heads: int, pre_norm: bool, causal_len: int | None = None,
                 gelu: str = "none"):
        super().__init__()
        self.attn = Attention(dim, heads, causal_len)
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.act = nn.GELU(approximate=gelu)
        self.pre_norm = pre_norm

    def mlp(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def forward(self, x):
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class BertEncoder(nn.Module):
    """Devlin et al. 2018: token + position embeddings, post-LN encoder; returns the
    last hidden states (what a task head reads)."""

    def __init__(self, vocab: int, seq: int, dim: int, heads: int, layers: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(torch.randn(1, seq, dim) * 0.02)
        self.ln = nn.LayerNorm(dim)
        self.layers = nn.Sequential(*[EncoderLayer(dim, heads, pre_norm=False) for _ in range(layers)])

    def forward(self, ids):
        x = self.ln(self.tokens(ids) + self.positions[:, : ids.shape[1]])
        return self.layers(x)


class GPT2Decoder(nn.Module):
    """Radford et al. 2019: pre-LN causal decoder, tied embeddings. One prefill call on
    a fixed-length prompt, returning the next-token logits (the last position)."""

    def __init__(self, vocab: int, seq: int, dim: int, heads: int, layers: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(torch.randn(1, seq, dim) * 0.01)
        self.layers = nn.Sequential(*[EncoderLayer(dim, heads, pre_norm=True, causal_len=seq, gelu="tanh")
                                      for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        nn.init.normal_(self.tokens.weight, std=0.02)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions[:, : ids.shape[1]]
        x = self.ln_f(self.layers(x))
        return torch.matmul(x[:, -1, :], self.tokens.weight.t())


class ViT(nn.Module):
    """Dosovitskiy et al. 2020: patch embedding, class token, pre-LN encoder, head."""

    def __init__(self, hw: int, patch: int, dim: int, heads: int, layers: int, classes: int):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        tokens = (hw // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.layers = nn.Sequential(*[EncoderLayer(dim, heads, pre_norm=True) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.positions
        return self.head(self.ln(self.layers(x))[:, 0])
