"""A branch on divisibility (`if seq % block != 0: pad`), captured as a cond, whose side where the
length divides splits it into blocks and views them back (LongT5's local attention): that side
knows `seq % block == 0` and reasons with `seq = block * t` (shapes/multiples.py), so the view of
the contiguous blocks decides at every size the side runs. Also: a divisibility guard of the
program's own (`torch._check(n % 4 == 0)`) serves the same reasoning and stays a call-time check;
a refusal met inside a side names the side's line, not the branch's."""
from __future__ import annotations

import builtins
import functools
import inspect
import operator

import pytest
import sympy
import torch
import torch.nn.functional as F

import graphport as gp
from graphport.shapes.expr import FloorDiv, Mod, ValueRange
from graphport.shapes.multiples import Multiples, divisors_stated

BLOCK = 5


class BlockedAttention(torch.nn.Module):
    """LongT5's local attention, reduced: pad the sequence to whole blocks, attend from each block
    to it and its neighbours, make the result contiguous and view it back with a -1, crop,
    project. (Before the side knew its length divides, the block length was worked out as
    `seq // (seq // 5)`, computed in the graph at every call: a ZeroDivisionError below 5.)"""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(6, 6)

    def forward(self, x):   # x: (batch, seq, heads=2, dim=3)
        b, s = x.shape[:2]
        if x.shape[1] % BLOCK != 0:
            x = F.pad(x, (0, 0, 0, 0, 0, BLOCK - s % BLOCK))
        blocks = x.reshape(b, x.shape[1] // BLOCK, BLOCK, 2, 3)
        padded = F.pad(blocks, (0, 0, 0, 0, 0, 0, 1, 1))   # each block with its neighbours
        keys = torch.cat([padded[:, i:i + blocks.shape[1]] for i in range(3)], dim=2)
        scores = torch.einsum("...qhd,...khd->...hqk", blocks, keys)
        out = torch.einsum("...hqk,...khd->...qhd", scores.softmax(-1), keys)
        out = out.contiguous().view(b, -1, 6)
        return self.proj(out[:, :s])


SPEC = ({0: gp.Dim("batch", min=1, max=4), 1: gp.Dim("seq", min=1, max=23)},)


def _conds(ep) -> int:
    return sum(n.target is torch.ops.higher_order.cond for n in ep.graph.nodes if n.op == "call_function")


@pytest.fixture(scope="module")
def blocked():
    model = BlockedAttention().eval()
    return model, gp.export(model, (torch.randn(2, 16, 2, 3),), dynamic_shapes=SPEC)


def test_blocked_view_exports_with_the_sequence_dynamic_and_matches_eager_everywhere(blocked):
    model, ep = blocked
    assert _conds(ep) == 1
    assert [(int(r.lower), int(r.upper)) for r in ep.range_constraints.values()] == [(1, 4), (1, 23)]
    with torch.no_grad():
        for batch, seq in [(1, s) for s in range(1, 24)] + [(3, 5), (4, 23), (2, 10)]:
            x = torch.randn(batch, seq, 2, 3)
            torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=0, msg=f"at {batch}, {seq}")


def test_only_the_side_taken_runs_with_gradients_recorded(blocked):
    """With autograd on (the parameters require grad), the side where the length divides is not
    run at a length that does not divide, where its view into blocks would fail."""
    model, ep = blocked
    for seq in (1, 5, 7):
        x = torch.randn(1, seq, 2, 3)
        out = ep.module()(x)
        assert out.requires_grad
        torch.testing.assert_close(out, model(x), rtol=0, atol=0)


@pytest.mark.slow
def test_torch_export_refuses_the_blocked_view_over_the_range():
    """torch.export specializes the divisibility branch: its export fails or its program refuses
    the lengths on the other side of it."""
    model = BlockedAttention().eval()
    spec = ({0: torch.export.Dim("batch", min=1, max=4), 1: torch.export.Dim("seq", min=1, max=23)},)
    try:
        ep = torch.export.export(model, (torch.randn(2, 16, 2, 3),), dynamic_shapes=spec)
    except Exception:   # noqa: BLE001 (its constraint violation)
        return
    with pytest.raises(Exception):
        ep.module()(torch.randn(1, 10, 2, 3))


