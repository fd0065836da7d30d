"""AdditionalInputs with Python ints: an int whose value differs between the input sets becomes
a dynamic int (a symbolic integer input), as torch.export infers it; an int the same in every
set stays a specialized constant. The same user code against both exporters."""
from __future__ import annotations

import pytest
import torch

import graphport as gp

from tests.soundness import assert_same


class TakeRows(torch.nn.Module):
    def forward(self, x, n):
        return x[:n] * n


class Scaled(torch.nn.Module):
    def forward(self, x, k, bias):
        return (x * k).sum(1) + bias


def _sets(ex, *sets):
    extra = ex.AdditionalInputs()
    for args in sets:
        extra.add(args)
    return extra


def test_an_int_that_differs_is_dynamic(ex):
    extra = _sets(ex, (torch.randn(6, 3), 2), (torch.randn(7, 3), 5))
    example = (torch.randn(8, 3), 4)
    spec = extra.dynamic_shapes(TakeRows(), example)
    assert spec["n"] == ex.Dim.DYNAMIC and spec["x"][0] == ex.Dim.DYNAMIC
    ep = ex.export(TakeRows(), example, dynamic_shapes=extra)
    placeholder_n = [n for n in ep.graph.nodes if n.op == "placeholder"][-1]
    assert isinstance(placeholder_n.meta["val"], torch.SymInt)
    for x, n in [example, (torch.randn(6, 3), 2), (torch.randn(7, 3), 5), (torch.randn(9, 3), 6)]:
        assert_same(ep.module()(x, n), TakeRows()(x, n))


def test_graphport_dynamic_int_at_small_values_and_past_the_rows():
    """torch.export's program refuses n = 1 here (a guard of its own); graphport's answers as eager."""
    extra = _sets(gp, (torch.randn(6, 3), 2), (torch.randn(7, 3), 5))
    ep = gp.export(TakeRows(), (torch.randn(8, 3), 4), dynamic_shapes=extra)
    for x, n in [(torch.randn(3, 3), 0), (torch.randn(5, 3), 1), (torch.randn(2, 3), 2)]:
        assert_same(ep.module()(x, n), TakeRows()(x, n))
    with pytest.raises(gp.InputGuardError, match="n <= "):   # the capture took n rows of x: n past them is refused
        ep.module()(torch.randn(3, 3), 6)


def test_an_int_that_is_the_same_stays_specialized(ex):
    extra = _sets(ex, (torch.randn(6, 3), 3, 1.5), (torch.randn(7, 3), 3, 1.5))
    example = (torch.randn(8, 3), 3, 1.5)
    spec = extra.dynamic_shapes(Scaled(), example)
    assert spec["k"] is None and spec["bias"] is None
    ep = ex.export(Scaled(), example, dynamic_shapes=extra)
    assert not any(isinstance(n.meta.get("val"), torch.SymInt) for n in ep.graph.nodes if n.op == "placeholder")
    fresh = torch.randn(5, 3)
    assert_same(ep.module()(fresh, 3, 1.5), Scaled()(fresh, 3, 1.5))


def test_graphport_refuses_another_value_of_a_specialized_int():
    extra = _sets(gp, (torch.randn(6, 3), 3, 1.5))
    ep = gp.export(Scaled(), (torch.randn(8, 3), 3, 1.5), dynamic_shapes=extra)
    with pytest.raises(gp.InputGuardError, match="k = 3"):
        ep.module()(torch.randn(5, 3), 4, 1.5)


def test_graphport_checks_every_set_with_a_dynamic_int():
    """Each additional set is run through the captured program's checks: all accepted here."""
    extra = _sets(gp, (torch.randn(6, 3), 2, 0.5), (torch.randn(7, 3), 5, 0.5))
    ep = gp.export(Scaled(), (torch.randn(8, 3), 4, 0.5), dynamic_shapes=extra)
    for args, _ in extra.examples:
        assert_same(ep.module()(*args), Scaled()(*args))
    fresh = torch.randn(4, 3)
    assert_same(ep.module()(fresh, 11, 0.5), Scaled()(fresh, 11, 0.5))
