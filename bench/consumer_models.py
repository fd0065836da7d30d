"""Small models for checking that torch.export's consumers take graphport's programs: a CNN
with BatchNorm, an MLP, a transformer encoder, a MobileNetV2-like stack (inverted residuals,
in-place ReLU6, pooling, flatten) and, from transformers configs, a BERT and a GPT-2. Each is
built with random weights in eval mode and comes with a batch dimension that can be dynamic."""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn as nn


@dataclasses.dataclass
class Case:
    """A model, its example inputs at two batch sizes and which input dimension is the batch."""
    name: str
    module: nn.Module
    make_inputs: Callable[[int], tuple]
    batch_max: int = 16

    def inputs(self, batch: int) -> tuple:
        torch.manual_seed(batch)
        return self.make_inputs(batch)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))

    def forward(self, x):
        return self.net(x)


class Transformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 100)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)))


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = inp * expand
        self.use_residual = stride == 1 and inp == out
        self.conv = nn.Sequential(
            nn.Conv2d(inp, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, out, 1, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(inplace=True))
        self.blocks = nn.Sequential(InvertedResidual(8, 8, 1, 2), InvertedResidual(8, 16, 2, 4),
                                    InvertedResidual(16, 16, 1, 4))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(16, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def _transformers_model(kind: str) -> nn.Module:
    import transformers
    if kind == "bert":
        config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=64)
        return transformers.BertModel(config)
    config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False)
    return transformers.GPT2LMHeadModel(config)


def _ids(batch: int) -> tuple:
    return (torch.randint(0, 100, (batch, 12)),)


BUILDERS: dict[str, Callable[[], Case]] = {
    "cnn": lambda: Case("cnn", CNN(), lambda b: (torch.randn(b, 3, 8, 8),)),
    "mlp": lambda: Case("mlp", MLP(), lambda b: (torch.randn(b, 32),)),
    "transformer": lambda: Case("transformer", Transformer(), _ids),
    "mobilenet": lambda: Case("mobilenet", MobileNetLike(), lambda b: (torch.randn(b, 3, 32, 32),)),
    "bert": lambda: Case("bert", _transformers_model("bert"), _ids),
    "gpt2": lambda: Case("gpt2", _transformers_model("gpt2"), _ids),
}


def build(name: str) -> Case:
    """A fresh case with the same random weights in every process."""
    torch.manual_seed(0)
    case = BUILDERS[name]()
    case.module.eval()
    return case
