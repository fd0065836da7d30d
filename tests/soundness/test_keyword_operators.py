"""Operators whose overload name is a Python keyword (`aten::random.from`, recorded by
`x.random_(low, high)`): fx writes a call as the operator's qualified name, which is then not
Python. Such programs must export, print, run, save, load, lower and convert like any other,
drawing what eager draws under the same seed.
"""
from __future__ import annotations

import io
import keyword

import pytest
import torch

import graphport as gp
from graphport.interop import from_torch, to_torch

from tests.soundness import same_as_eager_under_seed


def keyword_overloads() -> list[tuple[str, str, str]]:
    """(namespace, operator, overload) of every registered operator with a keyword part."""
    found = []
    for schema in torch._C._jit_get_all_schemas():
        namespace, op = schema.name.split("::")
        if any(keyword.iskeyword(p) for p in (namespace, op, schema.overload_name)):
            found.append((namespace, op, schema.overload_name))
    return sorted(found)


def test_the_keyword_named_aten_overloads_are_the_ones_tested_here():
    """Every keyword-named overload torch registers is exercised below (a new one fails here)."""
    assert keyword_overloads() == [("aten", "random", "from"), ("aten", "random_", "from")]


def draw_from(x):
    y = x.clone()
    y.random_(0, 10)
    return y + 1


def draw_from_in_place_on_input(x):
    x.random_(-3, 4)
    return x * 2


def draw_from_functional(x):
    return torch.ops.aten.random.__getattr__("from")(x, 2, 7) - x


def draw_from_in_branch(x):
    return torch.cond(x.shape[0] > 3, lambda t: t.clone().random_(0, 5), lambda t: t - 1, (x,))


PROGRAMS = [draw_from, draw_from_in_place_on_input, draw_from_functional, draw_from_in_branch]
SIZES = [0, 1, 2, 5, 16]


def _export(fn, dynamic):
    x = torch.zeros(5, 3)
    spec = ({0: gp.Dim("n", min=0, max=16)},) if dynamic else None
    return gp.export(fn, (x,), dynamic_shapes=spec)


def _same_at_every_size(fn, ep, dynamic):
    for n in SIZES if dynamic else [5]:
        same_as_eager_under_seed(fn, ep, torch.zeros(n, 3))


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_keyword_named_operator_exports_prints_and_draws_as_eager(fn, dynamic):
    ep = _export(fn, dynamic)
    assert "getattr(torch.ops.aten.random, 'from')(" in str(ep)
    _same_at_every_size(fn, ep, dynamic)


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_a_keyword_named_operator_saves_loads_lowers_and_unflattens(fn):
    ep = _export(fn, True)
    buf = io.BytesIO()
    gp.save(ep, buf)
    buf.seek(0)
    loaded = gp.load(buf)
    _same_at_every_size(fn, loaded, True)
    lowered = ep.run_decompositions()
    str(lowered)
    _same_at_every_size(fn, lowered, True)
    unflat = gp.unflatten(ep)
    for n in SIZES:
        x = torch.zeros(n, 3)
        torch.manual_seed(0)
        want = fn(x.clone())
        torch.manual_seed(0)
        torch.testing.assert_close(unflat(x.clone()), want)


@pytest.mark.parametrize("fn", [draw_from, draw_from_in_place_on_input, draw_from_functional],
                         ids=lambda f: f.__name__)
def test_a_keyword_named_operator_round_trips_through_torch_export_programs(fn):
    ep = _export(fn, True)
    tep = to_torch(ep)
    assert any(getattr(n.target, "_overloadname", None) == "from" for n in tep.graph.nodes)
    assert "getattr(torch.ops.aten.random, 'from')(" in tep.graph_module.code
    back = from_torch(tep)
    _same_at_every_size(fn, back, True)
