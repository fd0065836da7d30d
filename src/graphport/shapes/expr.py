"""Shape expressions: sympy integers over size symbols, their value ranges, and bounds.

Sizes are sympy expressions over nonnegative integer symbols. Comparisons between them
are decided, where possible, from the symbols' ranges by interval arithmetic (`bounds`);
only what ranges cannot decide becomes a guard.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy

INF = sympy.oo


class FloorDiv(sympy.Function):
    """Integer floor division `a // b` (sympy's floor(a / b) brings in rationals).

    Kept in a normal form so that sizes computed along different paths compare equal
    without sympy's general simplification: by a positive constant `k`, terms divisible by
    `k` move out (`(2*x + 3)//2 == x + 3//2`), the constant left inside lies in [0, k)
    (`(x - 1)//2 + 1 == (x + 1)//2`), and nested divisions merge
    (`((a//m) + c)//n == (a + c*m)//(m*n)`), so a stack of strided convolutions gives one
    division, not a tower. Division by a size that divides the numerator as a polynomial
    (with other divisions as atoms) is exact (`b*(x//4 - 1) // b == x//4 - 1`)."""
    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        if a == 0:
            return sympy.Integer(0)
        if not b.is_Integer:
            return _exact_quotient(a, b)
        if b > 0:
            return _floordiv_by_constant(a, int(b))
        return None

    def _sympystr(self, printer):
        return f"(({printer._print(self.args[0])})//({printer._print(self.args[1])}))"


def _floordiv_by_constant(a: sympy.Expr, k: int):
    """`a // k` in normal form, or None when `FloorDiv(a, k)` already is."""
    terms = sympy.Add.make_args(a)
    whole = [t for t in terms if _divisible(t, k)]
    constant = sum((int(t) for t in terms if t.is_Integer and t not in whole), 0)
    rest = [t for t in terms if t not in whole and not t.is_Integer]
    outside = sympy.Add(*[t / k for t in whole]) + constant // k
    inside_constant = constant % k
    if len(rest) == 1 and isinstance(rest[0], FloorDiv) and rest[0].args[1].is_Integer and rest[0].args[1] > 0:
        inner, m = rest[0].args[0], int(rest[0].args[1])
        return outside + FloorDiv(inner + inside_constant * m, m * k)
    if not whole and inside_constant == constant:
        return None
    if not rest:
        return outside
    return outside + FloorDiv(sympy.Add(*rest) + inside_constant, k)


def _opaque_atoms(expr: sympy.Expr, table: dict) -> sympy.Expr:
    """`expr` with every FloorDiv, Mod, Max and Min replaced by a symbol (the same
    subexpression by the same symbol), so polynomial algebra can treat them as atoms."""
    if isinstance(expr, (FloorDiv, Mod, sympy.Max, sympy.Min)):
        if expr not in table:
            table[expr] = sympy.Dummy(integer=True)
        return table[expr]
    if not expr.args:
        return expr
    return expr.func(*[_opaque_atoms(arg, table) for arg in expr.args])


class Mod(sympy.Function):
    """Integer `a % b` with Python's semantics: in [0, b) for b > 0 (sizes), in (b, 0] for b < 0."""
    is_integer = True

    def _eval_is_nonnegative(self):
        return True if self.args[1].is_positive else None

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        if a == b or a == 0:
            return sympy.Integer(0)
        if b.is_Integer and b > 0:
            k = int(b)
            # (x + y % m) % k == (x + y) % k when k divides m: a size padded up to a multiple
            # (`h + (k - h % k) % k`) is then seen to be one
            terms = [_drop_inner_mod(t, k) for t in sympy.Add.make_args(a)]
            if terms != list(sympy.Add.make_args(a)):
                return Mod(sympy.Add(*terms), b)
            kept = [t for t in terms if not _divisible(t, k)]
            constant = sum((int(t) for t in kept if t.is_Integer), 0)
            rest = [t for t in kept if not t.is_Integer]
            if not rest:
                return sympy.Integer(constant % k)
            if len(kept) != len(terms) or constant != constant % k:   # (k*x + c) % k == c % k
                return Mod(sympy.Add(*rest) + constant % k, b)
            return None
        if not b.is_Integer and _exact_quotient(a, b) is not None:
            return sympy.Integer(0)
        return None

    def _sympystr(self, printer):
        return f"Mod({printer._print(self.args[0])}, {printer._print(self.args[1])})"


def _drop_inner_mod(term: sympy.Expr, k: int) -> sympy.Expr:
    """`c * (y % m)` as `c * y` when k divides m: the same value modulo k."""
    coeff, rest = term.as_coeff_Mul()
    if isinstance(rest, Mod) and rest.args[1].is_Integer and int(rest.args[1]) % k == 0:
        return coeff * rest.args[0]
    return term


def _exact_quotient(a, b):
    """a / b when it is a polynomial with integer coefficients, divisions inside `a` and
    `b` taken as atoms (s0*s1 // s0 == s1, b*(t//5) // b == t//5)."""
    if not (a.free_symbols or b.free_symbols):
        return None
    table: dict = {}
    a_poly, b_poly = _opaque_atoms(sympy.expand(a), table), _opaque_atoms(sympy.expand(b), table)
    try:
        quotient, remainder = sympy.div(a_poly, b_poly)
        if remainder != 0:
            return None
        poly = sympy.Poly(quotient, *(quotient.free_symbols or [sympy.Dummy()]))
    except (sympy.PolynomialError, sympy.polys.polyerrors.PolificationFailed, sympy.polys.polyerrors.GeneratorsNeeded):
        return None
    if not all(c.is_Integer for c in poly.coeffs()):
        return None
    return quotient.xreplace({atom: expr for expr, atom in table.items()})


def _divisible(term, k: int) -> bool:
    if term.is_Add:
        return all(_divisible(t, k) for t in term.args)
    if term.is_Integer:
        return int(term) % k == 0
    if term.is_Mul and term.args[0].is_Integer:
        return int(term.args[0]) % k == 0
    return False


@dataclass(frozen=True)
class ValueRange:
    """Inclusive integer range; `upper` may be infinite. Prints as torch.export's `VR[lo, hi]`."""
    lower: int | sympy.Expr
    upper: int | sympy.Expr

    def __repr__(self) -> str:
        hi = "int_oo" if self.upper == INF else str(self.upper)
        return f"VR[{self.lower}, {hi}]"

    def contains(self, value: int) -> bool:
        return self.lower <= value and (self.upper == INF or value <= self.upper)


def _mul(a, b):
    if a == 0 or b == 0:
        return 0
    return a * b


def bounds(expr: sympy.Expr, ranges: dict[sympy.Symbol, ValueRange]) -> tuple:
    """(lowest, highest) value `expr` can take when every symbol lies in its range."""
    if expr.is_Integer or expr.is_Number:
        return expr, expr
    if expr.is_Symbol:
        r = ranges.get(expr)
        return (r.lower, r.upper) if r is not None else (-INF, INF)
    if expr.is_Add:
        lo = hi = sympy.Integer(0)
        for arg in expr.args:
            a, b = bounds(arg, ranges)
            lo, hi = lo + a, hi + b
        return lo, hi
    if expr.is_Mul:
        lo = hi = sympy.Integer(1)
        for arg in expr.args:
            a, b = bounds(arg, ranges)
            products = [_mul(lo, a), _mul(lo, b), _mul(hi, a), _mul(hi, b)]
            lo, hi = min(products), max(products)
        return lo, hi
    if isinstance(expr, FloorDiv):
        (a_lo, a_hi), (b_lo, b_hi) = bounds(expr.args[0], ranges), bounds(expr.args[1], ranges)
        if b_lo > 0 and a_lo >= 0:
            return (sympy.floor(a_lo / b_hi) if b_hi != INF else 0,
                    sympy.floor(a_hi / b_lo) if a_hi != INF else INF)
        return -INF, INF
    if isinstance(expr, Mod):
        b_lo, b_hi = bounds(expr.args[1], ranges)
        return (min(0, b_lo + 1) if b_lo != -INF else -INF), (max(0, b_hi - 1) if b_hi != INF else INF)
    if isinstance(expr, (sympy.Max, sympy.Min)):
        pairs = [bounds(a, ranges) for a in expr.args]
        pick = max if isinstance(expr, sympy.Max) else min
        return pick(p[0] for p in pairs), pick(p[1] for p in pairs)
    if expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
        lo, hi = bounds(expr.base, ranges)
        if lo >= 0:
            return lo ** expr.exp, hi ** expr.exp
    return -INF, INF


def refine(expr: sympy.Basic, ranges: dict[sympy.Symbol, ValueRange]) -> sympy.Basic:
    """Drop Max/Min/Mod/FloorDiv whose outcome the ranges settle (Max(1, s) -> s when s >= 1)."""
    if not getattr(expr, "args", None) or not expr.free_symbols:
        return expr
    args = [refine(a, ranges) for a in expr.args]
    if isinstance(expr, (sympy.Max, sympy.Min)) and len(args) == 2:
        lo, hi = bounds(sympy.expand(args[0] - args[1]), ranges)
        if isinstance(expr, sympy.Max):
            return args[0] if lo >= 0 else args[1] if hi <= 0 else expr.func(*args)
        return args[1] if lo >= 0 else args[0] if hi <= 0 else expr.func(*args)
    if isinstance(expr, FloorDiv) and args[0] == args[1] and bounds(args[0], ranges)[0] >= 1:
        return sympy.Integer(1)   # a // a, a >= 1
    if isinstance(expr, (Mod, FloorDiv)):
        a_lo, _ = bounds(args[0], ranges)
        gap_lo, _ = _sign_bounds(sympy.expand(args[1] - args[0]), ranges)
        if a_lo >= 0 and gap_lo > 0:  # 0 <= a < b
            return args[0] if isinstance(expr, Mod) else sympy.Integer(0)
    if expr.is_Relational:
        return expr.func(*args, evaluate=False) if args != list(expr.args) else expr
    return expr.func(*args) if args != list(expr.args) else expr


def _sign_bounds(diff: sympy.Expr, ranges) -> tuple:
    """Bounds of a difference, tighter than `bounds` on sums whose terms move together:
    s*s - s factors to s*(s - 1); s//2 - s is at most s/2 - s."""
    lo, hi = bounds(diff, ranges)
    if not diff.is_Add or (lo != -INF and hi != INF and lo * hi > 0):
        return lo, hi
    floor_terms = [t for t in diff.args if isinstance(t, FloorDiv) or (
        t.is_Mul and any(isinstance(f, FloorDiv) for f in t.args))]
    if len(floor_terms) == 1:
        term = floor_terms[0]
        div = term if isinstance(term, FloorDiv) else next(f for f in term.args if isinstance(f, FloorDiv))
        num, den = div.args
        coeff = sympy.Mul(*[f for f in sympy.Mul.make_args(term) if f is not div])
        c_lo, c_hi = bounds(coeff, ranges)
        if den.is_Integer and den > 0 and (c_lo >= 0 or c_hi <= 0):
            rest = diff - term
            above = sympy.expand(rest + coeff * num / den)                # x // k <= x / k
            below = sympy.expand(rest + coeff * (num - den + 1) / den)    # x // k >= (x - k + 1) / k
            if c_lo < 0:   # a coefficient <= 0 turns the bounds over
                above, below = below, above
            lo, hi = max(lo, _sign_bounds(below, ranges)[0]), min(hi, _sign_bounds(above, ranges)[1])
            if lo != -INF and hi != INF and lo * hi > 0:
                return lo, hi
    factored = _factor(diff)
    if factored.is_Mul:   # b*x*y - b is b*(x*y - 1): each factor bounded on its own
        f_lo = f_hi = sympy.Integer(1)
        for factor in factored.args:
            a, b = _sign_bounds(factor, ranges) if factor.is_Add else bounds(factor, ranges)
            products = [_mul(f_lo, a), _mul(f_lo, b), _mul(f_hi, a), _mul(f_hi, b)]
            f_lo, f_hi = min(products), max(products)
        lo, hi = max(lo, f_lo), min(hi, f_hi)
    return lo, hi


@lru_cache(maxsize=4096)
def _factor(expr: sympy.Expr) -> sympy.Expr:
    """sympy.factor, cached: each question is asked again under every range assumption."""
    return sympy.factor(expr)


def decide(rel: sympy.Basic, ranges: dict[sympy.Symbol, ValueRange]) -> bool | None:
    """True/False if the ranges settle the relation `rel`, else None."""
    if rel is sympy.true or rel is sympy.false:
        return bool(rel)
    if isinstance(rel, sympy.Not):
        inner = decide(rel.args[0], ranges)
        return None if inner is None else not inner
    if isinstance(rel, (sympy.And, sympy.Or)):
        parts = [decide(a, ranges) for a in rel.args]
        if isinstance(rel, sympy.And):
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if True in parts else (False if all(p is False for p in parts) else None)
    if not isinstance(rel, sympy.core.relational.Relational):
        return None
    rel = refine(rel, ranges)
    if rel is sympy.true or rel is sympy.false:
        return bool(rel)
    lo, hi = _sign_bounds(sympy.expand(rel.lhs - rel.rhs), ranges)
    op = rel.rel_op
    if op == "==":
        if lo == hi == 0:
            return True
        return False if (lo > 0 or hi < 0) else None
    if op == "!=":
        inner = decide(sympy.Eq(rel.lhs, rel.rhs, evaluate=False), ranges)
        return None if inner is None else not inner
    if op == "<":
        return True if hi < 0 else (False if lo >= 0 else None)
    if op == "<=":
        return True if hi <= 0 else (False if lo > 0 else None)
    if op == ">":
        return True if lo > 0 else (False if hi <= 0 else None)
    if op == ">=":
        return True if lo >= 0 else (False if hi < 0 else None)
    return None
