"""After tracing: are the guards implied by the user's spec? The answer decides soundness.

A guard the ranges could not settle is a property of the program that the spec does not
promise: it narrows a dim, fixes it to a constant, or ties it to another. For Dims that is
a ConstraintViolationError listing every violation with its source line and a corrected
spec line; for Dim.AUTO it refines the dim instead. What remains becomes the program's
range constraints and the contract `ep.module()` checks on every call.
"""
from __future__ import annotations

import builtins
import operator
import re
from typing import Any

import sympy

from ..errors import ConstraintViolationError
from .dims import DerivedDim, Dim
from .contract import InputDimension, Relation, ShapeContract, SymbolFact
from .env import Guard
from .expr import INF, FloorDiv, Mod, ValueRange
from .spec import InputShapes


def _linear_in(expr: sympy.Expr, sym: sympy.Symbol):
    """(a, b) with expr == a*sym + b and a, b integers, or None."""
    expanded = sympy.expand(expr)
    a = expanded.coeff(sym)
    b = sympy.expand(expanded - a * sym)
    if a.is_Integer and b.is_Integer and a != 0:
        return int(a), int(b)
    return None


def _name(shapes: InputShapes, sym: sympy.Symbol) -> str:
    return shapes.env.symbols[sym].dim_name


class _Fixes:
    """Corrected spec lines, merged per Dim name."""

    def __init__(self, shapes: InputShapes):
        self.shapes = shapes
        self.ranges: dict[sympy.Symbol, list] = {}
        self.lines: dict[str, str] = {}

    def narrow(self, sym, lo=None, hi=None):
        declared = self.shapes.env.symbols[sym].declared
        cur = self.ranges.setdefault(sym, [declared.lower, declared.upper])
        if lo is not None:
            cur[0] = max(cur[0], lo)
        if hi is not None:
            cur[1] = min(cur[1], hi)
        name = _name(self.shapes, sym)
        if cur[0] == cur[1]:
            self.lines[name] = f"{name} = {cur[0]}"
            return
        args = [repr(name)] + ([f"min={cur[0]}"] if cur[0] != 0 else []) + (
            [f"max={cur[1]}"] if cur[1] != INF else [])
        self.lines[name] = f"{name} = Dim({', '.join(args)})"

    def set(self, name: str, text: str):
        self.lines[name] = f"{name} = {text}"

    def render(self) -> str:
        return "\n".join("  " + line for line in self.lines.values())


