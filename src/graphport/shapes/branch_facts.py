"""Questions about sizes inside one side of a branch the spec cannot decide.

When export captures both sides of a Python branch on a size predicate (export's
`branch_splits`), each side is traced knowing which way the predicate went: `size == 4`
on the true side, `size != 4` on the false one. Questions that follow from that fact (the
add after `return self.position_embeddings` asks whether the patch count matches the table)
must be answered from it, not guarded, or the side would narrow the spec it was traced for.

The facts are arbitrary integer relations (`(h//16)*(w//16) == 196`), which interval
reasoning cannot combine, so they are decided exactly: by evaluating the question and the
facts at every point of the declared ranges of the symbols involved, when there are few
enough points. More points, an unbounded range, or a symbol without a declared range (a
data-dependent size) leave the question undecided, and it is guarded as usual.
"""
from __future__ import annotations

import builtins
import itertools
import operator

import sympy

from .expr import INF, FloorDiv, Mod, ValueRange

# points evaluated per question at most; beyond that the question is left undecided
MAX_POINTS = 200_000

_FUNCTIONS = {"FloorDiv": operator.floordiv, "Mod": operator.mod, "Max": builtins.max, "Min": builtins.min}


def decide_given(rel: sympy.Basic, facts: tuple, ranges: dict[sympy.Symbol, ValueRange]) -> bool | None:
    """True when `rel` holds at every point of the ranges where all `facts` hold, False when it
    holds at none of them, None when it holds at some, or when the points cannot be evaluated."""
    if not facts:
        return None
    involved = set(rel.free_symbols)
    relevant: list[sympy.Basic] = []
    pending = list(facts)
    changed = True
    while changed:   # facts sharing a symbol with the question, transitively
        changed = False
        for fact in list(pending):
            if fact.free_symbols & involved:
                relevant.append(fact)
                involved |= fact.free_symbols
                pending.remove(fact)
                changed = True
    if not relevant or not _evaluable(rel) or not all(_evaluable(f) for f in relevant):
        return None
    symbols = sorted(involved, key=str)
    spans = []
    points = 1
    for sym in symbols:
        r = ranges.get(sym)
        if r is None or r.upper == INF or r.lower == -INF:
            return None
        lo, hi = int(r.lower), int(r.upper)
        points *= max(hi - lo + 1, 0)
        if points > MAX_POINTS:
            return None
        spans.append(range(lo, hi + 1))
    given = sympy.lambdify(symbols, sympy.And(*relevant), modules=[_FUNCTIONS, "math"])
    asked = sympy.lambdify(symbols, rel, modules=[_FUNCTIONS, "math"])
    seen_true = seen_false = False
    for point in itertools.product(*spans):
        try:
            if not given(*point):
                continue
        except ZeroDivisionError:   # a fact dividing by a size that is 0 here does not hold here
            continue
        try:
            holds = bool(asked(*point))
        except ZeroDivisionError:
            return None
        seen_true |= holds
        seen_false |= not holds
        if seen_true and seen_false:
            return None
    if not (seen_true or seen_false):
        return None   # no size satisfies the facts: nothing to say (the side is never taken)
    return seen_true


def _evaluable(rel: sympy.Basic) -> bool:
    """Integer arithmetic only, evaluated exactly: no fractions or floats, and no function
    Python would not evaluate as the algebra means it."""
    return (all(n.is_Integer for n in rel.atoms(sympy.Number))
            and all(isinstance(f, (FloorDiv, Mod, sympy.Max, sympy.Min)) for f in rel.atoms(sympy.Function)))
