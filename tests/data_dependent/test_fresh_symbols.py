"""Each data-dependent call gets its own symbol, even when the capture's cache of meta
results has seen the same call on arguments of the same sizes: two row counts that share a
symbol would let the program assume they are equal and take a branch eager does not."""
from __future__ import annotations

import pytest
import torch

import graphport as gp


def same_count_branch(x):
    positive = torch.where(x > 0)[0]
    negative = torch.where(x < 0)[0]
    if positive.shape[0] == negative.shape[0]:
        return x + 1
    return x - 1


def test_two_row_counts_are_two_symbols():
    with pytest.raises(gp.errors.DataDependentError, match="u0 == u1"):
        gp.export(same_count_branch, (torch.randn(6),))


def test_repeated_calls_each_bind_a_symbol():
    def routed(x, route):
        return [x[torch.where(route == e)[0]] for e in range(3)]
    ep = gp.export(routed, (torch.randn(6), torch.tensor([0, 1, 1, 2, 2, 2])))
    assert [str(k) for k in ep.range_constraints] == ["u0", "u1", "u2"]
    x, route = torch.randn(6), torch.tensor([2, 1, 1, 2, 2, 2])
    assert [list(t.shape) for t in ep.module()(x, route)] == [[0], [2], [4]]
