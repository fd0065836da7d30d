"""A program that returns the size of a tensor of data-dependent size (`y.shape[0]` of a
masked selection, the row count of `nonzero`): the size is an output of the program, read
from the node that binds it. The module runs it like eager (sizes 0 included) and like
torch.export's module, also once lowered and once saved and loaded."""
from __future__ import annotations

import io

import pytest
import torch

import graphport as gp

from .test_corpus import _same


def _masked_and_count(x):
    y = x[x > 0]
    return y, y.shape[0]


def _nonzero_count(x):
    return torch.nonzero(x).shape[0]


def _count_then_use(x):
    y = x[x > 0]
    return y.shape[0] + 1, torch.ones(y.shape[0]) * y.sum(), y.shape


def _unique_count(x):
    return torch.unique(x).shape[0], x * 2


PROGRAMS = [_masked_and_count, _nonzero_count, _count_then_use, _unique_count]
INPUTS = [torch.tensor([1., -2., 3.]), torch.tensor([-1., -2., -3.]), torch.tensor([4., 5., 6.]),
          torch.tensor([0., 0., 7.])]


class _Module(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _round_trip(ep):
    buffer = io.BytesIO()
    gp.save(ep, buffer)
    buffer.seek(0)
    return gp.load(buffer)


@pytest.mark.parametrize("form", ["exported", "lowered", "loaded"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=[f.__name__ for f in PROGRAMS])
def test_returned_size_matches_eager(fn, form) -> None:
    ep = gp.export(fn, (INPUTS[0],))
    ep = {"exported": lambda: ep, "lowered": ep.run_decompositions, "loaded": lambda: _round_trip(ep)}[form]()
    module = ep.module()
    for x in INPUTS:
        got, expected = module(x), fn(x)
        _same(got, expected)
        assert type(got) is type(expected)


@pytest.mark.parametrize("fn", PROGRAMS, ids=[f.__name__ for f in PROGRAMS])
def test_returned_size_matches_torch_export(fn) -> None:
    theirs = torch.export.export(_Module(fn), (INPUTS[0],)).module()
    ours = gp.export(_Module(fn), (INPUTS[0],)).module()
    for x in INPUTS:
        _same(ours(x), theirs(x))


def test_returned_size_is_an_output_node() -> None:
    ep = gp.export(_nonzero_count, (INPUTS[0],))
    (out,) = next(n for n in ep.graph.nodes if n.op == "output").args[0]
    assert out.target is torch.ops.aten.sym_size.int
    assert [s.arg.name for s in ep.graph_signature.output_specs] == [out.name]
