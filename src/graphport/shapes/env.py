"""The shape environment: size symbols, their ranges, and the guards tracing records.

Every dynamic dimension is a symbol with a declared range and a hint (its size in the
example inputs). When the program asks a question about sizes, the answer comes from
the ranges if they settle it; otherwise from the hints, and the answer is recorded as a
guard, with the user's source line, for the soundness check after tracing. A guard that
equates a symbol with an expression becomes a replacement, so later expressions simplify.

Like torch.export, reasoning may assume dynamic sizes are at least 2 (sizes 0 and 1 are
specialized). Unlike it, graphport remembers each symbol whose answers needed that
assumption (and whether >= 1 was enough), and the runtime check refuses the sizes the
capture is not valid for instead of running them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import sympy

from ..errors import UnsupportedFeatureError
from ..source import SourceLocation, asked_by_program, innermost_user_location
from .branch_facts import decide_given
from .expr import Mod, ValueRange, decide
from .multiples import Multiples, divisors_stated
from .symbols import SymbolKind, SymbolTable
from .unbacked import Unbacked, needs_value, undecidable

_guards_log = logging.getLogger("graphport.shapes.guards")


_UNSET = object()


class ChoiceUndecided(Exception):
    """A view-or-copy call (reshape, flatten, contiguous) asked a question about sizes that the
    ranges do not settle. Which way it goes decides only whether the result aliases its
    source, never its values, so it is not made a guard: capture makes the call again on a
    contiguous copy of the source, which never asks it (a question the copy asks again, such as
    whether the sizes fit the new shape at all, is guarded as usual)."""

    def __init__(self, question: sympy.Basic):
        super().__init__(str(question))
        self.question = question


class BranchUndecided(Exception):
    """A branch question about input sizes that the ranges do not settle, asked while export
    captures such branches as a cond (export's branch_splits): the capture is made again
    with the program run once on each side of it."""

    def __init__(self, question: sympy.Basic, location: SourceLocation | None):
        super().__init__(str(question))
        self.question = question
        self.location = location


@dataclass
class Guard:
    rel: sympy.Basic
    location: SourceLocation | None


@dataclass
class SymbolInfo:
    symbol: sympy.Symbol
    hint: int
    declared: ValueRange
    dim_name: str                        # the user's Dim name, or an "input.size(d)" label
    source: tuple[int, int]              # (flat input index, dimension) it was first read from
    auto: bool = False                   # Dim.AUTO: guards refine it instead of failing
    source_affine: tuple[int, int] = (1, 0)   # that dimension is coeff * symbol + offset


@dataclass
class ShapeEnv:
    symbols: dict[sympy.Symbol, SymbolInfo] = field(default_factory=dict)
    replacements: dict[sympy.Symbol, sympy.Expr] = field(default_factory=dict)
    guards: list[Guard] = field(default_factory=list)
    # symbol -> smallest size the capture's decisions hold for (1 or 2), where that
    # exceeds its declared minimum: sizes below it need their own export.
    assumed_min: dict[sympy.Symbol, int] = field(default_factory=dict)
    assumption_sites: dict[sympy.Symbol, SourceLocation | None] = field(default_factory=dict)
    _simplified: dict = field(default_factory=dict)
    _decisions: dict = field(default_factory=dict)
    _arith: dict = field(default_factory=dict)
    # (operation, *argument expressions) -> the one SymNode of that pure value here (shapes/node.py)
    pure_nodes: dict = field(default_factory=dict)
    _asked: dict = field(default_factory=dict)          # relation -> times it had to be guarded
    # answers by the ranges they were settled from: valid in any env (see share_caches)
    _by_ranges: dict = field(default_factory=dict)
    unbacked: Unbacked = field(default_factory=Unbacked)   # data-dependent symbols (shapes/unbacked.py)
    exact: set = field(default_factory=set)   # symbols never assumed >= 1 or 2 (dynamic ints: 0 and 1 are ordinary)
    # while capture runs: where assumptions go that capture proves operator by operator
    # (capture/local_proofs.py); those it proved, by symbol (they hold at every size in range)
    deferral: Any = None
    proven_min: dict[sympy.Symbol, int] = field(default_factory=dict)
    # while a view-or-copy call runs: the questions nothing settled (its kernel takes a default
    # answer, valid for the values but maybe not for aliasing)
    undecided: list | None = None
    # while a view-or-copy call that can be made again on a copy runs: a question about input
    # sizes nothing settles raises ChoiceUndecided instead of becoming a guard
    copy_if_undecided: bool = False
    # while one side of a branch captured as a cond is traced: the relations that hold there
    # (the predicate, or its negation), which settle the questions that follow from them
    branch_facts: tuple = ()
    _multiples: dict = field(default_factory=dict)   # facts -> what they say divides (multiples())
    _guarded_divisors: tuple = ((), 0)   # divisibility guards, and how many guards were read for them
    # while export captures undecided branches as conds: told each undecided branch question
    # (`splitting.undecided(rel, location)`), it raises BranchUndecided, returns False when no
    # further split is allowed and the question becomes a guard as usual, or True when either
    # side of the branch computes the same values (answered from the example, unguarded)
    splitting: Any = None
    # kind and creation order of every symbol made here (shapes/symbols.py); shared with
    # `unbacked`, which makes the data-dependent ones
    table: SymbolTable = field(default_factory=SymbolTable)

    def __post_init__(self) -> None:
        self.unbacked.table = self.table

    def share_caches(self, other: "ShapeEnv") -> None:
        """Reuse `other`'s caches of pure answers (a re-trace of the same program: most of
        its questions are the same). Only what depends on nothing but its key is shared:
        decisions keyed by the ranges of the symbols they involve, and size arithmetic."""
        self._by_ranges = other._by_ranges
        self._arith = other._arith

    def with_tied_sizes(self, pins: dict) -> dict:
        """`pins` (symbol -> size) with every symbol this environment proved equal to a pinned
        size pinned too, for a "what if" at those sizes.

        Two inputs declared with symbols of their own (Dim.AUTO on `input_ids` and on its
        `attention_mask`) are tied by the operator that pairs them: the capture replaces one
        symbol by the other, or keeps their equality as a guard, and every call the program
        accepts has both at the same value. Pinning one alone would look at inputs the program
        never accepts (a mask of another length than its ids) and find a failure eager never
        meets. A tied size outside its own declared range is left open: no call has it."""
        ties = list(self.replacements.items())
        for guard in self.guards:
            for rel in sympy.And.make_args(guard.rel):   # a guard may state several equalities at once
                if isinstance(rel, sympy.Eq):
                    ties += [(rel.lhs, rel.rhs), (rel.rhs, rel.lhs)]
        closed = dict(pins)
        changed = True
        while changed:
            changed = False
            for sym, target in ties:
                if sym in closed or sym not in self.symbols:
                    continue
                try:
                    value = target.xreplace(closed)
                except ZeroDivisionError:   # a division by a size pinned to 0: no tie to follow
                    continue
                declared = self.symbols[sym].declared
                if value.is_Integer and declared.lower <= value <= declared.upper:
                    closed[sym] = sympy.Integer(value)
                    changed = True
        return closed

    def fork(self, pinned: frozenset | set = frozenset(), *, with_facts: bool = False) -> "ShapeEnv":
        """A new environment for a "what if" about this one (sizes pinned, a re-trace): the
        same symbols and declared ranges, less those in `pinned`, sharing only the caches of
        pure answers; guards, assumptions and decisions start empty, and nothing done in the
        fork reaches this environment. `with_facts` (the same program transformed at the same
        sizes, as lowering does) starts the fork from what this environment knows instead:
        its replacements, guards, assumptions and data-dependent symbols, copied."""
        env = ShapeEnv()
        env.share_caches(self)
        for sym, info in self.symbols.items():
            if sym not in pinned:
                env.add_symbol(replace(info))
        env.exact = self.exact - set(pinned)
        if with_facts:
            env.replacements = dict(self.replacements)
            env.guards = list(self.guards)
            env.assumed_min, env.assumption_sites = dict(self.assumed_min), dict(self.assumption_sites)
            env.proven_min = dict(self.proven_min)
            env.unbacked = self.unbacked.copy()
            env.unbacked.table = env.table
            for sym in self.table.in_order(env.unbacked.infos):
                env.table.add(sym, SymbolKind.DATA_DEPENDENT)
        return env

    # -- symbols ------------------------------------------------------------------------

    def create_symbol(self, hint: int, declared: ValueRange, dim_name: str, source: tuple[int, int],
                      auto: bool = False, source_affine: tuple[int, int] = (1, 0)) -> sympy.Symbol:
        sym = sympy.Symbol(self.table.next_name(SymbolKind.INPUT), integer=True, nonnegative=True)
        self.add_symbol(SymbolInfo(sym, hint, declared, dim_name, source, auto, source_affine))
        return sym

    def add_symbol(self, info: SymbolInfo) -> None:
        """Enter an input size symbol made elsewhere (a loaded or converted program's)."""
        self.symbols[info.symbol] = info
        self.table.add(info.symbol, SymbolKind.INPUT)

    @property
    def ranges(self) -> dict[sympy.Symbol, ValueRange]:
        return {**{s: i.declared for s, i in self.symbols.items()}, **self.unbacked.ranges()}

    def _cached_decide(self, rel: sympy.Basic, least: int) -> bool | None:
        """Ranges are fixed while tracing, so each question has one answer per assumption level."""
        key = (rel, least)
        found = self._decisions.get(key, _UNSET)
        if found is _UNSET:
            ranges = self._assuming(least) if least else self.ranges
            # `decide` reads the ranges of the relation's own symbols only
            shared = (rel, frozenset((s, ranges.get(s)) for s in rel.free_symbols))
            found = self._by_ranges.get(shared, _UNSET)
            if found is _UNSET:
                found = self._by_ranges[shared] = decide(rel, ranges)
            self._decisions[key] = found
        return found

    def _assuming(self, least: int) -> dict[sympy.Symbol, ValueRange]:
        # data-dependent symbols keep their ranges: no trace at a small size can prove them
        return {**{s: ValueRange(i.declared.lower if s in self.exact else max(i.declared.lower, least),
                                 i.declared.upper) for s, i in self.symbols.items()},
                **self.unbacked.ranges()}

    def _decide(self, rel: sympy.Basic, location: SourceLocation | None = None, record: bool = True):
        """Settle `rel` from the ranges: declared first, then assuming sizes >= 1, then >= 2
        (torch.export's 0/1 specialization), and for "is this size 0 or 1?" questions (layout
        and broadcasting logic) assuming sizes up to 4, never beyond the example's sizes.
        Remember which assumption was needed: smaller sizes are proven by tracing there."""
        found = self._cached_decide(rel, 0)
        if found is not None:
            return found
        levels = (1, 2, 3, 4) if _asks_if_trivial(rel) else (1, 2)
        largest = min((self.symbols[s].hint for s in rel.free_symbols if s in self.symbols), default=2)
        for least in levels:
            if least > 2 and least > largest:
                break
            found = self._cached_decide(rel, least)
            if found is not None:
                if record:
                    for sym in (rel.free_symbols & self.symbols.keys()) - self.exact:
                        if self.symbols[sym].declared.lower >= least or (
                                self.deferral is not None and self.deferral.take(sym, least, location)):
                            continue
                        if self.assumed_min.get(sym, 0) < least:
                            if self.deferral is not None:
                                self.deferral.ordinary(sym, least)
                            self.assumed_min[sym] = least
                            self.assumption_sites[sym] = location or innermost_user_location()
                return found
        found = self.unbacked.decide(rel, self.ranges) if self.unbacked.facts else None
        if found is None:
            multiples = self.multiples()
            if multiples:
                found = multiples.decide(rel)
        if found is None and self.branch_facts:
            key = (rel, self.branch_facts)
            found = self._decisions.get(key, _UNSET)
            if found is _UNSET:
                found = self._decisions[key] = decide_given(rel, self.branch_facts, self.ranges)
        if found is None and self.undecided is not None:
            self.undecided.append(rel)
        return found

    def multiples(self) -> Multiples:
        """Reasoning that knows which sizes are multiples of a constant: those the current
        branch facts say are (`seq % 5 == 0` on one side of a cond), and those a guard says are
        (`torch._check(n % 4 == 0)`: every guard holds wherever the program runs, checked per
        call or refused at export, as torch's shape environment uses its guards too).
        shapes/multiples.py. Without such facts it reasons as the normal forms and ranges do."""
        stated, read = self._guarded_divisors
        if read != len(self.guards):   # only the guards recorded since the last call are read
            stated += tuple(g.rel for g in self.guards[read:] if g.rel.has(Mod))
            self._guarded_divisors = (stated, len(self.guards))
        key = (self.branch_facts, stated)
        found = self._multiples.get(key)
        if found is None:
            found = self._multiples[key] = Multiples(divisors_stated(self.branch_facts + stated),
                                                     {s: i.declared for s, i in self.symbols.items()})
        return found

    def hints(self) -> dict[sympy.Symbol, sympy.Integer]:
        return {s: sympy.Integer(i.hint) for s, i in self.symbols.items()}

    # -- expressions --------------------------------------------------------------------

    def simplify(self, expr: sympy.Basic) -> sympy.Basic:
        if not self.replacements or not getattr(expr, "free_symbols", None):
            return expr
        key = (expr, len(self.replacements))
        found = self._simplified.get(key)
        if found is None:
            found = expr.xreplace(self.replacements)
            if found != expr:
                found = sympy.expand(found) if found.is_Add or found.is_Mul else found
            self._simplified[key] = found
        return found

    def memo(self, fn, a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
        """fn(a, b) for size arithmetic, cached: kernels recompute the same sizes many times."""
        key = (fn, a, b)
        found = self._arith.get(key)
        if found is None:
            found = self._arith[key] = fn(a, b)
        return found

    def extremum(self, largest: bool, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
        """max(a, b) (or min) exactly: the argument the declared ranges prove the larger (the
        smaller), else an unevaluated Max (Min). Not sympy.Max's own evaluation: it asks sympy's
        assumption system, which costs milliseconds per new pair of expressions (strides ask
        max(size, 1) of every size). No assumption about small sizes is made here."""
        if a == b:
            return a
        if a.is_Number and b.is_Number:
            return max(a, b) if largest else min(a, b)
        a_is_larger = self._cached_decide(sympy.Ge(a, b, evaluate=False), 0)
        if a_is_larger is None:
            return sympy.Max(a, b, evaluate=False) if largest else sympy.Min(a, b, evaluate=False)
        return a if a_is_larger == largest else b

    def pinned_by_branch_facts(self, extremum: sympy.Expr) -> sympy.Expr | None:
        """The one value `extremum` (a Min or Max) has wherever the current branch side's facts
        hold, as a constant or one of its arguments; None when it has several. Exact: the facts
        are checked at every point of the ranges (branch_facts.decide_given), and the side runs
        only there."""
        if not self.branch_facts or not extremum.free_symbols <= self.symbols.keys():
            return None   # a data-dependent value in it: no declared range to check the facts over
        for candidate in (sympy.Integer(self.hint_of(extremum)), *extremum.args):
            if decide_given(sympy.Eq(extremum, candidate), self.branch_facts, self.ranges) is True:
                return candidate
        return None

    def proves(self, rel: sympy.Basic) -> bool:
        """Whether the declared ranges alone make `rel` true (no assumption, no guard)."""
        return self._cached_decide(self.simplify(rel), 0) is True

    def hint_of(self, expr: sympy.Basic):
        """The value at the example sizes (no guard): an int, float or bool."""
        value = sympy.sympify(self.simplify(expr))
        if self.unbacked.involved(value):
            raise needs_value(value, self.unbacked, "needs the value of")
        opaque = [f for f in value.atoms(sympy.Function) if hasattr(f, "gp_hint")]
        if opaque:   # values only their recipe computes (see shapes/node.py)
            value = value.xreplace({f: sympy.sympify(f.gp_hint) for f in opaque})
        value = value.xreplace(self.hints())
        if value is sympy.true or value is sympy.false:
            return bool(value)
        if value.is_Integer:
            return int(value)
        if value.is_Number:
            return float(value)
        if isinstance(value, sympy.core.relational.Relational) or isinstance(value, sympy.logic.boolalg.Boolean):
            return bool(sympy.simplify(value))
        if value.is_number:
            return float(value)
        return value.evalf()

    def static_value(self, rel: sympy.Basic) -> bool | None:
        """The relation's truth if the declared ranges (plus sizes >= 2) settle it, without
        guarding. An answer that needed sizes >= 1 or >= 2 is remembered as an assumption: the
        caller acts on it (a kernel's fast path), so small sizes must be proven separately."""
        return self._decide(self.simplify(rel))

    # -- guards -------------------------------------------------------------------------

    def evaluate(self, rel: sympy.Basic, location: SourceLocation | None = None, branch: bool = False) -> bool:
        """Answer a question about sizes, recording a guard when the ranges do not settle it.
        `branch`: the program branches on the answer (a Python bool), so while export splits
        undecided branches, the question may be split on instead (BranchUndecided)."""
        rel = self.simplify(rel)
        if rel is sympy.true or rel is sympy.false:
            return bool(rel)
        found = self._decide(rel, location)
        if found is not None:
            return found
        if self.unbacked.involved(rel):
            answer = self.unbacked.from_example(rel, location) if self.unbacked.from_example else None
            if answer is None:
                raise undecidable(rel, self.unbacked, location)
            return answer
        if self.copy_if_undecided:
            raise ChoiceUndecided(rel)
        if branch and self.splitting is not None and rel.free_symbols <= self.symbols.keys() and asked_by_program():
            if self.splitting.undecided(rel, location or innermost_user_location()):
                # both sides of this branch were shown to compute the same values at every size
                # (split_export.py): the example's side serves all sizes, with no guard
                return bool(self.hint_of(rel))
        self._asked[rel] = asked = self._asked.get(rel, 0) + 1
        if asked > _MAX_REPEATS:
            raise UnsupportedFeatureError(
                f"the program's shape logic asks {rel} over and over ({asked} times) without the answer settling "
                "it, so export would not finish", location=location or innermost_user_location(),
                fix="state the fact with torch._check(...) on the sizes before this line, or mark the dimension "
                    "static")
        value = bool(self.hint_of(rel))
        self._record(rel if value else sympy.Not(rel), location)
        return value

    def _record(self, guard: sympy.Basic, location: SourceLocation | None = None) -> None:
        self.guards.append(Guard(guard, location or innermost_user_location()))
        if _guards_log.isEnabledFor(logging.INFO):
            names = {s: sympy.Symbol(self.symbols[s].dim_name) for s in guard.free_symbols if s in self.symbols}
            _guards_log.info("guard added: %s at %s", guard.xreplace(names), self.guards[-1].location)
        if isinstance(guard, sympy.Eq):
            self._replace(guard)

    def _replace(self, eq: sympy.Eq) -> None:
        """Turn `newer_symbol == expr` into a replacement so later sizes simplify."""
        diff = sympy.expand(eq.lhs - eq.rhs)
        candidates = self.table.in_order((s for s in diff.free_symbols if diff.coeff(s) in (1, -1)
                                          and s not in diff.coeff(s).free_symbols), reverse=True)
        for sym in candidates:
            coeff = diff.coeff(sym)
            rest = sympy.expand(diff - coeff * sym)
            if sym not in rest.free_symbols:
                value = -rest / coeff
                self.replacements = {k: v.xreplace({sym: value}) for k, v in self.replacements.items()}
                self.replacements[sym] = value
                return

    def specialize(self, expr: sympy.Expr, location: SourceLocation | None = None) -> int:
        """The program needs a size as a Python int: it becomes a constant, guarded."""
        expr = sympy.sympify(self.simplify(expr))
        if self.unbacked.involved(expr):
            raise needs_value(expr, self.unbacked, "turns into a Python number (int(), an index, a loop bound) "
                                                   "the value")
        value = self.hint_of(expr)
        if not expr.is_Integer:
            if any(hasattr(f, "gp_hint") for f in expr.atoms(sympy.Function)):
                for sym in self.table.in_order(expr.free_symbols):
                    self.pin(sym, location)
            elif self._cached_decide(sympy.Eq(expr, value), 0) is not True:
                # a constant taken from a size is guarded unless the declared ranges alone fix
                # it: an assumption about large sizes must never stand in for the guard
                self._record(sympy.Eq(expr, value), location)
        return int(value)

    def assume(self, rel: sympy.Basic) -> None:
        """A fact about data-dependent values the program stated (torch._check): later
        questions are settled by it (the graph checks it at run time)."""
        self.unbacked.assume(self.simplify(rel))
        self._decisions.clear()   # ranges changed: cached answers may now be settled

    def oblivious_value(self, rel: sympy.Basic) -> bool | None:
        """torch's size-oblivious answer: decided as if every size-like data-dependent
        symbol were at least 2. A kernel asks it only where its general path is also right
        for sizes 0 and 1, so the answer holds for every value and records nothing."""
        ranges = self.ranges
        for s, info in self.unbacked.infos.items():
            if (info.size_like or (info.range.lower != -sympy.oo and info.range.lower >= 0)) \
                    and (info.range.upper == sympy.oo or info.range.upper >= 2):
                ranges[s] = ValueRange(max(info.range.lower, 2), info.range.upper)
        return decide(self.simplify(rel), ranges)

    def pin(self, sym: sympy.Symbol, location: SourceLocation | None = None) -> None:
        """Fix a size symbol to its example value, guarded: for values the program turns into
        Python constants that the ranges cannot model exactly (floats, rounding)."""
        if sym in self.symbols:
            self.evaluate(sympy.Eq(sym, self.symbols[sym].hint), location)


# A relation guarded this often is a loop in the program's shape logic that guarding does
# not settle: export stops with an error instead of running forever.
_MAX_REPEATS = 200


def _asks_if_trivial(rel: sympy.Basic) -> bool:
    """Whether the relation asks if a size is 0 or 1: `size == 1`, `size != 0`, `size > 1`,
    `size <= 1`, `size < 2`, `size >= 2` (any orientation)."""
    if not isinstance(rel, sympy.core.relational.Relational):
        return False
    lhs, rhs, op = rel.lhs, rel.rhs, rel.rel_op
    if lhs.is_Integer:
        lhs, rhs, op = rhs, lhs, {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
    if lhs.is_Integer or not rhs.is_Integer:
        return False
    limits = {"==": (0, 1), "!=": (0, 1), ">": (0, 1), "<=": (0, 1), "<": (1, 2), ">=": (1, 2)}[op]
    return limits[0] <= int(rhs) <= limits[1]
