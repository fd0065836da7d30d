"""A few thousand mutated archives: load either returns a program or raises ArtifactError.
(scripts/fuzz_artifact.py runs the same mutations for as long as you like.)"""
from __future__ import annotations

import io
import random

import torch

import graphport as gp
from .helpers import saved
from .mutations import mutate


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.steps.add_(1)
        return self.lin(x).relu() * (x.shape[0] // 2), x.sum(1)


def test_mutated_archives_load_or_raise_artifact_error():
    ep = gp.export(Small(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("n", min=2, max=32)}})
    archive = saved(ep)
    rng = random.Random(12)
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(2000):
        case = mutate(archive, rng)
        try:
            gp.load(io.BytesIO(case))
            outcomes["loaded"] += 1
        except gp.ArtifactError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 1000 and outcomes["loaded"] > 0


class Counted(torch.nn.Module):
    """Data-dependent sizes: a count read with .item() and checked, and a boolean mask."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        return x[:k] * 2, x[x > 0].sum()


def data_dependent_program() -> gp.ExportedProgram:
    return gp.export(Counted(), (torch.randn(6), torch.tensor(3)))


def test_mutated_data_dependent_archives_load_or_raise_artifact_error():
    archive = saved(data_dependent_program())
    rng = random.Random(7)
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(250):
        case = mutate(archive, rng)
        try:
            gp.load(io.BytesIO(case))
            outcomes["loaded"] += 1
        except gp.ArtifactError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and outcomes["loaded"] > 0
