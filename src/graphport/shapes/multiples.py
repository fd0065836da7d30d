"""Sizes known to be multiples of a constant: `s % k == 0` read as `s = k*t`.

One side of a branch captured as a cond (`if seq % block_len != 0: pad`) is traced knowing
that its size divides: `Eq(Mod(seq, 5), 0)`. Interval bounds and the normal forms cannot use
such a fact as it stands: after the side splits `seq` into `seq//5` blocks of 5, a contiguous
copy's strides carry `Max(1, seq//5)` and a block length worked out as `seq//(seq//5)`, and
neither `seq//5 >= 1` nor `seq//(seq//5) == 5` follows from the range of `seq` alone (both
fail at seq = 4, which the side never sees). Written over a fresh symbol `t` with `seq = 5*t`
and t's own range (`[ceil(lo/5), floor(hi/5)]`), the same expressions are `Max(1, t)` and
`5*t//t`, which the normal forms and the bounds settle: `t` and `5`.

The rewriting is a way of reasoning, not of recording: expressions stay written over the
input symbols (the graph computes them from the inputs' sizes), and a result worked out over
`t` is written back over `seq` (`5*t` as `seq`, `t` as `seq//5`, both exact where the fact
holds). Sound exactly where the facts hold, which is where the side runs.
"""
from __future__ import annotations

import math

import sympy

from .expr import INF, FloorDiv, Mod, ValueRange, decide, exact_ratio, refine, same_value

_UNSET = object()


def divisors_stated(facts: tuple) -> dict[sympy.Symbol, int]:
    """Symbol -> the constant the facts say it is a multiple of (`Eq(Mod(s, k), 0)`, also
    inside an `And`; several facts on one symbol combine to their lcm)."""
    found: dict[sympy.Symbol, int] = {}
    for fact in facts:
        for rel in sympy.And.make_args(fact):
            if isinstance(rel, sympy.Not) and isinstance(rel.args[0], sympy.Ne):
                rel = sympy.Eq(*rel.args[0].args)
            if not isinstance(rel, sympy.Eq):
                continue
            mod = rel.lhs if rel.rhs == 0 else rel.rhs if rel.lhs == 0 else None
            if isinstance(mod, Mod) and mod.args[0].is_Symbol and mod.args[1].is_Integer and int(mod.args[1]) > 1:
                sym, k = mod.args[0], int(mod.args[1])
                found[sym] = math.lcm(found.get(sym, 1), k)
    return found


class Multiples:
    """Reasoning about sizes where each symbol of `divisors` is a multiple of its constant."""

    def __init__(self, divisors: dict[sympy.Symbol, int], ranges: dict[sympy.Symbol, ValueRange]):
        self.ranges = dict(ranges)
        self._forward: dict = {}
        self._back_exact: dict = {}
        self._back_floor: dict = {}
        self._decided: dict = {}
        for sym, k in divisors.items():
            # a stable name, so that the range reasoning's memo serves every capture alike
            quotient = sympy.Symbol(f"{sym}_over_{k}", integer=True, nonnegative=True)
            declared = ranges.get(sym, ValueRange(0, INF))
            lower = -(-int(declared.lower) // k) if declared.lower != -INF else 0
            upper = INF if declared.upper == INF else int(declared.upper) // k
            self.ranges[quotient] = ValueRange(max(lower, 0), upper)
            self._forward[sym] = k * quotient
            self._back_exact[quotient] = sym / k
            self._back_floor[quotient] = FloorDiv(sym, sympy.Integer(k))

    def __bool__(self) -> bool:
        return bool(self._forward)

    def rewrite(self, expr: sympy.Basic) -> sympy.Basic:
        """`expr` over the quotients, with what their ranges settle dropped (Max(1, t) -> t)."""
        if not self._forward or not (getattr(expr, "free_symbols", set()) & self._forward.keys()):
            return expr
        written = expr.xreplace(self._forward)
        if isinstance(written, sympy.Expr):
            written = sympy.expand(written)
        return refine(written, self.ranges)

    def restore(self, expr: sympy.Expr) -> sympy.Expr:
        """`expr` over the quotients written back over the input symbols: `k*t` as `s` where
        that leaves integer coefficients only, else each `t` as `s//k`."""
        if not (expr.free_symbols & self._back_exact.keys()):
            return expr
        exact = sympy.expand(expr.xreplace(self._back_exact))
        if all(n.is_Integer for n in exact.atoms(sympy.Rational)):
            return exact
        return sympy.expand(expr.xreplace(self._back_floor))

    def same_value(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        return same_value(self.rewrite(a), self.rewrite(b))

    def exact_ratio(self, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
        quotient = exact_ratio(self.rewrite(a), self.rewrite(b))
        return None if quotient is None else self.restore(quotient)

    def decide(self, rel: sympy.Basic) -> bool | None:
        found = self._decided.get(rel, _UNSET)
        if found is _UNSET:   # asked again and again while a side is traced: each answered once
            found = self._decided[rel] = decide(self.rewrite(rel), self.ranges)
        return found
