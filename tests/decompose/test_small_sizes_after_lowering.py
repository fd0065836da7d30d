"""Sizes 0 and 1 after run_decompositions: a known gap.

The program's small-size proof (passes/small_sizes.py) covers the graph as exported. A
decomposition may decide a size question under the same "sizes are at least 2" assumption
the capture made (torch's `roll` asks whether the tensor is empty and, told no, computes
`% size`), and the lowered graph is not proven again at the sizes the program accepts."""
from __future__ import annotations

import pytest
import torch

import graphport as gp


class Roll(torch.nn.Module):
    def forward(self, x):
        return x.roll(2, 0)


@pytest.mark.xfail(strict=True, raises=ZeroDivisionError,
                   reason="the lowered graph is not proven at the small sizes the program accepts")
def test_lowered_roll_at_size_0_behaves_as_the_program():
    ep = gp.export(Roll(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("t")}})
    empty = torch.randn(0, 4)
    assert ep.module()(empty).shape == (0, 4)
    assert ep.run_decompositions().module()(empty).shape == (0, 4)
