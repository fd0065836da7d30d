"""Integer bounds computed piece by piece (floor division, modulo, products, powers, min/max),
checked against brute-force evaluation over small ranges: every bound the engine claims holds
at every point, and every relation it decides is true at every point."""
import itertools

import pytest
import sympy
from hypothesis import given, settings, strategies as st

from graphport.shapes.expr import FloorDiv, Mod, ValueRange, bounds, decide
from graphport.shapes.int_bounds import floordiv_bounds, mod_bounds, pow_bounds

from .test_algebra import RELATIONS, _defined_values

a, b, c = (sympy.Symbol(n, integer=True, nonnegative=True) for n in "abc")


def _leaves():
    return st.sampled_from([(s, lambda p, s=s: p[s]) for s in (a, b, c)]) | \
        st.integers(-6, 9).map(lambda k: (sympy.Integer(k), lambda p, k=k: k))


def _combine(children):
    """Products and powers of floor divisions and moduli, kept as written (not expanded)."""
    def build(op, left, right, k):
        (el, fl), (er, fr) = left, right
        if op in ("floordiv", "mod") and er.is_Number:   # by a constant: the _const ops, never by 0
            op = "add"
        if op == "add":
            return el + er, lambda p: fl(p) + fr(p)
        if op == "sub":
            return el - er, lambda p: fl(p) - fr(p)
        if op == "mul":
            return el * er, lambda p: fl(p) * fr(p)
        if op == "pow":
            n = 2 + k % 2
            return el ** n, lambda p: fl(p) ** n
        if op == "floordiv":
            return FloorDiv(el, er), lambda p: fl(p) // fr(p)
        if op == "mod":
            return Mod(el, er), lambda p: fl(p) % fr(p)
        if op == "floordiv_const":
            return FloorDiv(el, k), lambda p: fl(p) // k
        if op == "mod_const":
            return Mod(el, k), lambda p: fl(p) % k
        if op == "padded_quotient":   # Mamba-2's chunk count: a padded up to a multiple of k, over k
            return FloorDiv(el + Mod(-el, k), k), lambda p: (fl(p) + (-fl(p)) % k) // k
        if op == "max":
            return sympy.Max(el, er), lambda p: max(fl(p), fr(p))
        return sympy.Min(el, er), lambda p: min(fl(p), fr(p))
    ops = st.sampled_from(["add", "sub", "mul", "pow", "floordiv", "mod", "floordiv_const", "mod_const",
                           "padded_quotient", "max", "min"])
    return st.builds(build, ops, children, children, st.integers(1, 7))


expressions = st.recursive(_leaves(), _combine, max_leaves=6)
ranges = st.tuples(*[st.tuples(st.integers(0, 6), st.integers(0, 5)) for _ in range(3)]).map(
    lambda spans: {s: ValueRange(lo, lo + span) for s, (lo, span) in zip((a, b, c), spans)})


@settings(max_examples=250, deadline=None)
@given(expressions, ranges)
def test_every_claimed_bound_holds_at_every_point(pair, spans):
    expr, reference = pair
    lo, hi = bounds(expr, spans)
    for point, value in _defined_values(reference, spans):
        assert lo <= value <= hi, (expr, point, spans, (lo, hi))


@settings(max_examples=250, deadline=None)
@given(expressions, st.integers(-3, 4), st.sampled_from(sorted(RELATIONS, key=str)), ranges)
def test_every_decided_relation_holds_at_every_point(pair, constant, relation, spans):
    expr, reference = pair
    rel = relation(expr, constant, evaluate=False)
    verdict = decide(rel, spans)
    if verdict is None:
        return
    for point, value in _defined_values(reference, spans):
        assert RELATIONS[relation](value, constant) == verdict, (rel, point, spans)


intervals = st.tuples(st.integers(-12, 12), st.integers(0, 10)).map(lambda t: (t[0], t[0] + t[1]))


def _brute(op, first, second):
    values = [op(x, y) for x in range(first[0], first[1] + 1) for y in range(second[0], second[1] + 1)]
    return min(values), max(values)


