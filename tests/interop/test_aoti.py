"""graphport -> torch.export -> AOTInductor: the converted program compiles to a package,
loads, and runs like eager at two sizes inside its dynamic range."""
from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn as nn

import graphport as gp
from graphport.interop import to_torch

from .zoo_cases import assert_matches, slow  # puts the repository root (bench/) on the path

from bench.consumer_models import Transformer as SmallTransformer  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="AOTInductor needs a C++ compiler")


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def _compile_and_check(model: nn.Module, example: tuple, spec, others: list[tuple], tmp_path) -> None:
    model.eval()
    ep = gp.export(model, example, dynamic_shapes=spec)
    path = torch._inductor.aoti_compile_and_package(to_torch(ep), package_path=str(tmp_path / "model.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    for inputs in [example, *others]:
        with torch.no_grad():
            assert_matches(model(*inputs), runner(*inputs))


def test_small_cnn_runs_in_aotinductor_at_two_batch_sizes(tmp_path):
    torch.manual_seed(0)
    _compile_and_check(SmallCNN(), (torch.randn(2, 3, 16, 16),), ({0: gp.Dim("batch", min=1, max=32)},),
                       [(torch.randn(5, 3, 16, 16),)], tmp_path)


@slow
def test_small_transformer_runs_in_aotinductor_at_two_sequence_lengths(tmp_path):
    torch.manual_seed(0)
    spec = ({0: gp.Dim("batch", min=1, max=8), 1: gp.Dim("seq", min=2, max=64)},)
    _compile_and_check(SmallTransformer(), (torch.randint(0, 100, (2, 12)),), spec,
                       [(torch.randint(0, 100, (3, 30)),)], tmp_path)
