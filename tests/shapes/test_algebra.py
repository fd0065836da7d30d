"""The size algebra's normal form, checked against brute-force evaluation.

Every rewrite FloorDiv and Mod make when they are built (constants moved out, nested
divisions merged, exact division by a factor, Mod of multiples) must give the value
Python's `//` and `%` give, at every point of a grid of integers, negative ones included.
Every verdict the range reasoning gives (`bounds`, `refine`, `decide` with its floor-division
and factoring refinements) must hold at every point of the ranges it was given.
"""
import itertools

import pytest
import sympy
from hypothesis import assume, given, settings, strategies as st

from graphport.shapes.expr import FloorDiv, Mod, ValueRange, bounds, decide, refine

x, y, z = (sympy.Symbol(n, integer=True) for n in "xyz")
GRID = range(-13, 30)


def _value(expr, point):
    return int(expr.xreplace({s: sympy.Integer(v) for s, v in point.items()}))



def _combine(children):
    def build(op, a, b, k):
        (ea, fa), (eb, fb) = a, b
        if op == "add":
            return ea + eb, lambda p: fa(p) + fb(p)
        if op == "sub":
            return ea - eb, lambda p: fa(p) - fb(p)
        if op == "mul":
            return ea * eb, lambda p: fa(p) * fb(p)
        if op == "floordiv_const":
            return FloorDiv(ea, sympy.Integer(k)), lambda p: fa(p) // k
        if op == "mod_const":
            return Mod(ea, sympy.Integer(k)), lambda p: fa(p) % k
        if op == "max":
            return sympy.Max(ea, eb), lambda p: max(fa(p), fb(p))
        if op == "min":
            return sympy.Min(ea, eb), lambda p: min(fa(p), fb(p))
        if op.endswith("scaled") and eb == 0:
            return ea + eb, lambda p: fa(p) + fb(p)
        if op == "floordiv_scaled":   # (k*a*b) // (2*k*b): shared factors and content cancel
            return FloorDiv(k * ea * eb, 2 * k * eb), lambda p: (k * fa(p) * fb(p)) // (2 * k * fb(p))
        if op == "mod_scaled":
            return Mod(k * ea * eb, 2 * k * eb), lambda p: (k * fa(p) * fb(p)) % (2 * k * fb(p))
        if op == "padded_quotient":   # a padded up to a multiple of k, divided by k
            return FloorDiv(ea + Mod(-ea, k), k), lambda p: (fa(p) + (-fa(p)) % k) // k
        if op == "windows" and not ea.free_symbols:
            return ea + eb, lambda p: fa(p) + fb(p)
        if op == "windows":   # a padded size over its number of windows: k, where there is one
            padded = ea + Mod(-ea, k)
            return FloorDiv(padded, FloorDiv(padded, k)) + Mod(padded, FloorDiv(padded, k)), \
                lambda p: (fa(p) + (-fa(p)) % k) // ((fa(p) + (-fa(p)) % k) // k) + \
                (fa(p) + (-fa(p)) % k) % ((fa(p) + (-fa(p)) % k) // k)
        if op.endswith("factor") and eb == 0:
            return ea + eb, lambda p: fa(p) + fb(p)
        if op == "floordiv_factor":   # (a * b) // b: exact where b != 0
            return FloorDiv(ea * eb, eb), lambda p: (fa(p) * fb(p)) // fb(p)
        return Mod(ea * eb, eb), lambda p: (fa(p) * fb(p)) % fb(p)
    ops = st.sampled_from(["add", "sub", "mul", "floordiv_const", "mod_const", "floordiv_factor", "mod_factor",
                           "floordiv_scaled", "mod_scaled", "padded_quotient", "windows", "max", "min"])
    return st.builds(build, ops, children, children, st.integers(1, 6))


# A random size expression as a pair: the sympy value built through FloorDiv/Mod (which
# normalize as they are built) and a Python function computing the same thing directly.
def _leaves(symbols):
    return st.sampled_from([(s, lambda p, s=s: p[s]) for s in symbols]) | \
        st.integers(-7, 9).map(lambda c: (sympy.Integer(c), lambda p, c=c: c))


leaves = _leaves((x, y, z))
expressions = st.recursive(leaves, _combine, max_leaves=6)

# sizes: nonnegative symbols, as the shape environment makes them, over small ranges
a, b, c = (sympy.Symbol(n, integer=True, nonnegative=True) for n in "abc")
size_expressions = st.recursive(_leaves((a, b, c)), _combine, max_leaves=7)
size_ranges = st.tuples(*[st.tuples(st.integers(0, 5), st.integers(0, 6)) for _ in range(3)]).map(
    lambda spans: {s: ValueRange(lo, lo + span) for s, (lo, span) in zip((a, b, c), spans)})
RELATIONS = {sympy.Eq: int.__eq__, sympy.Ne: int.__ne__, sympy.Lt: int.__lt__, sympy.Le: int.__le__,
             sympy.Gt: int.__gt__, sympy.Ge: int.__ge__}


def _points(ranges):
    """Every assignment of the symbols inside their ranges."""
    axes = [[(s, v) for v in range(r.lower, r.upper + 1)] for s, r in ranges.items()]
    return [dict(point) for point in itertools.product(*axes)]


def _defined_values(reference, ranges):
    values = []
    for point in _points(ranges):
        try:
            values.append((point, reference(point)))
        except ZeroDivisionError:
            continue
    return values


@settings(max_examples=300, deadline=None)
@given(expressions)
def test_normal_form_evaluates_as_python_does(pair):
    expr, reference = pair
    for vx, vy, vz in itertools.product(GRID[::3], GRID[::4], (-3, 0, 2, 7)):
        point = {x: vx, y: vy, z: vz}
        try:
            expected = reference(point)
        except ZeroDivisionError:
            continue
        assert _value(expr, point) == expected, (expr, point)


@pytest.mark.parametrize("built, normal", [
    (FloorDiv(x - 1, 2) + 1, FloorDiv(x + 1, 2)),                           # a ceiling as a floor
    (FloorDiv(FloorDiv(x, 5), 2), FloorDiv(x, 10)),                          # nested divisions merge
    (FloorDiv(FloorDiv(FloorDiv(x - 1, 2) + 1 - 1, 2) + 1, 2), FloorDiv(x + 3, 8)),
    (FloorDiv(2 * x + 3, 2), x + 1),
    (FloorDiv(y * (FloorDiv(x, 5) - 1), y), FloorDiv(x, 5) - 1),            # exact division, divisions as atoms
    (Mod(y * (FloorDiv(x, 5) - 1), y), 0),
    (Mod(4 * x + 6, 4), 2),
    (Mod(3 * x + 7, 3), 1),
    (Mod(x + Mod(4 - Mod(x, 4), 4), 4), 0),                                 # padded up to a multiple
    (Mod(y + 2 * Mod(x, 6), 3), Mod(y + 2 * x, 3)),
    (FloorDiv(32 * y * FloorDiv(x + 7, 8), 128 * y), FloorDiv(x + 7, 32)),   # MobileViT's (32*b*n)//(128*b)
    (Mod(6 * y * x, 4 * y), 2 * y * Mod(3 * x, 2)),
])
def test_forms_that_must_meet(built, normal):
    assert sympy.expand(built - normal) == 0


def test_strided_token_count_questions_are_settled_without_guards():
    """The questions a reshape asks after a strided conv, flatten and a linear layer."""
    b, t = sympy.Symbol("b", integer=True, nonnegative=True), sympy.Symbol("t", integer=True, nonnegative=True)
    ranges = {b: ValueRange(1, 8), t: ValueRange(1000, 16000)}
    frames = FloorDiv(FloorDiv(FloorDiv(t, 5), 2), 2) - 1
    assert decide(sympy.Eq(Mod(b * frames, b), 0), ranges) is True
    assert decide(sympy.Eq(frames, FloorDiv(b * frames, b)), ranges) is True


@settings(max_examples=400, deadline=None)
@given(size_expressions, size_expressions, st.sampled_from(sorted(RELATIONS, key=str)), size_ranges)
def test_decided_relations_hold_at_every_point_of_the_ranges(lhs, rhs, relation, ranges):
    """`decide` answers only what the ranges settle: a verdict is the truth at every point."""
    (el, fl), (er, fr) = lhs, rhs
    verdict = decide(relation(el, er, evaluate=False), ranges)
    if verdict is None:
        return
    for point, (vl, vr) in _defined_values(lambda p: (fl(p), fr(p)), ranges):
        assert RELATIONS[relation](vl, vr) == verdict, (relation(el, er, evaluate=False), point, ranges)


@settings(max_examples=300, deadline=None)
@given(size_expressions, size_ranges)
def test_bounds_and_refine_hold_at_every_point_of_the_ranges(pair, ranges):
    expr, reference = pair
    lo, hi = bounds(expr, ranges)
    refined = refine(expr, ranges)
    for point, value in _defined_values(reference, ranges)[::7]:
        assert lo <= value <= hi, (expr, point, ranges)
        assert _value(refined, point) == value, (expr, refined, point, ranges)


@pytest.mark.parametrize("lhs, rhs, ranges, verdict", [
    # the floor-division refinement: b*(a - 2*(a//2)) is b*(a % 2), so it can be 0 and can be > 0
    (b * a, 2 * b * FloorDiv(a, 2), {a: ValueRange(0, 9), b: ValueRange(1, 3)}, None),
    (a, 2 * FloorDiv(a, 2), {a: ValueRange(0, 9)}, None),
    # a // 2 <= a / 2 < a for a >= 1
    (FloorDiv(a, 2), a, {a: ValueRange(1, 50)}, False),
    # factoring: b*x*y - b is b*(x*y - 1) > 0 when x*y >= 2
    (b * FloorDiv(a + 3, 32) * FloorDiv(c + 3, 32), b,
     {a: ValueRange(64, 256), b: ValueRange(1, 8), c: ValueRange(64, 256)}, False),
    # grouping: b*x - b - x + 1 is (b - 1)*(x - 1), > 0 once b >= 2; at b = 1 it is 0
    (b * (FloorDiv(a, 20) - 1), FloorDiv(a, 20) - 1, {a: ValueRange(1000, 16000), b: ValueRange(2, 8)}, False),
    (b * (FloorDiv(a, 20) - 1), FloorDiv(a, 20) - 1, {a: ValueRange(1000, 16000), b: ValueRange(1, 8)}, None),
    # exact division of a padded size: 4*(h_pad//4) is h_pad, but 4*(h//4) is not h
    (3 * (a + Mod(-a, 4)) * (c + Mod(-c, 4)), 48 * FloorDiv(a + Mod(-a, 4), 4) * FloorDiv(c + Mod(-c, 4), 4),
     {a: ValueRange(1, 128), c: ValueRange(1, 128)}, True),
    (4 * FloorDiv(a, 4), a, {a: ValueRange(1, 128)}, None),
])
def test_equalities_the_refinements_must_leave_open_or_settle(lhs, rhs, ranges, verdict):
    assert decide(sympy.Eq(lhs, rhs, evaluate=False), ranges) is verdict


@settings(max_examples=200, deadline=None)
@given(size_expressions, size_expressions, st.integers(1, 6), st.integers(1, 4), size_ranges)
def test_a_size_padded_to_a_multiple_equals_the_multiple_of_its_quotient(inner, other, k, c, ranges):
    """Windowed attention pads h up to h_pad = h + (-h) % k and views h_pad as (h_pad//k, k):
    c*h_pad*o == c*k*(h_pad//k)*o must be decided True, and is true at every point."""
    (ei, fi), (eo, fo) = inner, other
    # a program pads sizes computed with positive divisors; a negative one (Mod(x, -4)) is
    # left open by the engine, which is sound, and not what this completeness property is about
    assume(all(m.args[1].is_positive for m in ei.atoms(Mod)))
    # and what it pads is a size: an expression that may be negative (1 - b) is left open too
    lowest = bounds(ei, ranges)[0]
    assume(lowest.is_number and lowest >= 0)
    padded = ei + Mod(-ei, k)
    rel = sympy.Eq(c * padded * eo, c * k * FloorDiv(padded, k) * eo, evaluate=False)
    assert decide(rel, ranges) is True, rel
    for point, (vi, vo) in _defined_values(lambda p: (fi(p), fo(p)), ranges):
        vp = vi + (-vi) % k
        assert c * vp * vo == c * k * (vp // k) * vo, (rel, point)


@settings(max_examples=300, deadline=None)
@given(size_expressions, size_expressions, size_expressions, st.integers(1, 6), st.integers(-3, 3),
       st.sampled_from(sorted(RELATIONS, key=str)), size_ranges)
def test_differences_of_two_floor_divisions_are_decided_only_where_true(first, second, rest, k, c, relation, ranges):
    """c*(a//k) - c*(b//k) + r compared with 0: the paired-division bound is never wrong."""
    (e1, f1), (e2, f2), (e3, f3) = first, second, rest
    expr = c * FloorDiv(e1, k) - c * FloorDiv(e2, k) + e3
    verdict = decide(relation(expr, 0, evaluate=False), ranges)
    if verdict is None:
        return
    for point, value in _defined_values(lambda p: c * (f1(p) // k) - c * (f2(p) // k) + f3(p), ranges):
        assert RELATIONS[relation](value, 0) == verdict, (relation(expr, 0, evaluate=False), point, ranges)


@pytest.mark.parametrize("rel, ranges", [
    (sympy.Le(FloorDiv(a, 4), FloorDiv(a + 3, 4)), {a: ValueRange(0, 256)}),           # a crop to a pooled size
    (sympy.Ge(-FloorDiv(-a, 4), 0), {a: ValueRange(0, 256)}),                          # a ceiling as -(-a // 4)
    (sympy.Ne(-4 * FloorDiv(-a, 4), -FloorDiv(-a, 4)), {a: ValueRange(1, 256)}),
])
def test_relations_the_paired_and_signed_division_bounds_settle(rel, ranges):
    assert decide(rel, ranges) is True


def test_a_relaxed_quotient_has_no_remainder_to_round_to():
    """Bounds of `(a + Mod(-a, 2))/2` relaxed to rational coefficients are not rounded into a
    residue class: at a = 0 the padded quotient is 0, at a = 1 it is 1."""
    a = sympy.Symbol("a", integer=True)
    quotient = FloorDiv(a + Mod(-a, 2), 2)
    assert decide(sympy.Eq(1, quotient, evaluate=False), {a: ValueRange(0, 1)}) is None

