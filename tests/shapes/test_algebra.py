"""The size algebra's normal form, checked against brute-force evaluation.

Every rewrite FloorDiv and Mod make when they are built (constants moved out, nested
divisions merged, exact division by a factor, Mod of multiples) must give the value
Python's `//` and `%` give, at every point of a grid of integers, negative ones included.
"""
import itertools

import pytest
import sympy
from hypothesis import given, settings, strategies as st

from graphport.shapes.expr import FloorDiv, Mod, ValueRange, decide

x, y, z = (sympy.Symbol(n, integer=True) for n in "xyz")
GRID = range(-13, 30)


def _value(expr, point):
    return int(expr.xreplace({s: sympy.Integer(v) for s, v in point.items()}))


# A random size expression as a pair: the sympy value built through FloorDiv/Mod (which
# normalize as they are built) and a Python function computing the same thing directly.
leaves = st.sampled_from([(x, lambda p: p[x]), (y, lambda p: p[y]), (z, lambda p: p[z])]) | \
    st.integers(-7, 9).map(lambda c: (sympy.Integer(c), lambda p, c=c: c))


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
        if op.endswith("factor") and eb == 0:
            return ea + eb, lambda p: fa(p) + fb(p)
        if op == "floordiv_factor":   # (a * b) // b: exact where b != 0
            return FloorDiv(ea * eb, eb), lambda p: (fa(p) * fb(p)) // fb(p)
        return Mod(ea * eb, eb), lambda p: (fa(p) * fb(p)) % fb(p)
    ops = st.sampled_from(["add", "sub", "mul", "floordiv_const", "mod_const", "floordiv_factor", "mod_factor"])
    return st.builds(build, ops, children, children, st.integers(1, 6))


expressions = st.recursive(leaves, _combine, max_leaves=6)


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
