"""Data-dependent symbols (u0, u1, ...): values the graph computes, known only at run time.

`.item()` on a tensor, the row count of `nonzero`, the length of `masked_select` ... have
no example value: capture never reads tensor data. Each becomes a fresh symbol with the
range what is known implies (sizes >= 0, a bool in [0, 1], a row count at most the
input's element count). Questions about such a symbol are answered from its range and
from the facts the program stated (`torch._check(u0 <= x.shape[0])`), never from an
example: one that neither settles is a DataDependentError naming the `torch._check` to add.

A stated fact narrows the symbol's range (or is kept as a relation between sizes) and is
also checked at run time, by an assertion node in the graph, since capture cannot know it
holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import sympy

from ..errors import DataDependentError
from ..source import SourceLocation, innermost_user_location
from .contract import ComputedValue, ShapeContract, SymbolFact
from .expr import INF, ValueRange, bounds
from .symbols import SymbolKind, SymbolTable

# Starts the message of every assertion graphport records (torch.export's wording), so the
# runtime can tell a failed check of the program's from an operator's own error.
ASSERT_PREFIX = "Runtime assertion failed for expression"


@dataclass
class UnbackedInfo:
    symbol: sympy.Symbol
    pytype: type                      # int, float or bool: what the program sees
    range: ValueRange
    origin: str                       # what produced it, in the user's terms ("x.item()")
    location: SourceLocation | None
    size_like: bool = False           # a size (row count) or stated to be one (torch._check_is_size)
    node: str | None = None           # the graph node it is bound to


@dataclass
class Unbacked:
    """The data-dependent symbols of one capture and the facts stated about them."""
    infos: dict[sympy.Symbol, UnbackedInfo] = field(default_factory=dict)
    # stated facts, each `diff >= 0` or `diff != 0` (op ">=" or "!=") over any symbols
    facts: list[tuple[sympy.Expr, str]] = field(default_factory=list)
    # records a runtime check of a stated fact in the graph (set by capture)
    asserter: Callable | None = None
    # draft_export: answers a question the facts do not settle from the example inputs, stating
    # the answer as a checked fact (capture/example_answers.py); None: the question is an error
    from_example: Callable | None = None
    # a replay (run_decompositions) hands the source's symbols out again, in the order the
    # source made them, so the lowered program keeps u0, u1 ... and what is known of them
    reuse: list[sympy.Symbol] = field(default_factory=list)
    # the shape environment's table of symbol kinds and order (set by ShapeEnv)
    table: SymbolTable = field(default_factory=SymbolTable)

    def copy(self) -> "Unbacked":
        """The symbols and facts, for a fork of the environment (shapes/env.py): a capture's
        hooks (asserter, from_example, reuse) are not carried."""
        return Unbacked({sym: replace(info) for sym, info in self.infos.items()}, list(self.facts))

    def new(self, pytype: type, lower, upper, origin: str, size_like: bool = False) -> sympy.Symbol:
        if self.reuse:
            return self.reuse.pop(0)
        name = self.table.next_name(SymbolKind.DATA_DEPENDENT)
        if pytype is float:
            sym = sympy.Symbol(name, real=True)
        elif size_like or (lower is not None and lower != -INF and lower >= 0):
            sym = sympy.Symbol(name, integer=True, nonnegative=True)
        else:
            sym = sympy.Symbol(name, integer=True)
        self.add(UnbackedInfo(sym, pytype, ValueRange(lower, upper), origin, innermost_user_location(), size_like))
        return sym

    def add(self, info: UnbackedInfo) -> None:
        """Enter a data-dependent symbol (made here, or a loaded program's)."""
        self.infos[info.symbol] = info
        self.table.add(info.symbol, SymbolKind.DATA_DEPENDENT)

    def ranges(self) -> dict[sympy.Symbol, ValueRange]:
        return {s: i.range for s, i in self.infos.items()}

    def involved(self, expr: sympy.Basic) -> list[sympy.Symbol]:
        return sorted((s for s in getattr(expr, "free_symbols", ()) if s in self.infos), key=lambda s: s.name)

    # -- facts --------------------------------------------------------------------------------

    def assume(self, rel: sympy.Basic) -> None:
        """Record that `rel` holds (the program stated it): narrow ranges, keep the fact."""
        if isinstance(rel, sympy.And):
            for part in rel.args:
                self.assume(part)
            return
        normal = _normalize(rel)
        if normal is None:
            return
        diff, op = normal
        self.facts.append(normal)
        syms = [s for s in diff.free_symbols]
        if op == ">=" and len(syms) == 1 and syms[0] in self.infos:
            sym = syms[0]
            coeff = diff.coeff(sym)
            rest = sympy.expand(diff - coeff * sym)
            if coeff.is_Integer and rest.is_Number and coeff != 0:
                info = self.infos[sym]
                bound = -rest / coeff   # coeff * sym >= -rest
                if coeff > 0:
                    lower = sympy.ceiling(bound) if info.pytype is not float else bound
                    if info.range.lower == -INF or lower > info.range.lower:
                        info.range = ValueRange(lower, info.range.upper)
                else:
                    upper = sympy.floor(bound) if info.pytype is not float else bound
                    if info.range.upper == INF or upper < info.range.upper:
                        info.range = ValueRange(info.range.lower, upper)
        if op == "==":
            self.assume(sympy.Ge(diff, 0))
            self.assume(sympy.Le(diff, 0))

    def decide(self, rel: sympy.Basic, ranges: dict[sympy.Symbol, ValueRange]) -> bool | None:
        """The relation's truth if a stated fact settles it: `d >= 0` holds when some fact
        `f >= 0` has `d - f` never negative over the ranges."""
        if not self.facts:
            return None
        normal = _normalize(rel)
        if normal is None:
            return None
        diff, op = normal
        if op == ">=":
            if self._implied(diff, ranges):
                return True
            if self._implied(-diff - 1, ranges):
                return False
        elif op == "==":
            if self._implied(diff - 1, ranges) or self._implied(-diff - 1, ranges) or (diff, "!=") in self.facts \
                    or (-diff, "!=") in self.facts:
                return False
            if self._implied(diff, ranges) and self._implied(-diff, ranges):
                return True
        elif op == "!=":
            inner = self.decide(sympy.Eq(diff, 0), ranges)
            return None if inner is None else not inner
        return None

    def _implied(self, diff: sympy.Expr, ranges) -> bool:
        for fact, op in self.facts:
            if op == ">=" and bounds(sympy.expand(diff - fact), ranges)[0] >= 0:
                return True
        return False


def _normalize(rel: sympy.Basic) -> tuple[sympy.Expr, str] | None:
    """`rel` as (diff, op) with op ">=", "==" or "!=" meaning `diff op 0`, for integer sizes."""
    if not isinstance(rel, sympy.core.relational.Relational):
        return None
    diff = sympy.expand(rel.lhs - rel.rhs)
    integer = diff.is_integer is True
    op = rel.rel_op
    if op == ">=":
        return diff, ">="
    if op == "<=":
        return -diff, ">="
    if op == ">":
        return (diff - 1, ">=") if integer else None
    if op == "<":
        return (-diff - 1, ">=") if integer else None
    if op in ("==", "!="):
        return diff, op
    return None


def with_data_dependent(contract, env) -> "ShapeContract | None":
    """The contract with the capture's data-dependent symbols added (each a ComputedValue
    bound to its node, with the range known for it); a contract is made for a static
    program that has some."""
    if env is None or not env.unbacked.infos:
        return contract
    contract = contract if contract is not None else ShapeContract()
    for sym, info in env.unbacked.infos.items():
        if info.node is not None:
            contract.symbols[sym] = SymbolFact(sym, info.origin, info.range, ComputedValue(info.node))
    return contract


# -- messages -------------------------------------------------------------------------------------

def readable(expr: sympy.Basic, unbacked: Unbacked) -> str:
    """The expression with each data-dependent symbol described by where it came from."""
    text = str(expr)
    where = "; ".join(f"{s} = {unbacked.infos[s].origin}"
                      + (f" at {unbacked.infos[s].location.describe()}" if unbacked.infos[s].location else "")
                      for s in unbacked.involved(expr))
    return f"{text} (where {where})" if where else text


def suggested_check(rel: sympy.Basic, unbacked: Unbacked) -> str:
    """The torch._check call that settles `rel`: the relation itself, or, for a question
    about the sign of a value (is it a valid size?), `torch._check(u >= 0)` (what
    torch._check_is_size states). Each value is named as the user's code names it (`n` for
    `n = t.item()`); one the code never named is spelled `u0` (the fix says how to name it)."""
    syms = unbacked.involved(rel)
    if isinstance(rel, sympy.core.relational.Relational) and len(syms) == 1 and rel.lhs == syms[0] \
            and rel.rel_op in ("<", ">=") and rel.rhs == 0:
        rel = sympy.Ge(syms[0], 0)
    return f"torch._check({as_python(rel.xreplace(user_names(rel, unbacked)))})"


def user_names(expr: sympy.Basic, unbacked: Unbacked) -> dict[sympy.Symbol, sympy.Symbol]:
    """Each data-dependent symbol of `expr` that the user's code assigned to a variable where
    it was made (`n = t.item()`), as that variable."""
    names = {}
    for sym in unbacked.involved(expr):
        location = unbacked.infos[sym].location
        name = assigned_name(location.code) if location is not None else None
        if name is not None:
            names[sym] = sympy.Symbol(name, **sym.assumptions0)
    return names


def assigned_name(line: str) -> str | None:
    """`n` for the source line `n = t.item()` (or `int(t)`, `float(t)`): a variable holding
    the value itself; None for anything else (`counts = torch.bincount(x)` holds a tensor
    whose size is the value, not the value)."""
    import ast
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:   # part of a statement spread over lines
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign) or len(tree.body[0].targets) != 1 \
            or not isinstance(tree.body[0].targets[0], ast.Name):
        return None
    value = tree.body[0].value
    reads = isinstance(value, ast.Call) and (
        (isinstance(value.func, ast.Attribute) and value.func.attr == "item" and not value.args)
        or (isinstance(value.func, ast.Name) and value.func.id in ("int", "float", "bool") and len(value.args) == 1))
    return tree.body[0].targets[0].id if reads else None


