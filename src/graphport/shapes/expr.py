"""Shape expressions: sympy integers over size symbols, their value ranges, and bounds.

Sizes are sympy expressions over nonnegative integer symbols, with floor division and
modulo in a normal form (FloorDiv, Mod). Comparisons between them are decided, where
possible, from the symbols' ranges by interval arithmetic (`bounds`), tightened for floor
divisions and for differences that factor; only what ranges cannot decide becomes a guard.
The reasoning is memoized per range assignment (`_Reasoner`).
"""
from __future__ import annotations

import builtins
import math
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import sympy

from .int_bounds import floordiv_bounds, mod_bounds, pow_bounds

INF = sympy.oo


class FloorDiv(sympy.Function):
    """Integer floor division `a // b` (sympy's floor(a / b) brings in rationals).

    Kept in a normal form so that sizes computed along different paths compare equal
    without sympy's general simplification: by a positive constant `k`, an integer factor
    every term shares with `k` is divided out (`(4*x)//1024 == x//256`), terms divisible by
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
        if b == 0:
            return None   # undefined (the program divides by zero there): kept as it is, never decided
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        if a == 0:
            return sympy.Integer(0)
        if not b.is_Integer:
            quotient = _exact_quotient(a, b)
            if quotient is not None:
                return quotient
            cancelled = _cancel_common_factors(a, b)
            return FloorDiv(cancelled[0], cancelled[1]) if cancelled else None
        if b > 0:
            return _floordiv_by_constant(a, int(b))
        return None

    def _sympystr(self, printer):
        return f"(({printer._print(self.args[0])})//({printer._print(self.args[1])}))"


def _floordiv_by_constant(a: sympy.Expr, k: int):
    """`a // k` in normal form, or None when `FloorDiv(a, k)` already is."""
    terms = sympy.Add.make_args(a)
    shared = math.gcd(_integer_content(terms), k)
    if shared > 1:   # (4*x + 4*y) // 1024 == (x + y) // 256: the same division, one form
        return FloorDiv(sympy.Add(*[t / shared for t in terms]), sympy.Integer(k // shared))
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


def _integer_content(terms) -> int:
    """The gcd of the integer coefficients of a sum's terms (1 when one is not an integer)."""
    content = 0
    for term in terms:
        coeff = term.as_coeff_Mul()[0]
        if not coeff.is_Integer:
            return 1
        content = math.gcd(content, int(coeff))
        if content == 1:
            return 1
    return content


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
        if b == 0:
            return None   # undefined (the program divides by zero there): kept as it is, never decided
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        if a == b or a == 0:
            return sympy.Integer(0)
        if b.is_Integer and b > 0:
            k = int(b)
            shared = math.gcd(_integer_content(sympy.Add.make_args(a)), k)
            if shared > 1:   # (g*x) % (g*m) == g * (x % m)
                return shared * Mod(sympy.Add(*[t / shared for t in sympy.Add.make_args(a)]), sympy.Integer(k // shared))
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
        if not b.is_Integer:
            cancelled = _cancel_common_factors(a, b)
            if cancelled:   # (g*x) % (g*y) == g * (x % y) for every g != 0
                return cancelled[2] * Mod(cancelled[0], cancelled[1])
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
    `b` taken as atoms (s0*s1 // s0 == s1, b*(t//5) // b == t//5). A numerator `n` that
    `b` divides exactly by a constant (`b` has the factor `n // k` and `n % k == 0`) is
    read as `k*(n // k)`: a size padded to a multiple of 7 over its number of windows is 7."""
    if not (a.free_symbols or b.free_symbols):
        return None
    quotient = _polynomial_quotient(a, b)
    if quotient is not None:
        return quotient
    multiples = {f.args[0]: f.args[1] * f for f in sympy.Mul.make_args(b)
                 if isinstance(f, FloorDiv) and _exactly_divisible(f)}
    if multiples and a.has(*multiples):
        return _polynomial_quotient(a.xreplace(multiples), b)
    return None


def _polynomial_quotient(a, b):
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


def _cancel_common_factors(a, b) -> tuple | None:
    """(a', b', g) with a == g*a' and b == g*b' for the factors and the integer content two
    products share, or None when they share none: (32*n*x) // (128*n) is x // 4, as
    (g*a') // (g*b') == a' // b' for every g != 0 (and at g == 0 both sides divide by 0).
    Only products: sums are left to the exact quotient."""
    (ca, ra), (cb, rb) = a.as_coeff_Mul(), b.as_coeff_Mul()
    if not (ca.is_Integer and cb.is_Integer) or cb == 0:
        return None
    fa, fb = Counter(sympy.Mul.make_args(ra)), Counter(sympy.Mul.make_args(rb))
    shared = Counter({f: n for f, n in (fa & fb).items() if f.is_integer and f != 1})
    content = math.gcd(int(ca), int(cb))
    if not shared and content == 1:
        return None
    g = sympy.Mul(*[f ** n for f, n in shared.items()])
    rest_a = sympy.Mul(*[f ** n for f, n in (fa - shared).items()])
    rest_b = sympy.Mul(*[f ** n for f, n in (fb - shared).items()])
    return int(ca) // content * rest_a, int(cb) // content * rest_b, content * g


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


class _Reasoner:
    """Range reasoning under one assignment of ranges, memoized.

    Tracing asks thousands of questions under the same few range assignments (declared,
    sizes >= 1, sizes >= 2), and their expressions share most subexpressions (the same
    strided sizes appear in every reshape), so the bounds, refinements and sign bounds of
    each subexpression are computed once per assignment. Bounds are Python numbers (int,
    Fraction, +-math.inf): sympy's number arithmetic was most of the time spent here."""

    def __init__(self, ranges: dict[sympy.Symbol, ValueRange]):
        self.ranges = {s: (_number(r.lower), _number(r.upper)) for s, r in ranges.items()}
        self._bounds: dict = {}
        self._refined: dict = {}
        self._signs: dict = {}
        self._pads: dict = {}   # a padded side -> the atom standing for it (_with_padded_sides)

    def size(self) -> int:
        return len(self._bounds) + len(self._refined) + len(self._signs)

    def bounds(self, expr: sympy.Expr) -> tuple:
        found = self._bounds.get(expr)
        if found is None:
            found = self._bounds[expr] = self._compute_bounds(expr)
        return found

    def _compute_bounds(self, expr: sympy.Expr) -> tuple:
        if expr.is_Number:
            value = _number(expr)
            return (value, value) if value == value else (-_INF, _INF)   # nan: nothing known
        if expr.is_Symbol:
            return self.ranges.get(expr, (-_INF, _INF))
        if expr.is_Add:
            lo = hi = 0
            for arg in expr.args:
                a, b = self.bounds(arg)
                lo, hi = _add(lo, a), _add(hi, b)
            return _within_residue(expr, lo, hi)
        if expr.is_Mul:
            lo = hi = 1
            for arg in expr.args:
                lo, hi = _product_bounds(lo, hi, *self.bounds(arg))
            return lo, hi
        if isinstance(expr, FloorDiv):
            num, den = expr.args
            multiple_of = int(den) if _exactly_divisible(expr) else None   # a padded size over its multiple
            found = floordiv_bounds(self.bounds(num), self.bounds(den), multiple_of)
            return found if found is not None else (-_INF, _INF)
        if isinstance(expr, Mod):
            b_lo, b_hi = self.bounds(expr.args[1])
            found = mod_bounds(self.bounds(expr.args[0]), (b_lo, b_hi))
            if found is not None:
                return found
            return (_min(0, b_lo + 1) if b_lo != -_INF else -_INF), (_max(0, b_hi - 1) if b_hi != _INF else _INF)
        if isinstance(expr, (sympy.Max, sympy.Min)):
            pairs = [self.bounds(a) for a in expr.args]
            pick = _max if isinstance(expr, sympy.Max) else _min
            return pick(p[0] for p in pairs), pick(p[1] for p in pairs)
        if expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
            return pow_bounds(self.bounds(expr.base), int(expr.exp))
        if expr.is_Pow and expr.exp.is_Rational and not expr.exp.is_Integer:
            return _fractional_power_bounds(self.bounds(expr.base), Fraction(int(expr.exp.p), int(expr.exp.q)))
        return -_INF, _INF

    def refine(self, expr: sympy.Basic) -> sympy.Basic:
        if not getattr(expr, "args", None):
            return expr
        found = self._refined.get(expr)
        if found is None:
            found = self._refined[expr] = self._compute_refine(expr)
        return found

    def _compute_refine(self, expr: sympy.Basic) -> sympy.Basic:
        args = [self.refine(a) for a in expr.args]
        if isinstance(expr, (sympy.Max, sympy.Min)) and len(args) == 2:
            lo, hi = self.bounds(sympy.expand(args[0] - args[1]))
            if isinstance(expr, sympy.Max):
                return args[0] if lo >= 0 else args[1] if hi <= 0 else expr.func(*args)
            return args[1] if lo >= 0 else args[0] if hi <= 0 else expr.func(*args)
        if isinstance(expr, FloorDiv) and args[0] == args[1] and self.bounds(args[0])[0] >= 1:
            return sympy.Integer(1)   # a // a, a >= 1
        if isinstance(expr, (Mod, FloorDiv)) and self._below(args[0], args[1]):   # 0 <= a < b
            return args[0] if isinstance(expr, Mod) else sympy.Integer(0)
        if expr.is_Relational:
            return expr.func(*args, evaluate=False) if args != list(expr.args) else expr
        return expr.func(*args) if args != list(expr.args) else expr

    def _below(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        """0 <= a < b: from the bounds of a and b when they settle it, else from b - a."""
        a_lo, a_hi = self.bounds(a)
        if a_lo < 0:
            return False
        if a_hi < self.bounds(b)[0]:
            return True
        return self.sign_bounds(sympy.expand(b - a))[0] > 0

    def sign_bounds(self, diff: sympy.Expr) -> tuple:
        """Bounds of a difference, tighter than `bounds` on sums whose terms move together:
        s*s - s factors to s*(s - 1); s//2 - s is at most s/2 - s."""
        found = self._signs.get(diff)
        if found is None:
            found = self._signs[diff] = self._compute_sign_bounds(diff)
        return found

    def _compute_sign_bounds(self, diff: sympy.Expr) -> tuple:
        lo, hi = self.bounds(diff)
        if not diff.is_Add or _settled(lo, hi):
            return lo, hi
        exact = _without_exact_divisions(diff)
        if exact is not None:   # a size padded up to a multiple, divided by it: h_pad//4 is h_pad/4
            e_lo, e_hi = self.sign_bounds(exact)
            lo, hi = _max(lo, e_lo), _min(hi, e_hi)
            if _settled(lo, hi):
                return lo, hi
        padded = self._with_padded_sides(diff)
        if padded is not None:   # w + (w + Mod(-w, 7))*(hp - 8) + Mod(-w, 7) is wp*(hp - 7)
            p_lo, p_hi = self.sign_bounds(padded)
            lo, hi = _max(lo, p_lo), _min(hi, p_hi)
            if _settled(lo, hi):
                return lo, hi
        floor_terms = [t for t in diff.args if isinstance(t, FloorDiv) or (
            t.is_Mul and any(isinstance(f, FloorDiv) for f in t.args))]
        paired = self._paired_floor_bounds(diff, floor_terms)
        if paired is not None:
            lo, hi = _max(lo, paired[0]), _min(hi, paired[1])
            if _settled(lo, hi):
                return lo, hi
        if len(floor_terms) == 1:
            term = floor_terms[0]
            div = term if isinstance(term, FloorDiv) else next(f for f in term.args if isinstance(f, FloorDiv))
            num, den = div.args
            coeff = sympy.Mul(*[f for f in sympy.Mul.make_args(term) if f is not div])
            c_lo, c_hi = self.bounds(coeff)
            if den.is_Integer and den > 0 and (c_lo >= 0 or c_hi <= 0):
                rest = diff - term   # `diff` is expanded: only the replaced term needs expanding
                above = rest + sympy.expand(coeff * num / den)                # x // k <= x / k
                below = rest + sympy.expand(coeff * (num - den + 1) / den)    # x // k >= (x - k + 1) / k
                if c_lo < 0:   # a coefficient <= 0 turns the bounds over
                    above, below = below, above
                lo, hi = _max(lo, self.sign_bounds(below)[0]), _min(hi, self.sign_bounds(above)[1])
                if _settled(lo, hi):
                    return lo, hi
        factored = _common_factor(diff)
        if factored is None:
            factored = _grouped_factor(diff)
        if factored is None and not diff.has(sympy.Function) and len(diff.free_symbols) <= _FACTOR_SYMBOLS:
            factored = _factor(diff)
        if factored is not None and factored.is_Mul:   # b*x*y - b is b*(x*y - 1): each factor bounded on its own
            f_lo = f_hi = 1
            for factor in factored.args:
                a, b = self.sign_bounds(factor) if factor.is_Add else self.bounds(factor)
                f_lo, f_hi = _product_bounds(f_lo, f_hi, a, b)
            lo, hi = _max(lo, f_lo), _min(hi, f_hi)
        return lo, hi

    def _with_padded_sides(self, diff: sympy.Expr) -> sympy.Expr | None:
        """`diff` expanded with each padding `Mod(-x, k)` of a symbol x written as `P - x`, P an
        atom standing for the padded side `x + Mod(-x, k)` with that side's bounds (a multiple
        of k): the same value, in which the terms of a padded side multiplied out apart cancel
        and factor again. None when `diff` pads no symbol."""
        mods = [m for m in diff.atoms(Mod) if m.args[1].is_Integer and (-m.args[0]).is_Symbol]
        if not mods:
            return None
        pads = self._pads
        replaced = {}
        for mod in mods:
            side = -mod.args[0] + mod
            atom = pads.get(side)
            if atom is None:
                atom = pads[side] = sympy.Dummy("padded", integer=True)
                self.ranges[atom] = self.bounds(side)
            replaced[mod] = atom + mod.args[0]
        return sympy.expand(diff.xreplace(replaced))

    def _paired_floor_bounds(self, diff: sympy.Expr, floor_terms: list) -> tuple | None:
        """Bounds of `c*(a//k) - c*(b//k) + rest`: a//k - b//k lies between
        ((a - b) - (k - 1))/k and ((a - b) + (k - 1))/k, so `h//4 <= (h + 3)//4` is settled
        from a - b = -3 alone (each division's own bounds are too wide to)."""
        if len(floor_terms) != 2:
            return None
        (c1, d1), (c2, d2) = (t.as_coeff_Mul() for t in floor_terms)
        if not (isinstance(d1, FloorDiv) and isinstance(d2, FloorDiv) and c1 == -c2 and d1.args[1] == d2.args[1]
                and d1.args[1].is_Integer and d1.args[1] > 0):
            return None
        k, c = int(d1.args[1]), _number(c1)
        gap_lo, gap_hi = self.sign_bounds(sympy.expand(d1.args[0] - d2.args[0]))
        pair_lo = -_INF if gap_lo == -_INF else -((k - 1 - gap_lo) // k)   # ceil((gap_lo - k + 1) / k)
        pair_hi = _INF if gap_hi == _INF else (gap_hi + k - 1) // k
        pair_lo, pair_hi = _product_bounds(pair_lo, pair_hi, c, c)
        rest_lo, rest_hi = self.sign_bounds(sympy.expand(diff - floor_terms[0] - floor_terms[1]))
        return pair_lo + rest_lo, pair_hi + rest_hi

    def decide(self, rel: sympy.Basic) -> bool | None:
        if rel is sympy.true or rel is sympy.false:
            return bool(rel)
        if isinstance(rel, sympy.Not):
            inner = self.decide(rel.args[0])
            return None if inner is None else not inner
        if isinstance(rel, (sympy.And, sympy.Or)):
            parts = [self.decide(a) for a in rel.args]
            if isinstance(rel, sympy.And):
                return False if False in parts else (True if all(p is True for p in parts) else None)
            return True if True in parts else (False if all(p is False for p in parts) else None)
        if not isinstance(rel, sympy.core.relational.Relational):
            return None
        at_point = self._at_point(rel)
        if at_point is not None:
            return at_point
        rel = self.refine(rel)
        if rel is sympy.true or rel is sympy.false:
            return bool(rel)
        lo, hi = self._difference_bounds(rel.lhs - rel.rhs)
        op = rel.rel_op
        if op in ("==", "!="):
            equal = True if lo == hi == 0 else (False if (lo > 0 or hi < 0) else None)
            return equal if op == "==" or equal is None else not equal
        if op == "<":
            return True if hi < 0 else (False if lo >= 0 else None)
        if op == "<=":
            return True if hi <= 0 else (False if lo > 0 else None)
        if op == ">":
            return True if lo > 0 else (False if hi <= 0 else None)
        if op == ">=":
            return True if lo >= 0 else (False if hi < 0 else None)
        return None

    def _difference_bounds(self, diff: sympy.Expr) -> tuple:
        """Bounds of `lhs - rhs`: of its expanded sum (where terms that move together cancel
        and factor), intersected with the bounds of the difference as written, piece by
        piece (a product or power of floor divisions that expanding would split into terms
        bounded apart: `(((s + 240)//320) - 1)**2`, `b*(s//5 - 1) - 1`)."""
        expanded = sympy.expand(diff)
        lo, hi = self.sign_bounds(expanded)
        if _settled(lo, hi) or diff == expanded:
            return lo, hi
        w_lo, w_hi = self.bounds(diff)
        return _max(lo, w_lo), _min(hi, w_hi)

    def _at_point(self, rel: sympy.Basic) -> bool | None:
        """The relation's value where each of its symbols has a one-point range: evaluated
        there, not bounded (bounds of `x % 2` do not know x)."""
        symbols = rel.free_symbols
        if not symbols or any(s not in self.ranges or self.ranges[s][0] != self.ranges[s][1]
                              or not isinstance(self.ranges[s][0], int) for s in symbols):
            return None
        try:
            value = rel.xreplace({s: sympy.Integer(self.ranges[s][0]) for s in symbols})
        except (ZeroDivisionError, ValueError, TypeError):   # undefined there (x // 0): not decided
            return None
        return bool(value) if value is sympy.true or value is sympy.false else None


_INF = math.inf
# capture replaces the builtins max/min while tracing (symbolic sizes stay symbolic); the
# arithmetic of bounds is on plain numbers and takes the real ones
_max, _min = builtins.max, builtins.min


def _number(value) -> int | Fraction | float:
    """A range end or sympy number as a Python number; sympy's infinities as math.inf."""
    if isinstance(value, (int, float, Fraction)):
        return value
    if value.is_Integer:
        return int(value)
    if value.is_Rational:
        return Fraction(int(value.p), int(value.q))
    if value is INF or value is -INF:
        return _INF if value is INF else -_INF
    return float(value)   # nan for sympy's nan and zoo: nothing is known of it


def _fractional_power_bounds(base: tuple, exp: Fraction) -> tuple:
    """Bounds of base ** exp (a fractional power such as n ** 0.5 or n ** -0.5, real-valued
    only for base >= 0): monotone in the base, so its ends, widened outward by a relative
    2**-40 for the rounding of the float power that computes them."""
    lo, hi = base
    if not lo >= 0 or (exp < 0 and lo == 0):
        return -_INF, _INF
    if exp < 0:
        lo, hi = hi, lo

    def power(value):
        if value == _INF:
            return _INF if exp > 0 else 0
        try:
            return Fraction(float(value) ** float(exp))
        except OverflowError:
            return _INF
    slack = Fraction(1, 2 ** 40)
    low, high = power(lo), power(hi)
    return low * (1 - slack), (high * (1 + slack) if high != _INF else _INF)


def _sympy_number(value) -> sympy.Expr:
    if value == _INF:
        return INF
    if value == -_INF:
        return -INF
    return sympy.sympify(value) if not isinstance(value, Fraction) else sympy.Rational(value.numerator,
                                                                                        value.denominator)


def _add(a, b):
    """a + b for bounds; an infinite one decides without converting the other to a float
    (a Fraction beyond a float's range, as rounding-error bounds hold, would overflow)."""
    if a in (_INF, -_INF):
        return a if b not in (_INF, -_INF) or b == a else math.nan
    if b in (_INF, -_INF):
        return b
    return a + b


def _mul(a, b):
    if a == 0 or b == 0:
        return 0
    if a in (_INF, -_INF) or b in (_INF, -_INF):   # by sign: a Fraction too large or small for a float
        return _INF if (a > 0) == (b > 0) else -_INF   # (rounding-error bounds) must not meet inf as one
    return a * b


def _product_bounds(lo, hi, a, b) -> tuple:
    products = [_mul(lo, a), _mul(lo, b), _mul(hi, a), _mul(hi, b)]
    return _min(products), _max(products)


def _settled(lo, hi) -> bool:
    """Whether the sign is known: both bounds on the same side of 0."""
    return lo > 0 or hi < 0 or lo == hi == 0


# The reasoners of the latest range assignments, shared by every export of the process (a
# re-trace asks the same questions); the lock keeps the recency order whole when threads
# export at once. A reasoner's own memo needs none: each entry is one dict write of a pure answer.
_REASONERS: OrderedDict = OrderedDict()
_REASONERS_LOCK = threading.Lock()
_REASONERS_KEPT = 16
_MEMO_LIMIT = 200_000   # entries per range assignment; a long-lived process starts afresh past it


def _reasoner(ranges: dict[sympy.Symbol, ValueRange]) -> _Reasoner:
    key = frozenset(ranges.items())
    with _REASONERS_LOCK:
        found = _REASONERS.get(key)
        if found is None or found.size() > _MEMO_LIMIT:
            found = _REASONERS[key] = _Reasoner(ranges)
            if len(_REASONERS) > _REASONERS_KEPT:
                _REASONERS.popitem(last=False)
        else:
            _REASONERS.move_to_end(key)
        return found


def bounds(expr: sympy.Expr, ranges: dict[sympy.Symbol, ValueRange]) -> tuple:
    """(lowest, highest) value `expr` can take when every symbol lies in its range."""
    lo, hi = _reasoner(ranges).bounds(sympy.sympify(expr))
    return _sympy_number(lo), _sympy_number(hi)


def refine(expr: sympy.Basic, ranges: dict[sympy.Symbol, ValueRange]) -> sympy.Basic:
    """Drop Max/Min/Mod/FloorDiv whose outcome the ranges settle (Max(1, s) -> s when s >= 1)."""
    return _reasoner(ranges).refine(expr)


def _without_exact_divisions(diff: sympy.Expr) -> sympy.Expr | None:
    """`diff` expanded with every `a // k` whose remainder `a % k` is 0 for all values
    (`(h + (-h) % 4) // 4`) written as `a / k`, or None when it has none. The normal form
    keeps such a division (a / k has fractional coefficients); comparisons need the
    quotient, or `3*h_pad*w_pad == 48*(h_pad//4)*(w_pad//4)` stays open."""
    if not diff.has(FloorDiv):
        return None
    changed, terms = False, []
    for term in sympy.Add.make_args(diff):   # the divisions that are factors of a term, not those
        factors = []                         # inside another division or modulo
        for factor in sympy.Mul.make_args(term):
            base, exp = factor.as_base_exp()
            if isinstance(base, FloorDiv) and exp.is_Integer and exp > 0 and _exactly_divisible(base):
                factor, changed = (base.args[0] / base.args[1]) ** exp, True
            factors.append(factor)
        terms.append(sympy.Mul(*factors))
    return sympy.expand(sympy.Add(*terms)) if changed else None


@lru_cache(maxsize=4096)
def _exactly_divisible(div: FloorDiv) -> bool:
    num, den = div.args
    return den.is_Integer and den > 0 and Mod(num, den) == 0


def _common_factor(diff: sympy.Expr) -> sympy.Expr | None:
    """`diff` with the factors every term shares taken out (b*x*y - b -> b*(x*y - 1)), or
    None when they share none. Much cheaper than polynomial factoring on sums of many
    floor divisions, and it is the case strided reshapes ask."""
    terms = sympy.Add.make_args(diff)
    common: Counter | None = None
    for term in terms:
        powers: Counter = Counter()
        for factor in sympy.Mul.make_args(term.as_coeff_Mul()[1]):
            base, exp = factor.as_base_exp()
            if exp.is_Integer and exp > 0:
                powers[base] += int(exp)
        common = powers if common is None else common & powers
        if not common:
            return None
    shared = sympy.Mul(*[base ** exp for base, exp in common.items()])
    return sympy.Mul(shared, sympy.Add(*[term / shared for term in terms]), evaluate=False)


def _grouped_factor(diff: sympy.Expr) -> sympy.Expr | None:
    """`diff` as (u + k)*A when it is u*A + k*A for an atom u (a symbol or a division) and a
    constant k: b*x - b - x + 1 -> (b - 1)*(x - 1), the comparison of a size with its
    product by the batch. Linear in u only; cheap, unlike general factoring."""
    terms = sympy.Add.make_args(diff)
    candidates = {f for term in terms for f in sympy.Mul.make_args(term.as_coeff_Mul()[1])
                  if f.is_Symbol or isinstance(f, (FloorDiv, Mod))}
    for u in candidates:
        with_u, without_u = [], []
        for term in terms:
            factors = sympy.Mul.make_args(term)
            if u in factors:
                with_u.append(sympy.Mul(*[f for f in factors if f is not u]))
            elif term.has(u):
                break   # u squared, or inside another division: not linear in u
            else:
                without_u.append(term)
        else:
            if not without_u:
                continue
            a_part, b_part = sympy.Add(*with_u), sympy.Add(*without_u)
            if a_part.is_Number:   # u*c + k*c: nothing to split off
                continue
            a_coeff, a_rest = sympy.Add.make_args(a_part)[0].as_coeff_Mul()
            match = [t for t in sympy.Add.make_args(b_part) if t.as_coeff_Mul()[1] == a_rest]
            if not match:
                continue
            k = match[0].as_coeff_Mul()[0] / a_coeff
            if b_part - k * a_part == 0:
                return sympy.Mul(u + k, a_part, evaluate=False)
    return None


# polynomial factoring (sympy.factor, ~10 ms a call) is tried only on polynomials in this
# many symbols or fewer, without floor divisions: (s0 - 1)*(s1 - 1) written out; sums over
# strided sizes are settled by their common factors and the floor-division refinement
_FACTOR_SYMBOLS = 3


@lru_cache(maxsize=4096)
def _factor(expr: sympy.Expr) -> sympy.Expr:
    """sympy.factor, cached: each question is asked again under every range assumption."""
    return sympy.factor(expr)


def decide(rel: sympy.Basic, ranges: dict[sympy.Symbol, ValueRange]) -> bool | None:
    """True/False if the ranges settle the relation `rel`, else None."""
    return _reasoner(ranges).decide(rel)


def _within_residue(expr: sympy.Expr, lo, hi) -> tuple:
    """Bounds of a sum tightened to the values it can take modulo k, where the normal form
    fixes its remainder by k (k the modulus of a Mod inside it): a side padded to a multiple of
    7 (`h + Mod(-h, 7)`) with h >= 1 is at least 7, and that side less 8 at least -1. Only a
    sum with integer coefficients has a remainder: a relaxed quotient (`-a/2 - Mod(-a, 2)/2 + 1`)
    takes values between the integers."""
    if not all(c.is_Integer for c in expr.as_coefficients_dict().values()):
        return lo, hi
    for k in {int(m.args[1]) for m in expr.atoms(Mod) if m.args[1].is_Integer and int(m.args[1]) > 1}:
        remainder = Mod(expr, k)
        if not remainder.is_Integer:
            continue
        r = int(remainder)
        if lo not in (-_INF, _INF) and lo == int(lo):
            lo = int(lo) + (r - int(lo)) % k
        if hi not in (-_INF, _INF) and hi == int(hi):
            hi = int(hi) - (int(hi) - r) % k
    return lo, hi


def same_value(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Whether two size expressions are equal at every value of their symbols, read through
    the normal forms alone (no ranges, no question asked): their difference expands to 0,
    or does once every exact division is a quotient. A size padded to a multiple of 7 and
    its window count times 7 (`h + Mod(-h, 7)` and `7*((h + Mod(-h, 7))//7)`) are the same
    size: a row-major layout or a view written with one and checked with the other is one."""
    if a == b:
        return True
    diff = sympy.expand(a - b)
    if diff == 0:
        return True
    exact = _without_exact_divisions(diff)
    return exact is not None and exact == 0


def exact_ratio(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    """`a / b` as a size expression (integer coefficients; divisions and moduli as atoms) when
    `b` divides `a` at every value of their symbols, read through the normal forms: the
    polynomial quotient, or the quotient once every exact division in either is written as
    one (`196*n*((hp)//(7))*((wp)//(7))` over `4*hp*wp` is `n`, for `hp = h + Mod(-h, 7)`).
    None when no such form shows it (a quotient with fractional coefficients included)."""
    quotient = _exact_quotient(a, b)
    if quotient is not None:
        return quotient
    a_exact = _without_exact_divisions(sympy.expand(a))
    b_exact = _without_exact_divisions(sympy.expand(b))
    if a_exact is None and b_exact is None:
        return None
    return _polynomial_quotient(a if a_exact is None else a_exact, b if b_exact is None else b_exact)