class CheckedBlocks(torch.nn.Module):
    def forward(self, x):
        n = x.shape[1]
        torch._check(n % 4 == 0)
        y = x.view(x.shape[0], n // 4, 4).transpose(1, 2) * 2
        return y.contiguous().view(x.shape[0], -1, n // (n // 4))


def test_a_checked_divisibility_is_used_and_checked_per_call():
    """`torch._check(n % 4 == 0)` on a Dim.DYNAMIC length: the capture reads `n // (n // 4)` as 4
    (without the fact it guarded a relation that refused n = 4), and the program refuses a
    length that does not divide, at call time, naming the check's line."""
    model = CheckedBlocks()
    ep = gp.export(model, (torch.randn(2, 8),), dynamic_shapes=({0: gp.Dim("b", min=1, max=4), 1: gp.Dim.DYNAMIC},))
    for b, n in [(1, 4), (2, 8), (3, 12), (1, 40)]:
        x = torch.randn(b, n)
        torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=0)
    with pytest.raises(AssertionError) as caught:
        ep.module()(torch.randn(2, 6))
    assert isinstance(caught.value, gp.GraphportError)
    line = inspect.getsourcelines(CheckedBlocks.forward)[1] + 2
    assert f"test_divisible_sides.py:{line}" in str(caught.value) and "Mod(" in str(caught.value)


class ExpandOnOneSide(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] % 4 != 0:
            return x.sum().expand(3)
        return x.new_ones(x.shape[0] // 4).expand(3) * x.sum()


def test_a_refusal_inside_a_side_names_the_sides_line():
    """The side where n divides expands n // 4 elements to 3, which eager refuses at n = 8: the
    error names that line (and the branch captured as a cond), not the branch's line."""
    with pytest.raises(RuntimeError) as caught:
        gp.export(ExpandOnOneSide(), (torch.randn(6),), dynamic_shapes=({0: gp.Dim("n", min=1, max=16)},))
    first = inspect.getsourcelines(ExpandOnOneSide.forward)[1]
    assert isinstance(caught.value, gp.GraphportError)
    assert caught.value.location.lineno == first + 3
    assert f"test_divisible_sides.py:{first + 1}" in str(caught.value)
    assert "captured with both of its sides" in str(caught.value)


# -- the reasoning itself, against brute force ------------------------------------------------------

s = sympy.Symbol("s", integer=True, nonnegative=True)
b = sympy.Symbol("b", integer=True, nonnegative=True)


def test_divisors_are_read_from_the_facts_a_side_and_guards_state():
    assert divisors_stated((sympy.Eq(Mod(s, 5), 0),)) == {s: 5}
    assert divisors_stated((sympy.Not(sympy.Ne(Mod(s, 5), 0)),)) == {s: 5}
    assert divisors_stated((sympy.And(sympy.Eq(Mod(s, 2), 0), sympy.Eq(Mod(s, 3), 0)),)) == {s: 6}
    assert divisors_stated((sympy.Ne(Mod(s, 5), 0), sympy.Eq(Mod(s + 1, 5), 0), sympy.Eq(s, 5))) == {}


_PYTHON = {"FloorDiv": operator.floordiv, "Mod": operator.mod, "Max": builtins.max, "Min": builtins.min}


def _value(expr, at: dict):
    """`expr` at the sizes `at`, with Python's integer operators (ZeroDivisionError where it
    divides by 0)."""
    return _compiled(expr, tuple(at))(*at.values())


@functools.lru_cache(maxsize=None)
def _compiled(expr, symbols: tuple):
    return sympy.lambdify(list(symbols), expr, modules=[_PYTHON, "math"])


@pytest.mark.parametrize("lower", [0, 1])
def test_rewritten_sizes_equal_the_originals_wherever_the_facts_hold(lower: int):
    """Every expression, rewritten over the quotient and written back, has the original's value at
    every multiple of 5 in range; every claimed equality and decision holds there too."""
    ranges = {s: ValueRange(lower, 60), b: ValueRange(1, 3)}
    algebra = Multiples({s: 5}, ranges)
    blocks = FloorDiv(s, 5)
    exprs = [blocks, FloorDiv(s, blocks), sympy.Max(1, blocks), 64 * sympy.Max(1, blocks) * sympy.Max(1, FloorDiv(s, blocks)),
             b * blocks * FloorDiv(s, blocks), 5 * blocks, s + Mod(-s, 5), FloorDiv(blocks, 2), Mod(blocks, 3)]
    points = [v for v in range(lower, 61) if v % 5 == 0]
    for expr in exprs:
        written = algebra.restore(algebra.rewrite(expr))
        for v in points:
            for bv in (1, 2, 3):
                at = {s: v, b: bv}
                try:
                    expected = _value(expr, at)
                except ZeroDivisionError:
                    continue
                assert _value(written, at) == expected, (expr, written, at)
    for x, y in [(5 * blocks, s), (FloorDiv(s, blocks) * blocks, s), (64 * sympy.Max(1, blocks), 64 * blocks)]:
        if algebra.same_value(x, y):
            for v in points:
                try:
                    assert _value(x, {s: v}) == _value(y, {s: v}), (x, y, v)
                except ZeroDivisionError:   # s // (s // 5) at s = 0: undefined on both
                    pass
    assert algebra.same_value(5 * blocks, s)
    if lower >= 1:   # the side never sees s = 0: one block at least
        assert algebra.same_value(sympy.Max(1, blocks), blocks)
        assert algebra.exact_ratio(b * s * 4, 4 * b * FloorDiv(s, blocks)) == blocks
    for rel in [sympy.Ge(s, 5), sympy.Eq(FloorDiv(s, blocks), 5), sympy.Ne(blocks, 1), sympy.Gt(Mod(s, 5), 0)]:
        verdict = algebra.decide(rel)
        if verdict is not None:
            for v in points:
                try:
                    assert bool(_value(rel, {s: v})) == verdict, (rel, v)
                except ZeroDivisionError:
                    pass
