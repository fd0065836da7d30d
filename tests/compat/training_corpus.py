"""Training programs for the joint forward-backward export: each returns its scalar loss
first, then outputs that need no gradient (detached), as torch's joint export requires.

Each entry: a model factory, example inputs, the dynamic_shapes spec for graphport and
torch (`dims(Dim)` builds it with either exporter's Dim), and the batch sizes the dynamic
program is checked at (the smallest eager allows included)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvBN(nn.Module):
    """A CNN with BatchNorm in train mode: the running statistics are buffer updates."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x, y):
        h = torch.relu(self.bn(self.conv(x)))
        logits = self.fc(h.mean((2, 3)))
        return F.cross_entropy(logits, y), logits.detach()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2))

    def forward(self, x, target):
        out = self.net(x)
        return F.mse_loss(out, target), out.detach()


class TinyTransformer(nn.Module):
    """Embedding, one encoder layer (attention, LayerNorm, feed-forward), a classifier head."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 20)

    def forward(self, tokens, labels):
        h = self.layer(self.embed(tokens))
        logits = self.head(h)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten()), logits.detach()


@dataclass
class Case:
    make: Callable[[], nn.Module]
    inputs: Callable[[int], tuple]          # batch size -> example inputs
    dims: Callable[[type], tuple]           # Dim class -> dynamic_shapes
    sizes: tuple[int, ...]                  # batch sizes a dynamic program is checked at
    refused: dict = field(default_factory=dict)   # batch size eager takes -> why the joint program refuses it


def _conv_inputs(b: int) -> tuple:
    return torch.randn(b, 3, 8, 8, requires_grad=True), torch.randint(0, 3, (b,))


def _mlp_inputs(b: int) -> tuple:
    return torch.randn(b, 6, requires_grad=True), torch.randn(b, 2)


def _transformer_inputs(b: int) -> tuple:
    return torch.randint(0, 20, (b, 5)), torch.randint(0, 20, (b, 5))


CASES = {
    # BatchNorm in train mode needs more than one value per channel: batches from 1 (36 values each)
    "cnn_bn": Case(ConvBN, _conv_inputs, lambda Dim: ({0: Dim("b", min=1)}, {0: Dim("b", min=1)}), (1, 3, 5)),
    # eager's mse_loss backward divides by the element count in C++ (inf at batch 0); its
    # decomposition divides a Python float, which fails there: the joint program refuses batch 0
    "mlp": Case(MLP, _mlp_inputs, lambda Dim: ({0: Dim("b")}, {0: Dim("b")}), (1, 3, 7), {0: "division by zero"}),
    # at batch 1 the backward's graph takes a view where it permutes at other sizes; the proof
    # at pinned sizes (passes/lowering_sizes.py) does not show the two equal, so the joint
    # program refuses batch 1 (eager and the forward program take it)
    "transformer": Case(TinyTransformer, _transformer_inputs, lambda Dim: ({0: Dim("b", min=1)}, {0: Dim("b", min=1)}),
                        (2, 4), {1: "valid only for b >= 2"}),
}
