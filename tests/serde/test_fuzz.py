"""A few thousand mutated archives: load either raises ArtifactError or returns a program
that prints and runs on the original's example inputs (or refuses them with a call-time
error); one case in four loads from a path, where weights are memory-mapped.
(scripts/fuzz_artifact.py runs the same cases for as long as you like.)"""
from __future__ import annotations

import collections
import random

import torch

import graphport as gp
from .helpers import saved
from .mutations import mutate, try_archive


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.steps.add_(1)
        return self.lin(x).relu() * (x.shape[0] // 2), x.sum(1)


def dynamic_program() -> gp.ExportedProgram:
    return gp.export(Small(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("n", min=2, max=32)}})


def fuzz(ep: gp.ExportedProgram, cases: int, seed: int) -> collections.Counter:
    """Outcomes of `cases` mutants of `ep`'s archive (case i is reproduced by seed and i)."""
    archive = saved(ep)
    outcomes: collections.Counter = collections.Counter()
    for case in range(cases):
        rng = random.Random(seed * 1_000_003 + case)
        outcomes[try_archive(mutate(archive, rng), ep.example_inputs, from_path=case % 4 == 0)] += 1
    return outcomes


def test_mutated_archives_are_refused_at_load_or_print_and_run():
    outcomes = fuzz(dynamic_program(), 1500, seed=12)
    assert outcomes["refused"] > 1000 and outcomes["ran"] > 0


class Counted(torch.nn.Module):
    """Data-dependent sizes: a count read with .item() and checked, and a boolean mask."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        return x[:k] * 2, x[x > 0].sum()


def data_dependent_program() -> gp.ExportedProgram:
    return gp.export(Counted(), (torch.randn(6), torch.tensor(3)))


def test_mutated_data_dependent_archives_are_refused_at_load_or_print_and_run():
    outcomes = fuzz(data_dependent_program(), 250, seed=7)
    assert outcomes["refused"] > 100 and outcomes["ran"] > 0