def _explain(guard: Guard, shapes: InputShapes, fixes: _Fixes) -> str | None:
    """The violation, with its fix added to `fixes`; None for a relation between dims that no
    spec can state, which is kept as a per-call check instead."""
    # a bound on a dim that another is now derived from is a bound on that one (`x0 >= 4` with
    # x0 = w0 - 2 narrows w0); equalities stay as they are, they are the relations to report
    rel = guard.rel if isinstance(guard.rel, sympy.Eq) else shapes.env.simplify(guard.rel)
    syms = shapes.env.table.in_order(rel.free_symbols)
    names = {s: _name(shapes, s) for s in syms}
    readable = str(rel.xreplace({s: sympy.Symbol(n) for s, n in names.items()}))
    where = f" (at {guard.location})" if guard.location else ""
    divisor = _divisibility(rel, syms)
    if divisor is not None:
        sym, k = syms[0], divisor
        declared = shapes.env.symbols[sym].declared
        lo = -(-max(declared.lower, 1) // k)
        hi = None if declared.upper == INF else declared.upper // k
        helper = "_" + names[sym]
        fixes.set(helper, f"Dim('{helper}', min={lo}" + (f", max={hi})" if hi is not None else ")"))
        fixes.set(names[sym], f"{k}*{helper}")
        return f"- the program requires {names[sym]} to be a multiple of {k}: {readable}{where}"
    if isinstance(rel, sympy.Eq) and len(syms) == 1:
        lin = _linear_in(rel.lhs - rel.rhs, syms[0])
        if lin and (-lin[1]) % lin[0] == 0:
            value = -lin[1] // lin[0]
            fixes.set(names[syms[0]], str(value))
            return (f"- {names[syms[0]]} was marked dynamic, but the program fixes it to the constant {value}: "
                    f"it requires {readable}{where}")
    if isinstance(rel, sympy.Eq) and len(syms) == 2:
        older, newer = syms
        diff = sympy.expand(rel.lhs - rel.rhs)
        coeff = diff.coeff(newer)
        rest = sympy.expand(diff - coeff * newer)
        if coeff in (1, -1) and newer not in rest.free_symbols:
            other = sympy.expand(-rest / coeff)          # newer == other
            ratio = _linear_in(other, older)
            if ratio and ratio[0] > 0:
                text = names[older] if ratio == (1, 0) else str(ratio[0] * sympy.Symbol(names[older]) + ratio[1])
                fixes.set(names[newer], text)
                relation = "them to be equal" if ratio == (1, 0) else f"{names[newer]} == {text}"
                return (f"- {names[newer]} and {names[older]} were declared independent, but the program requires "
                        f"{relation}{where}")
    if isinstance(rel, sympy.core.relational.Relational) and len(syms) == 1 and rel.rel_op in ("<", "<=", ">", ">="):
        sym = syms[0]
        implied = _implied_bound(rel, sym)
        if implied:
            fixes.narrow(sym, *implied)
            declared = shapes.env.symbols[sym].declared
            return (f"- not all values of {names[sym]} in its range {declared} satisfy the program's guard "
                    f"{readable}{where}")
    if len(syms) > 1 and isinstance(rel, sympy.Eq):
        return None   # an equality no Dim can state (`z == x * y`): checked on every call, as torch.export does
    interval = _satisfying_interval(rel, syms[0], shapes.env.symbols[syms[0]].declared) if len(syms) == 1 else None
    if interval is not None:
        fixes.narrow(syms[0], *interval)
    return (f"- the program requires {readable}{where}, which the ranges of {', '.join(names.values())} do not "
            f"guarantee; restrict the Dims or state the assumption with torch._check on the input sizes")


# a guard on one dim that no rule above reads (`2*((h + 1)//2) == 32`, `(h + 7)//8 != 1`) is
# evaluated at every size of a declared range up to this long, to suggest the range it allows
_ENUMERATED_SIZES = 20_000


def _satisfying_interval(rel, sym: sympy.Symbol, declared) -> tuple[int, int] | None:
    """(lowest, highest) when the sizes of `declared` that satisfy `rel` are exactly one
    nonempty interval, found by evaluating `rel` at each of them; None otherwise."""
    if declared.upper == INF or declared.upper - declared.lower > _ENUMERATED_SIZES:
        return None
    # integer arithmetic only, evaluated exactly: no fractions or floats (rounding), and no
    # function Python would not evaluate as the algebra means it
    if any(not n.is_Integer for n in rel.atoms(sympy.Number)) or \
            any(not isinstance(f, (FloorDiv, Mod, sympy.Max, sympy.Min)) for f in rel.atoms(sympy.Function)):
        return None
    holds = sympy.lambdify([sym], rel, modules=[{"FloorDiv": operator.floordiv, "Mod": operator.mod,
                                                   "Max": builtins.max, "Min": builtins.min}, "math"])
    allowed = []
    for value in range(int(declared.lower), int(declared.upper) + 1):
        try:
            if holds(value):
                allowed.append(value)
        except ZeroDivisionError:   # the guard divides by a size that is 0 here: not allowed
            continue
    if not allowed or allowed[-1] - allowed[0] + 1 != len(allowed):
        return None
    return allowed[0], allowed[-1]


def _holds_across_the_range(rel, shapes: InputShapes) -> bool:
    """Whether a guard on one dim holds at every size of its declared range, evaluated at
    each (`h//4 <= (h + 3)//4` where the range reasoning could not say): such a guard is
    implied by the spec, not a violation."""
    syms = rel.free_symbols
    if len(syms) != 1:
        return False
    sym = next(iter(syms))
    info = shapes.env.symbols.get(sym)
    if info is None:   # not an input's size (a data-dependent one): no declared range to evaluate over
        return False
    declared = info.declared
    return _satisfying_interval(rel, sym, declared) == (declared.lower, declared.upper)


def _pinned_sizes(shapes: InputShapes) -> dict[sympy.Symbol, tuple[int, Guard]]:
    """Dims the program fixes to one size (`2*b == 16`), each with the guard that fixes it.
    Once a dim is reported as that constant, the program's other requirements on it
    (`b % 4 == 0`, `b // 4 == 2` from the same `view`) hold there and are not reported again."""
    pins = {}
    for guard in shapes.env.guards:
        syms = guard.rel.free_symbols
        if isinstance(guard.rel, sympy.Eq) and len(syms) == 1 and shapes.kinds.get(next(iter(syms))) != "auto":
            sym = next(iter(syms))
            lin = _linear_in(guard.rel.lhs - guard.rel.rhs, sym)
            if lin and (-lin[1]) % lin[0] == 0 and sym not in pins and not _holds_across_the_range(guard.rel, shapes):
                pins[sym] = (-lin[1] // lin[0], guard)
    return pins


def _implied_by_pins(guard: Guard, pins: dict[sympy.Symbol, tuple[int, Guard]]) -> bool:
    syms = guard.rel.free_symbols
    if not syms or not all(s in pins for s in syms) or any(pins[s][1] is guard for s in syms):
        return False
    return guard.rel.xreplace({s: pins[s][0] for s in syms}) is sympy.true


def _divisibility(rel, syms) -> int | None:
    """k when `rel` is Mod(sym, k) == 0 for a single size symbol."""
    if not isinstance(rel, sympy.Eq) or len(syms) != 1:
        return None
    mod, zero = (rel.lhs, rel.rhs) if isinstance(rel.lhs, Mod) else (rel.rhs, rel.lhs)
    if isinstance(mod, Mod) and zero == 0 and mod.args[0] == syms[0] and mod.args[1].is_Integer:
        return int(mod.args[1])
    return None


def check(shapes: InputShapes, small_sizes: dict | None = None) -> list[Guard]:
    """Raise ConstraintViolationError for guards the spec does not imply, and for sizes in a
    declared range where the program computes something else (`small_sizes`: (symbol, size)
    -> (why, where)); return the guards kept for Dim.AUTO / Dim.DYNAMIC dims, which calls
    must satisfy."""
    env = shapes.env
    fixes = _Fixes(shapes)
    violations, kept, first = [], [], None
    pins = _pinned_sizes(shapes)
    violated: set[str] = set()   # names of the dims whose constraints are violated
    for guard in env.guards:
        syms = guard.rel.free_symbols
        # Dim.AUTO and Dim.DYNAMIC dims may be related or narrowed by the program; only
        # DYNAMIC refuses to become a constant.
        fixed = isinstance(guard.rel, sympy.Eq) and len(syms) == 1 and _linear_in(guard.rel.lhs - guard.rel.rhs,
                                                                                next(iter(syms)))
        if syms and all(shapes.kinds.get(s) == "auto" or (shapes.kinds.get(s) == "dynamic" and not fixed)
                        for s in syms):
            rel = env.simplify(guard.rel)
            if rel is not sympy.true:   # an equality is already a replacement; the rest is checked per call
                kept.append(Guard(rel, guard.location))
        elif _holds_across_the_range(guard.rel, shapes) or _implied_by_pins(guard, pins):
            continue
        else:
            explained = _explain(guard, shapes, fixes)
            if explained is None:
                kept.append(Guard(shapes.env.simplify(guard.rel), guard.location))
                continue
            violations.append(explained)
            violated.update(_name(shapes, s) for s in syms)
            first = first or guard.location
    for (sym, size), (why, where) in (small_sizes or {}).items():
        fixes.narrow(sym, lo=size + 1)
        violated.add(_name(shapes, sym))
        at = f" (at {where})" if where else ""
        violations.append(f"- {_name(shapes, sym)} = {size} is inside its declared range "
                          f"{env.symbols[sym].declared}, but {why}{at}; export a separate program for "
                          f"that size, or narrow the range")
        first = first or where
    if violations:
        raise _violation(violations, fixes, first, violated)
    return kept


def _violation(violations: list[str], fixes: "_Fixes", first, violated: set[str]) -> ConstraintViolationError:
    unique = list(dict.fromkeys(violations))
    # torch.export names the dims its fixes change (a derived dim's root, not the helper a
    # divisibility fix introduces), or else the dims of the violated guards
    named = sorted(name for name in fixes.lines if not name.startswith("_")) or sorted(violated)
    torch_phrase = f"Constraints violated ({', '.join(named)})!" + (
        "\nSuggested fixes:\n" + fixes.render() if fixes.lines else "")
    return ConstraintViolationError(
        f"the program's shape logic contradicts dynamic_shapes ({len(unique)} "
        f"violation{'s' if len(unique) > 1 else ''}):\n" + "\n".join(unique) +
        ("\nSuggested fixes:\n" + fixes.render() + "\n" if fixes.lines else ""),
        fix=("apply the suggested fixes to dynamic_shapes (graphport.refine_dynamic_shapes_from_suggested_fixes "
             "does it for you), or change the program") if fixes.lines else
            "narrow the Dims' ranges to sizes where the program's requirements hold, state the requirement with "
            "torch._check on the input sizes before it is used, or change the program",
        location=first, torch_phrase=torch_phrase)


def build_contract(shapes: InputShapes, kept: list[Guard], valid_from: dict[sympy.Symbol, tuple[int, str]],
                   exclusions: list[dict[sympy.Symbol, int]]) -> ShapeContract:
    """The program's shape contract: symbols with their ranges and sources, every dynamic
    input dimension's expression, and the relations every call must satisfy."""
    env = shapes.env
    ranges = _auto_ranges(shapes, kept)
    # Dim.AUTO / Dim.DYNAMIC: the range says where the program is valid; the reason stays
    # with it, for the refusal of a call below it
    for sym in [s for s in valid_from if shapes.kinds.get(s) in ("auto", "dynamic")]:
        ranges[sym] = ValueRange(max(ranges[sym].lower, valid_from[sym][0]), ranges[sym].upper)
    dims = []
    for i, sizes in shapes.sizes.items():
        for d, size in enumerate(sizes):
            if isinstance(size, int):
                continue
            expr = env.simplify(size)
            dims.append((i, d, expr))
            if expr.is_Integer:   # a Dim.AUTO dim the program fixed: checked as static
                sym = next(iter(sympy.sympify(size).free_symbols))
                why = next((g.location for g in env.guards if sym in g.rel.free_symbols), None)
                shapes.specialized.append(f"{env.symbols[sym].dim_name} (Dim.AUTO) became static = {int(expr)}"
                                          + (f": the program requires it at {why}" if why else ""))
    symbols = {}
    for sym, info in env.symbols.items():
        if sym in env.replacements:
            continue
        index, dim = info.source
        coeff, offset = info.source_affine
        least, reason = valid_from.get(sym, (None, ""))
        symbols[sym] = SymbolFact(sym, info.dim_name, ranges[sym], InputDimension(index, dim, coeff, offset),
                                  least, env.assumption_sites.get(sym) if least is not None else None, reason)
    relations = [Relation(g.rel, g.location) for g in kept]
    relations += [Relation(sympy.Not(sympy.And(*[sympy.Eq(s.xreplace(env.replacements), v) for s, v in pins.items()])),
                           None) for pins in exclusions]
    return ShapeContract(symbols, dims, relations)


def _auto_ranges(shapes: InputShapes, kept: list[Guard]) -> dict[sympy.Symbol, ValueRange]:
    """Declared ranges, narrowed by the single-symbol guards kept for Dim.AUTO dims."""
    ranges = {s: info.declared for s, info in shapes.env.symbols.items()}
    for guard in kept:
        rel, syms = guard.rel, list(guard.rel.free_symbols)
        if len(syms) != 1 or not isinstance(rel, sympy.core.relational.Relational) or rel.rel_op in ("==", "!="):
            continue
        implied = _implied_bound(rel, syms[0])
        if implied:
            lo, hi = implied
            r = ranges[syms[0]]
            ranges[syms[0]] = ValueRange(max(r.lower, lo if lo is not None else r.lower),
                                         min(r.upper, hi if hi is not None else r.upper))
    return ranges


def _implied_bound(rel, sym) -> tuple[int | None, int | None] | None:
    """(lowest, highest) value of `sym` that the linear inequality `rel` allows (None: unbounded)."""
    lin = _linear_in(rel.lhs - rel.rhs, sym)
    if not lin:
        return None
    a, b = lin   # a*sym + b  <op>  0
    op = rel.rel_op if a > 0 else {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[rel.rel_op]
    bound = sympy.Rational(-b, a)
    if op in ("<", "<="):
        return None, int(sympy.floor(bound)) - (1 if op == "<" and bound.is_Integer else 0)
    return int(sympy.ceiling(bound)) + (1 if op == ">" and bound.is_Integer else 0), None


_FIX_LINE = re.compile(r"^\s+(\w+) = (.+?)\s*$")
_DIM_CALL = re.compile(r"Dim\('(\w+)'(?:, min=(\d+))?(?:, max=(\d+))?\)")


def refine_dynamic_shapes_from_suggested_fixes(msg: str, dynamic_shapes: Any) -> Any:
    """Apply the "Suggested fixes:" of a ConstraintViolationError message to a spec."""
    text = str(msg)
    if "Suggested fixes:" not in text:
        return dynamic_shapes
    lines = text.split("Suggested fixes:", 1)[1].splitlines()
    wanted: dict[str, str] = {}
    for line in lines:
        if line.strip().startswith("at "):   # the error's source location follows the fixes
            break
        match = _FIX_LINE.match(line)
        if match:
            wanted[match.group(1)] = match.group(2)
        elif line.strip() and not line.startswith(" "):
            break
    existing: dict[str, Dim] = {}
    _collect_dims(dynamic_shapes, existing)
    replaced: dict[str, Any] = {}

    def resolve_name(name: str):
        if name in replaced:
            return replaced[name]
        spec = wanted.get(name)
        if spec is None:
            return existing.get(name)
        call = _DIM_CALL.fullmatch(spec)
        if call:
            value = Dim(call.group(1), min=int(call.group(2)) if call.group(2) else None,
                        max=int(call.group(3)) if call.group(3) else None)
        elif re.fullmatch(r"-?\d+", spec):
            value = int(spec)
        else:
            derived = re.fullmatch(r"(?:(\d+)\*)?(\w+)(?: ([+-]) (\d+))?", spec)
            if derived is None:
                return existing.get(name)
            coeff, root, sign, offset = derived.groups()
            value = resolve_name(root)
            if coeff:
                value = int(coeff) * value
            if offset:
                value = value + (int(offset) if sign == "+" else -int(offset))
        replaced[name] = value
        return value

    def rewrite(node):
        if isinstance(node, Dim):
            if node.name in wanted:
                value = resolve_name(node.name)
                return None if isinstance(value, int) else value
            return node
        if isinstance(node, DerivedDim):
            root = rewrite(node.root)
            if root is None or isinstance(root, int):
                return None
            base = root if isinstance(root, (Dim, DerivedDim)) else node.root
            return base * node.coeff + node.offset if node.coeff != 1 else base + node.offset
        if isinstance(node, dict):
            return {k: rewrite(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(rewrite(v) for v in node)
        return node

    return rewrite(dynamic_shapes)


def _collect_dims(node, out: dict[str, Dim]) -> None:
    if isinstance(node, Dim):
        out.setdefault(node.name, node)
    elif isinstance(node, DerivedDim):
        out.setdefault(node.root.name, node.root)
    elif isinstance(node, dict):
        for v in node.values():
            _collect_dims(v, out)
    elif isinstance(node, (list, tuple)):
        for v in node:
            _collect_dims(v, out)

