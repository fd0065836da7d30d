"""Deciding questions about float size values as IEEE doubles compute them.

A float made from sizes (`n * 0.1`, `n / 3`, `n ** -0.5`) is modelled by the real number
its operations would give without rounding (`SymNode.expr`; a float constant is its exact
binary value). The double the program computes differs from it by rounding, so a relation
between such values may only be decided from the ranges when the real difference clears
the rounding error of both sides: `(n * 0.1) * 10 == n` is a real-number falsehood (by
5.5e-17 * n) that doubles answer True at n = 5 and False at n = 3.

`rounding_error(node)` bounds |computed - real| for every size in the declared ranges by
forward error analysis on the node's recipe (each correctly rounded operation is off by at
most 2**-53 of its result, library functions such as pow by one unit in the last place),
as a sympy expression in the sizes, so dimensions without an upper bound still get a
bound that grows with them. `decide_float_relation` asks the shape environment the
relation widened by that bound; None (undecided) makes the caller specialize the sizes
with a guard.
"""
from __future__ import annotations

import math
from fractions import Fraction

import sympy

from .expr import bounds
from .opaque import Opaque

# one correctly rounded double operation: |fl(x) - x| <= UNIT * |x| (+ TINY below the normal range)
UNIT = sympy.Rational(1, 2 ** 53)
# pow and other library functions: within one unit in the last place, taken as two roundings
LIBRARY = 4 * UNIT
# rounding's absolute error floor: the spacing of subnormal doubles is 2**-1074; a larger
# power of two keeps the bounds' coefficients within a float's range (see `_coarse`)
TINY = sympy.Rational(1, 2 ** 900)
# doubles hold every integer up to this exactly
EXACT_INTEGERS = 2 ** 53

_REL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def decide_float_relation(node, env) -> bool | None:
    """The truth of a SymBool built from float size values (a comparison, or and/or/not of
    comparisons) at every size the env's ranges allow, or None when rounding could decide it
    either way somewhere. Asks the env (its assumption bookkeeping records what a decision
    needed, as for integer relations)."""
    op, *args = node.recipe
    if op == "not":
        inner = _decide_part(args[0], env)
        return None if inner is None else not inner
    if op in ("and", "or"):
        parts = [_decide_part(a, env) for a in args]
        if op == "and":
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if True in parts else (False if all(p is False for p in parts) else None)
    if op not in _REL:
        return None
    a, b = args
    errors = _Errors(env)
    ea, eb = errors.of(a), errors.of(b)
    if ea is None or eb is None:
        return None
    diff = env.simplify(sympy.expand(a.expr - b.expr))
    if diff.has(Opaque):
        return None
    error = sympy.expand(ea + eb)
    if error.has(sympy.oo, sympy.zoo, sympy.nan):
        return None
    if error == 0:
        return env.static_value(_relation(_REL[op], diff))
    above_zero = env.static_value(sympy.Gt(diff - error, 0)) is True    # computed difference > 0
    below_zero = env.static_value(sympy.Lt(diff + error, 0)) is True    # computed difference < 0
    at_least_zero = above_zero or env.static_value(sympy.Ge(diff - error, 0)) is True
    at_most_zero = below_zero or env.static_value(sympy.Le(diff + error, 0)) is True
    answers = {"<": (below_zero, at_least_zero), "<=": (at_most_zero, above_zero),
               ">": (above_zero, at_most_zero), ">=": (at_least_zero, below_zero),
               "==": (False, above_zero or below_zero), "!=": (above_zero or below_zero, False)}
    true, false = answers[_REL[op]]
    return True if true else False if false else None


def _decide_part(part, env) -> bool | None:
    if not hasattr(part, "recipe"):
        return bool(part)
    if part.recipe is None or part.exact:
        return env.static_value(part.expr)
    return decide_float_relation(part, env)


def _relation(op: str, diff: sympy.Expr) -> sympy.Basic:
    return {"==": sympy.Eq, "!=": sympy.Ne, "<": sympy.Lt, "<=": sympy.Le, ">": sympy.Gt,
            ">=": sympy.Ge}[op](diff, 0)


