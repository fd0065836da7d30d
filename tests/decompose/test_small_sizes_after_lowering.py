"""Sizes 0 and 1 after run_decompositions: the lowered graph is proven there too.

The program's small-size proof covers the graph as exported. A decomposition can decide a
size question under the capture's "sizes are at least 2" assumption (torch's `roll` asks
whether the tensor is empty and, told no, computes `% size`), so the lowering is made again
at each small size the program accepts and compared (passes/lowered_small_sizes.py): where
it differs, the lowered program refuses that size at call time, saying why, instead of
failing or computing something else; the program as exported still runs it."""
from __future__ import annotations

import pytest
import torch

import graphport as gp


class Roll(torch.nn.Module):
    def forward(self, x):
        return x.roll(2, 0)


def test_a_lowering_that_differs_at_size_0_refuses_it_and_runs_size_1():
    ep = gp.export(Roll(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("t")}})
    lowered = ep.run_decompositions()
    assert ep.module()(torch.randn(0, 4)).shape == (0, 4)   # the program as exported runs it
    with pytest.raises(gp.InputGuardError, match="t >= 1.*run_decompositions' graph is not proven there") as refusal:
        lowered.module()(torch.randn(0, 4))
    assert isinstance(refusal.value, AssertionError)
    assert any(line.startswith("t < 1 is refused") for line in lowered.shape_report)
    for size in (1, 2, 7):
        x = torch.randn(size, 4)
        torch.testing.assert_close(lowered.module()(x), x.roll(2, 0))
    assert ep.shape_contract.symbols[next(iter(ep.shape_contract.symbols))].valid_from is None   # left as it was


def test_a_lowering_that_keeps_the_operator_whole_accepts_every_size():
    ep = gp.export(Roll(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("t")}})
    lowered = ep.run_decompositions({})
    assert lowered.shape_contract is ep.shape_contract
    for size in (0, 1, 5):
        x = torch.randn(size, 4)
        torch.testing.assert_close(lowered.module()(x), x.roll(2, 0))