@settings(max_examples=300, deadline=None)
@given(intervals, intervals.map(lambda t: (abs(t[0]) + 1, abs(t[0]) + 1 + t[1] - t[0])))
def test_floor_division_bounds_are_the_extremes_over_the_operands(num, den):
    assert floordiv_bounds(num, den) == _brute(lambda x, y: x // y, num, den)


@settings(max_examples=300, deadline=None)
@given(intervals, st.integers(1, 9))
def test_bounds_of_a_multiple_over_its_divisor_are_the_extremes_over_the_multiples(num, k):
    multiples = [x for x in range(num[0], num[1] + 1) if x % k == 0]
    found = floordiv_bounds(num, (k, k), multiple_of=k)
    if multiples:
        assert found == (min(multiples) // k, max(multiples) // k)
    else:   # no multiple of k inside: the operand's bounds are kept as they are
        assert found == floordiv_bounds(num, (k, k))


@settings(max_examples=300, deadline=None)
@given(intervals, st.integers(1, 9), st.integers(0, 4))
def test_modulo_bounds_hold_and_are_the_extremes_by_a_constant(num, k, spread):
    assert mod_bounds(num, (k, k)) == _brute(lambda x, y: x % y, num, (k, k))
    lo, hi = mod_bounds(num, (k, k + spread))
    brute_lo, brute_hi = _brute(lambda x, y: x % y, num, (k, k + spread))
    assert lo <= brute_lo and brute_hi <= hi


@settings(max_examples=200, deadline=None)
@given(intervals, st.integers(1, 4))
def test_power_bounds_are_the_extremes_over_the_base(base, n):
    assert pow_bounds(base, n) == _brute(lambda x, _: x ** n, base, (0, 0))


def test_unbounded_operands_give_unbounded_or_sign_bounds():
    inf = float("inf")
    assert floordiv_bounds((0, inf), (1, inf)) == (0, inf)
    assert floordiv_bounds((-5, 7), (2, inf)) == (-3, 3)
    assert floordiv_bounds((3, 7), (0, 4)) is None            # a divisor that may be 0: nothing claimed
    assert mod_bounds((0, inf), (1, inf)) == (0, inf)
    assert pow_bounds((-inf, 2), 2) == (0, inf)
    assert pow_bounds((-inf, 2), 3) == (-inf, 8)


s, n = sympy.Symbol("s", integer=True, nonnegative=True), sympy.Symbol("n", integer=True, nonnegative=True)


@pytest.mark.parametrize("rel, spans", [
    # Mamba-2's chunked scan: the number of 256-chunks of a padded sequence is at least 1
    (sympy.Ne(n * FloorDiv(s + Mod(-s, 256), 256), 0), {n: ValueRange(1, 8), s: ValueRange(1, 1024)}),
    # WavLM's feature extractor
    (sympy.Ne((FloorDiv(s + 240, 320) - 1) ** 2, 0), {s: ValueRange(400, 16000)}),
    # a GroupNorm after a strided Conv1d: more than one value per channel
    (sympy.Ne(n * (FloorDiv(s, 5) - 1), 1), {n: ValueRange(1, 8), s: ValueRange(15, 16000)}),
    (sympy.Ne(n * (FloorDiv(s, 5) - 1), 1), {n: ValueRange(2, 8), s: ValueRange(10, 16000)}),
])
def test_size_arithmetic_of_real_models_is_settled_by_the_ranges(rel, spans):
    assert decide(rel, spans) is True
    small = {sym: range(r.lower, min(r.upper, r.lower + 300) + 1) for sym, r in spans.items()}
    for values in itertools.product(*small.values()):
        assert rel.xreplace({sym: sympy.Integer(v) for sym, v in zip(small, values)}) is sympy.true


def test_floor_division_and_modulo_divide_out_a_common_integer_factor():
    padded = s + Mod(-s, 256)
    assert FloorDiv(4 * padded, 1024) == FloorDiv(padded, 256)
    assert Mod(4 * padded, 1024) == 0
    assert Mod(6 * s + 4, 8) == 2 * Mod(3 * s + 2, 4)