class _Errors:
    """Rounding-error and magnitude bounds of the values of one question (memoized by node)."""

    def __init__(self, env):
        self.env = env
        self.ranges = env.ranges
        self._errors: dict = {}
        self._magnitudes: dict = {}

    def of(self, node) -> sympy.Expr | None:
        """A nonnegative expression bounding |computed - node.expr| at every size in range,
        or None when the value is not modelled (Opaque) or its error cannot be bounded."""
        key = id(node)
        if key not in self._errors:
            error = self._error(node)
            self._errors[key] = None if error is None else _coarse(error)
        return self._errors[key]

    def magnitude(self, node) -> sympy.Expr | None:
        """An expression at least |node.expr| at every size in range, or None."""
        key = id(node)
        if key not in self._magnitudes:
            self._magnitudes[key] = self._magnitude(node)
        return self._magnitudes[key]

    # -- magnitudes: an expression >= |real value| over the ranges --------------------------

    def _magnitude(self, node) -> sympy.Expr | None:
        expr = self.env.simplify(node.expr)
        if expr.has(Opaque):
            return None
        return self._abs(expr)

    def _abs(self, expr: sympy.Expr) -> sympy.Expr | None:
        if expr.is_Number:
            return abs(expr) if expr.is_finite else None
        if expr.is_Symbol:
            lo, hi = bounds(expr, self.ranges)
            return expr if lo >= 0 else self._numeric(lo, hi)
        if expr.is_Add or expr.is_Mul:
            parts = [self._abs(a) for a in expr.args]
            if any(p is None for p in parts):
                return None
            return sympy.Add(*parts) if expr.is_Add else sympy.Mul(*parts)
        if expr.is_Pow and expr.exp.is_Integer and expr.exp >= 0:
            base = self._abs(expr.base)
            return None if base is None else base ** expr.exp
        if expr.is_Pow and expr.exp.is_Number and expr.exp.is_finite:   # n ** 0.5, n ** -1: monotone in n >= 0
            lo, hi = bounds(expr.base, self.ranges)
            if lo < 0 or (expr.exp < 0 and lo == 0):
                return None
            edge = hi if expr.exp > 0 else lo
            if edge == sympy.oo:
                return None
            return _rational_above(float(edge) ** float(expr.exp))
        lo, hi = bounds(expr, self.ranges)
        return self._numeric(lo, hi)

    @staticmethod
    def _numeric(lo, hi) -> sympy.Expr | None:
        if not (lo.is_finite and hi.is_finite):
            return None
        return sympy.Max(abs(lo), abs(hi))

    # -- errors: an expression >= |computed - real| over the ranges ---------------------------

    def _error(self, node) -> sympy.Expr | None:
        if node.recipe is None:
            return sympy.Integer(0)   # integer size arithmetic is exact
        op, *args = node.recipe
        if op == "const":
            return sympy.Integer(0)   # the constant is its own binary value
        if node.expr.has(Opaque):
            return None
        nodes = [a for a in args if hasattr(a, "recipe")]
        if len(nodes) != len(args):
            return None
        errs = [self.of(a) for a in args]
        mags = [self.magnitude(a) for a in args]
        if any(e is None for e in errs) or any(m is None for m in mags):
            return None
        result = self.magnitude(node)
        if node.pytype is int:
            return sympy.Integer(0) if all(e == 0 for e in errs) else None
        if op in ("neg", "abs"):
            return errs[0]
        if op == "sym_float":
            if errs[0] != 0:
                return None
            hi = bounds(mags[0], self.ranges)[1]
            return sympy.Integer(0) if hi <= EXACT_INTEGERS else _rounded(sympy.Integer(0), mags[0])
        if op in ("sym_max", "sym_min"):
            return sympy.Add(*errs)   # max and min pick one operand: its error, at most the sum
        if result is None:
            return None
        if op in ("add", "sub"):
            carried = errs[0] + errs[1]
            return _rounded(carried, result)
        if op == "mul":
            carried = mags[0] * errs[1] + mags[1] * errs[0] + errs[0] * errs[1]
            return _rounded(carried, result)
        if op == "truediv":
            return self._quotient_error(args[1], errs, mags, result)
        if op == "sqrt":
            if errs[0] != 0:
                return None   # sqrt(x + e) - sqrt(x) is only bounded by sqrt(e): not an expression ranges bound
            return _rounded(sympy.Integer(0), result)
        if op == "pow":
            if errs[0] != 0 or errs[1] != 0:
                return None   # the sensitivity of x ** y to x and y: not bounded here
            return result * LIBRARY + TINY
        return None   # floor division and modulo of floats: their values are not modelled

    def _quotient_error(self, divisor, errs, mags, result) -> sympy.Expr | None:
        """a' / b' against a / b: with b' = b + eb and |b| >= low > eb,
        |a'/b' - a/b| <= (ea + |a/b| * eb) / (low - eb), then rounded once."""
        low = bounds(divisor.expr, self.ranges)
        if low[0] > 0:
            smallest = low[0]
        elif low[1] < 0:
            smallest = -low[1]
        else:
            return None   # the divisor can be 0 (or change sign) in range
        if errs[1] == 0:
            carried = errs[0] / smallest
        else:
            eb_hi = bounds(errs[1], self.ranges)[1]
            if not eb_hi < smallest:
                return None
            carried = (errs[0] + result * errs[1]) / (smallest - eb_hi)
        return _rounded(carried, result)


def _coarse(error: sympy.Expr) -> sympy.Expr | None:
    """`error` expanded, each coefficient raised to a power of two and each constant to at
    least TINY: a bound as sound, whose numbers stay small enough to bound cheaply."""
    error = sympy.expand(error)
    if error.has(sympy.oo, sympy.zoo, sympy.nan):
        return None
    terms = []
    for term in sympy.Add.make_args(error):
        coeff, rest = term.as_coeff_Mul()
        if coeff == 0:
            continue
        if coeff < 0:
            return None   # an error bound is a sum of nonnegative terms; anything else is not understood
        if coeff.is_Rational:
            coeff = _power_of_two_above(max(coeff, TINY))
        elif rest == 1:
            coeff = max(coeff, TINY)
        terms.append(coeff * rest)
    return sympy.Add(*terms)


def _power_of_two_above(value: sympy.Rational) -> sympy.Expr:
    """The least power of two >= value > 0, in exact arithmetic (no float: the value may be
    beyond a float's range)."""
    value = Fraction(int(value.p), int(value.q))
    k = value.numerator.bit_length() - value.denominator.bit_length()
    while Fraction(2) ** k < value:
        k += 1
    while Fraction(2) ** (k - 1) >= value:
        k -= 1
    return sympy.Integer(2) ** k


def _rounded(carried: sympy.Expr, magnitude: sympy.Expr) -> sympy.Expr:
    """The error after one more correctly rounded operation whose exact result is within
    `carried` of a value of size at most `magnitude`."""
    return carried + UNIT * (magnitude + carried) + TINY


def _rational_above(value: float) -> sympy.Expr:
    """A rational at least `value` (a float computed with rounding of its own)."""
    if math.isinf(value) or math.isnan(value):
        return sympy.oo
    return sympy.Rational(value) * (1 + sympy.Rational(1, 2 ** 40)) + TINY