def as_python(rel: sympy.Basic) -> str:
    """A relation as the user would write it in Python (`u0 == s0`, not `Eq(u0, s0)`)."""
    if isinstance(rel, sympy.core.relational.Relational):
        return f"{rel.lhs} {rel.rel_op} {rel.rhs}"
    if isinstance(rel, sympy.Not) and isinstance(rel.args[0], sympy.core.relational.Relational):
        return as_python(rel.args[0].negated)
    return str(rel)


def undecidable(rel: sympy.Basic, unbacked: Unbacked, location: SourceLocation | None = None) -> DataDependentError:
    """The error for a question about data-dependent values that neither ranges nor stated
    facts settle."""
    check = suggested_check(rel, unbacked)
    names = ", ".join(str(s) for s in unbacked.involved(rel))
    named = user_names(rel, unbacked)
    unnamed = [s for s in unbacked.involved(rel) if s not in named]
    naming = "".join(f"; {s} is {unbacked.infos[s].origin}: assign it to a variable where it is made, and check "
                     "that variable" for s in unnamed)
    return DataDependentError(
        f"the program asks whether {readable(rel, unbacked)}, which is data-dependent: {names} "
        f"{'is' if ',' not in names else 'are'} known only at run time and the facts known about "
        f"{'it' if ',' not in names else 'them'} do not settle the question",
        location=location or innermost_user_location(),
        fix=f"state what holds before this line, e.g. `{check}` (or its negation, whichever is true for "
            f"your data){naming}; graphport then checks it at run time. If the program really branches on the value, "
            "compute both sides and pick with torch.where, or use torch.cond",
        torch_phrase=f"Could not guard on data-dependent expression {as_python(rel)}")


def needs_value(expr: sympy.Basic, unbacked: Unbacked, what: str) -> DataDependentError:
    """The error for a data-dependent value the program needs as a Python number."""
    return DataDependentError(
        f"the program {what} {readable(expr, unbacked)}, which is data-dependent (known only at run time)",
        fix="keep the value symbolic: pass it to torch operations as is (t.item() rather than int(t)), "
            "or state its possible values with torch._check(...) so the question it feeds is settled")
