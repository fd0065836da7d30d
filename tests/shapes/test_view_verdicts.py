"""Contiguity and view legality decided on symbolic sizes, against eager at every size.

The closed form for `view` (capture/view_meta.py) claims a verdict only where it can show
it for every size in the declared ranges: that the tensor is row-major, and that the new
shape holds the same elements (a `-1` being the exact quotient). It reads sizes and strides
through the shape algebra's normal forms (shapes/expr.py `same_value`, `exact_ratio`), so a
padded side `h + Mod(-h, 7)` and its window count times 7 are one size. Every verdict it
claims is checked here by brute force: the same layout built at each concrete size of a
small range, and eager's `is_contiguous()` and `view` asked there.
"""
from __future__ import annotations

import itertools

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphport.capture.view_meta import _row_major, view_meta
from graphport.shapes.env import ShapeEnv
from graphport.shapes.expr import FloorDiv, Mod, ValueRange, bounds, decide, exact_ratio, same_value
from graphport.shapes.node import symint

aten = torch.ops.aten
SETTINGS = settings(deadline=None, max_examples=25, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
HI = 9


def _env(lower: int):
    env = ShapeEnv()
    syms = [env.create_symbol(3 + i, ValueRange(lower, HI), f"d{i}", (0, i)) for i in range(2)]
    return env, syms


def _padded(e, k):
    return e + Mod(-e, k)


def _size_forms(a, b):
    """Sizes as models compute them: plain, scaled, padded to a window, window counts."""
    return [sympy.Integer(1), sympy.Integer(3), a, b, 2 * a, _padded(a, 3), FloorDiv(_padded(a, 3), 3),
            _padded(b, 2), FloorDiv(b, 2) + 1, a * b]


def _value(expr, point) -> int:
    return int(sympy.sympify(expr).xreplace(point))


def _points(syms, lower):
    return [dict(zip(syms, map(sympy.Integer, p))) for p in itertools.product(range(lower, HI + 1), repeat=2)]


@st.composite
def layouts(draw):
    """(lower, sizes, strides, kind): a rank-1..4 tensor whose sizes are drawn from the forms
    above and whose strides are row-major (written as plain or clamped products, or with
    exact window counts times their window), or a permutation of a row-major layout."""
    lower = draw(st.sampled_from([0, 1, 2]))
    rank = draw(st.integers(1, 4))
    picks = draw(st.lists(st.integers(0, 9), min_size=rank, max_size=rank))
    kind = draw(st.sampled_from(["plain", "clamped", "windowed", "permuted"]))
    order = draw(st.permutations(list(range(rank))))
    return lower, picks, kind, order


def _build(env, syms, picks, kind, order):
    forms = _size_forms(*syms)
    sizes = [forms[p] for p in picks]
    strides = [None] * len(sizes)
    step = sympy.Integer(1)
    dims = list(reversed(range(len(sizes)))) if kind != "permuted" else list(order)
    for d in dims:
        strides[d] = step
        size = sizes[d]
        if kind == "clamped" and not size.is_Integer:
            size = sympy.Max(size, 1, evaluate=False)
        if kind == "windowed" and isinstance(size, sympy.Add) and size.has(Mod):
            k = [m.args[1] for m in size.atoms(Mod)][0]
            size = k * FloorDiv(size, k)   # the same value, written as windows times their width
        step = step * size
    meta = torch.empty_strided([symint(s, env) for s in sizes], [symint(s, env) for s in strides], device="meta")
    return meta, sizes, strides


def _real(sizes, strides, point):
    n = [_value(s, point) for s in sizes]
    st_ = [_value(s, point) for s in strides]
    extent = 1 + sum((a - 1) * b for a, b in zip(n, st_)) if all(n) else 0
    return torch.arange(max(extent, 1), dtype=torch.float32).as_strided(n, st_)


@st.composite
def views(draw):
    layout = draw(layouts())
    merge = draw(st.integers(0, 3))
    infer = draw(st.booleans())
    return layout, merge, infer


def _target(sizes, merge, infer):
    """A new shape for the same elements: two neighbouring sizes merged (or a window count
    split out of a padded size), one of them maybe written as -1."""
    shape = list(sizes)
    if len(shape) >= 2:
        i = merge % (len(shape) - 1)
        shape[i:i + 2] = [shape[i] * shape[i + 1]]
    else:
        padded = [m for m in shape[0].atoms(Mod)] if isinstance(shape[0], sympy.Basic) else []
        if padded and shape[0] == _padded(padded[0].args[0] * -1, padded[0].args[1]):
            k = padded[0].args[1]
            shape = [FloorDiv(shape[0], k), k]
    if infer:
        shape[merge % len(shape)] = -1
    return shape


@SETTINGS
@given(layout=layouts())
def test_row_major_verdicts_hold_at_every_size(layout):
    lower, picks, kind, order = layout
    env, syms = _env(lower)
    meta, sizes, strides = _build(env, syms, picks, kind, order)
    if not _row_major(meta):
        return
    for point in _points(syms, lower):
        assert _real(sizes, strides, point).is_contiguous(), (sizes, strides, point)


@SETTINGS
@given(case=views())
def test_view_verdicts_hold_at_every_size(case):
    (lower, picks, kind, order), merge, infer = case
    env, syms = _env(lower)
    meta, sizes, strides = _build(env, syms, picks, kind, order)
    shape = _target(sizes, merge, infer)
    out = view_meta(aten.view.default, (meta, [s if s == -1 else symint(s, env) for s in shape]), {})
    if out is None:
        return
    for point in _points(syms, lower):
        real = _real(sizes, strides, point)
        concrete = [s if s == -1 else _value(s, point) for s in shape]
        eager = real.view(concrete)   # the engine claimed a view: eager must make it
        assert [_value(s.node.expr if isinstance(s, torch.SymInt) else s, point) for s in out.shape] \
            == list(eager.shape), (sizes, strides, shape, point)
        if eager.numel():   # eager's strides wherever they address elements (not a size-1 dimension)
            got = [_value(s.node.expr if isinstance(s, torch.SymInt) else s, point) for s in out.stride()]
            assert [g for g, n in zip(got, eager.shape) if n != 1] == \
                [e for e, n in zip(eager.stride(), eager.shape) if n != 1], (sizes, strides, shape, point)


def test_padded_window_layout_is_row_major_and_views():
    """A window-partitioned mask made contiguous: strides `196*((hp)//(7))`... are the products
    of sizes written with the padded side; the view back to the padded side is legal at
    every size and its -1 is the batch, not a guard on whether one window fits."""
    env, (b, h) = _env(1)
    hp = _padded(h, 7)
    windows = [b, FloorDiv(hp, 7), sympy.Integer(7), FloorDiv(hp, 7), sympy.Integer(7), sympy.Integer(4)]
    meta = torch.empty([symint(s, env) for s in windows], device="meta").contiguous()
    assert _row_major(meta)
    out = view_meta(aten.view.default, (meta, [-1, symint(hp, env), symint(hp, env), 4]), {})
    assert out is not None and out.shape[0].node.expr == b
    for point in _points([b, h], 1):
        real = torch.empty([_value(s, point) for s in windows])
        eager = real.view(-1, _value(hp, point), _value(hp, point), 4)
        assert list(eager.shape) == [_value(s.node.expr if isinstance(s, torch.SymInt) else s, point)
                                     for s in out.shape]


@pytest.mark.parametrize("a, b, same", [
    (lambda h: _padded(h, 7), lambda h: 7 * FloorDiv(_padded(h, 7), 7), True),
    (lambda h: 4 * h * _padded(h, 7), lambda h: 28 * h * FloorDiv(_padded(h, 7), 7), True),
    (lambda h: h, lambda h: 7 * FloorDiv(h, 7), False),   # h need not be a multiple of 7
    (lambda h: _padded(h, 7), lambda h: 7 * FloorDiv(_padded(h, 14), 7), False),
])
def test_same_value_reads_exact_divisions(a, b, same):
    h = sympy.Symbol("h", integer=True, nonnegative=True)
    assert same_value(a(h), b(h)) is same
    if same:   # brute force agrees
        assert all(_value(a(h), {h: n}) == _value(b(h), {h: n}) for n in range(0, 40))


def test_exact_ratio_is_exact_or_nothing():
    h, n = sympy.symbols("h n", integer=True, nonnegative=True)
    hp = _padded(h, 7)
    assert exact_ratio(196 * n * FloorDiv(hp, 7) ** 2, 4 * hp ** 2) == n
    assert exact_ratio(196 * n * FloorDiv(hp, 7), 12 * hp) is None   # 7*n/3: not integral
    assert exact_ratio(n * FloorDiv(h, 7), h) is None                  # h // 7 is not h / 7


@SETTINGS
@given(k=st.integers(2, 8), scale=st.integers(1, 3), offset=st.integers(-9, 9), lower=st.integers(0, 5),
       width=st.integers(0, 12))
def test_bounds_of_padded_sizes_hold_and_are_reached(k, scale, offset, lower, width):
    """A sum whose remainder by k the normal form fixes (a side padded to a multiple of k, plus
    a constant) is bounded within its residue class: every bound claimed holds at every size."""
    h = sympy.Symbol("h", integer=True, nonnegative=True)
    expr = scale * h + Mod(-scale * h, k) + offset
    ranges = {h: ValueRange(lower, lower + width)}
    lo, hi = bounds(expr, ranges)
    values = [_value(expr, {h: n}) for n in range(lower, lower + width + 1)]
    assert lo <= min(values) and max(values) <= hi


def test_padded_side_less_its_window_is_not_negative():
    h, w = sympy.symbols("h w", integer=True, nonnegative=True)
    ranges = {h: ValueRange(1, 40), w: ValueRange(1, 40)}
    slice_extent = 4 * w + (w + Mod(-w, 7)) * (h + Mod(-h, 7) - 7) + 4 * Mod(-w, 7)
    assert decide(sympy.Ge(slice_extent, 0), ranges) is True   # a mask sliced [0:-7] on the padded side
    last_row = w + (w + Mod(-w, 7)) * (h + Mod(-h, 7) - 8) + Mod(-w, 7)   # wp*(hp - 7), multiplied out
    assert decide(sympy.Ge(last_row, 0), ranges) is True


@SETTINGS
@given(k=st.integers(2, 7), c=st.lists(st.integers(-8, 8), min_size=4, max_size=4), lower=st.integers(0, 3),
       op=st.sampled_from([sympy.Ge, sympy.Gt, sympy.Eq, sympy.Ne]))
def test_verdicts_on_padded_sides_hold_at_every_size(k, c, lower, op):
    """Relations over padded sides multiplied out (`x + Mod(-x, k)` split across terms): every
    verdict the engine claims holds at every size of the ranges."""
    h, w = sympy.symbols("h w", integer=True, nonnegative=True)
    hp, wp = h + Mod(-h, k), w + Mod(-w, k)
    expr = sympy.expand(c[0] * wp * (hp + c[1]) + c[2] * wp + c[3] * w)
    rel = op(expr, 0)
    ranges = {h: ValueRange(lower, lower + 10), w: ValueRange(lower, lower + 10)}
    verdict = decide(rel, ranges)
    if verdict is None:
        return
    for a in range(lower, lower + 11):
        for b in range(lower, lower + 11):
            assert bool(rel.xreplace({h: sympy.Integer(a), w: sympy.Integer(b)})) is verdict, (rel, a, b)
