"""Python branches on size predicates the spec cannot decide, captured as a cond by tracing
the program once per side: every size in the declared range answers like eager, where
torch.export's program refuses all but the sizes its guard allows."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphport as gp
from graphport.capture.branch_split import MAX_QUESTIONS
from graphport.errors import ConstraintViolationError


class TableOrInterpolated(nn.Module):
    """A position table used as is when the sequence matches it, else interpolated (the
    ViT-family pattern)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 16, 8))
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        n = x.shape[1]
        if n == self.table.shape[1]:
            pos = self.table
        else:
            pos = F.interpolate(self.table.transpose(1, 2), size=n, mode="linear").transpose(1, 2)
        h = self.proj(x + pos)
        return {"hidden": h, "first": h[:, 0]}


def _spec():
    return {"x": {0: gp.Dim("batch", min=1, max=8), 1: gp.Dim("n", min=2, max=64)}}


def _check_sizes(ep, model, sizes):
    module = ep.module()
    for batch, n in sizes:
        x = torch.randn(batch, n, 8)
        want, got = model(x), module(x)
        assert want.keys() == got.keys()
        for key in want:
            torch.testing.assert_close(got[key], want[key], rtol=0, atol=0)


@pytest.mark.parametrize("example", [16, 10], ids=["table-size-example", "other-size-example"])
def test_every_size_answers_like_eager(example):
    torch.manual_seed(0)
    model = TableOrInterpolated().eval()
    with torch.no_grad():
        ep = gp.export(model, (torch.randn(2, example, 8),), dynamic_shapes=_spec())
        assert sum(n.target is torch.ops.higher_order.cond for n in ep.graph.nodes) == 1
        _check_sizes(ep, model, [(2, example), (1, 16), (3, 16), (1, 2), (1, 17), (4, 64), (1, 15)])


def test_torch_export_refuses_what_the_split_program_answers():
    torch.manual_seed(0)
    model = TableOrInterpolated().eval()
    x = torch.randn(2, 16, 8)
    spec = {"x": {0: torch.export.Dim("batch", min=1, max=8), 1: torch.export.Dim("n", min=2, max=64)}}
    with pytest.raises(Exception):   # torch.export refuses the spec (the guard fixes n to 16)
        torch.export.export(model, (x,), dynamic_shapes=spec)
    with torch.no_grad():
        ep = gp.export(model, (x,), dynamic_shapes=_spec())
        _check_sizes(ep, model, [(1, 40)])


def test_nested_questions_on_two_dims():
    class Both(nn.Module):
        def forward(self, x):
            h, w = x.shape[1], x.shape[2]
            if h == 4:
                if w == 4:
                    return x * 2
                return x + 1
            return x - 1

    model = Both()
    spec = {"x": {1: gp.Dim("h", min=2, max=9), 2: gp.Dim("w", min=2, max=9)}}
    ep = gp.export(model, (torch.randn(2, 4, 4),), dynamic_shapes=spec)
    assert sum(n.target is torch.ops.higher_order.cond for n in ep.graph.nodes) == 1   # the inner one is nested
    module = ep.module()
    for h, w in [(4, 4), (4, 7), (7, 4), (2, 2), (9, 9)]:
        x = torch.randn(2, h, w)
        torch.testing.assert_close(module(x), model(x), rtol=0, atol=0)


def test_split_program_saves_and_loads(tmp_path):
    torch.manual_seed(0)
    model = TableOrInterpolated().eval()
    with torch.no_grad():
        ep = gp.export(model, (torch.randn(2, 16, 8),), dynamic_shapes=_spec())
        gp.save(ep, tmp_path / "split.gport")
        loaded = gp.load(tmp_path / "split.gport")
        _check_sizes(loaded, model, [(1, 16), (2, 33)])


def test_more_questions_than_the_bound_keep_the_guard_error():
    class Many(nn.Module):
        def forward(self, x):
            for k in range(2, 3 + MAX_QUESTIONS):
                if x.shape[0] == k:
                    x = x + k
            return x * 1

    with pytest.raises(ConstraintViolationError, match="requires"):
        gp.export(Many(), (torch.randn(2, 3),), dynamic_shapes={"x": {0: gp.Dim("n", min=2, max=32)}})


def test_a_side_that_writes_state_keeps_the_guard_error():
    class Writes(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x):
            if x.shape[0] == 4:
                self.count.add_(1)
            return x + self.count

    with pytest.raises(ConstraintViolationError, match="requires"):
        gp.export(Writes(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: gp.Dim("n", min=2, max=32)}})


def test_sides_returning_different_structures_keep_the_guard_error():
    class Structures(nn.Module):
        def forward(self, x):
            if x.shape[0] == 4:
                return x, x + 1
            return x + 2

    with pytest.raises(ConstraintViolationError, match="requires"):
        gp.export(Structures(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: gp.Dim("n", min=2, max=32)}})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["siglip_vision", "dinov2", "vit_interpolated"])
def test_vit_family_with_dynamic_image_size(name):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import zoo
    built = getattr(zoo, name)()
    args, kwargs = built.example_inputs()
    with torch.no_grad():
        ep = gp.export(built.module, args, kwargs, dynamic_shapes=built.dynamic_shapes(gp.Dim))
        module = ep.module()
        for batch, size in [(1, 64), (2, 64), (1, 80), (3, 96), (1, 256)]:   # 64: the table's size and the smallest
            a, k = built.make_inputs(batch=batch, size=size)
            torch.testing.assert_close(module(*a, **k).last_hidden_state, built.module(*a, **k).last_hidden_state)


def test_a_view_infers_its_size_as_an_integer_where_the_element_count_is_expanded():
    # at a batch of 1 the element count is `16*n + 16`, the known sizes `4*(n + 1)`: the -1 is 4,
    # not a sum of fractions (which no graph can compute)
    def heads(x):
        y = torch.cat([x[:, :1], x], 1)
        return y.view(y.shape[0], y.shape[1], -1, 4).transpose(1, 2) * 2

    x = torch.randn(1, 6, 16)
    ep = gp.export(heads, (x,), dynamic_shapes={"x": {1: gp.Dim("n", min=2, max=64)}})
    for n in (2, 6, 33):
        x = torch.randn(1, n, 16)
        torch.testing.assert_close(ep.module()(x), heads(x), rtol=0, atol=0)


def test_a_shape_check_inside_an_operator_is_not_split():
    """`x @ x` needs a square x: torch's matmul asks whether the sizes agree. That is the
    operator's check, not a branch of the program: the export reports the contradiction and
    its fix instead of a cond whose other side fails at every call."""
    class Square(torch.nn.Module):
        def forward(self, x):
            return x @ x

    rows, cols = gp.Dim("rows", min=1, max=8), gp.Dim("cols", min=1, max=8)
    with pytest.raises(gp.ConstraintViolationError, match="cols = rows"):
        gp.export(Square(), (torch.randn(4, 4),), dynamic_shapes=({0: rows, 1: cols},))
