"""What a refusal says, as a predicate over the declared sizes, for graphport and torch.export.

Two exporters that refuse the same program must refuse it for the same constraint. Their
messages differ in wording and in how they split one constraint into guards (torch.export
writes `(1 + ((-3 + h) // 2)) != 1` where graphport writes `Ne(((h + 1)//(2)) - 1, 1)`), so
they are compared by meaning: each message is read into the guards it lists, each guard is
evaluated at every point of a grid over the declared ranges, and the two sets of sizes the
messages allow must be equal. The suggested fixes are compared the same way, after each
exporter's own `refine_dynamic_shapes_from_suggested_fixes` applied them to its spec.
"""
from __future__ import annotations

import itertools
import math
import operator
import re
from dataclasses import dataclass
from typing import Callable

import torch

import graphport as gp

Point = dict        # Dim name -> size
Predicate = Callable[[Point], bool]


@dataclass
class Refusal:
    """The guards one exporter listed (as predicates and as text) and its refined spec."""
    guards: list[tuple[str, Predicate]]
    refined: object          # the spec with the suggested fixes applied; None without fixes

    def allows(self, point: Point) -> bool:
        return all(_holds(pred, point) for _, pred in self.guards)


def _holds(pred: Predicate, point: Point) -> bool:
    try:
        return bool(pred(point))
    except ZeroDivisionError:    # a guard undefined at this size (a modulo by a size of 0)
        return False


def _mod(a, b):
    return a % b


# the functions the two exporters print guards with, evaluated on Python ints
_NAMESPACE = {"math": math, "torch": torch, "Mod": _mod, "Max": max, "Min": min, "Eq": operator.eq,
              "Ne": operator.ne, "min": min, "max": max, "floor": math.floor, "ceiling": math.ceil, "Abs": abs,
              "FloorDiv": operator.floordiv, "And": lambda *a: all(a), "Or": lambda *a: any(a)}


def _predicate(text: str, names: list[str]) -> Predicate:
    code = compile(text, "<guard>", "eval")
    unknown = set(code.co_names) - set(names) - set(_NAMESPACE) - {"sym_float", "ceil", "trunc", "floor"}
    assert not unknown, f"guard {text!r} uses {sorted(unknown)}, which no Dim names"
    return lambda point: eval(code, dict(_NAMESPACE), dict(point))   # noqa: S307 (messages of our own test runs)


# ---------------------------------------------------------------------------- torch.export's message

_TORCH_SOURCE = re.compile(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]")


def read_torch(exc: Exception, spec: dict, torch_spec: dict) -> Refusal:
    """torch.export's ConstraintViolationError as guards over the Dim names of `spec`."""
    text = str(exc).split("The error above occurred")[0]
    sources = {(arg, axis): dim.__name__ if hasattr(dim, "__name__") else dim.name
               for arg, axes in torch_spec.items() for axis, dim in axes.items()}
    names = sorted(set(sources.values()))

    def named(expr: str) -> str:
        return _TORCH_SOURCE.sub(lambda m: sources[(m.group(1), int(m.group(2)))], expr)

    guards = []
    body = text.split("Suggested fixes:")[0].replace("Specializations unexpectedly required", "\n")
    for line in body.splitlines():
        line = line.strip()
        if not line.startswith("- "):
            continue
        if m := re.match(r"- Not all values of .+? satisfy the generated guard (.+?)\.?$", line):
            expr = named(m.group(1))
        elif m := re.match(r"- You marked (\w+) as dynamic but your code specialized it to be a constant \((-?\d+)\)",
                           line):
            expr = f"{m.group(1)} == {m.group(2)}"
        elif m := re.match(r"- solving the guards generated for (\w+) = .+? resulted in a specialized value of (-?\d+)",
                           line):
            expr = f"{m.group(1)} == {m.group(2)}"
        elif m := re.match(r"- The values of (\w+) = .+? and (\w+) = .+? must always be equal", line):
            expr = f"{m.group(1)} == {m.group(2)}"
        else:
            raise AssertionError(f"cannot read this line of torch.export's refusal:\n{line}\nin:\n{text}")
        guards.append((expr, _predicate(expr, names)))
    refined = None
    if "Suggested fixes:" in text:
        refined = torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes(
            text.rstrip() + "\n", torch_spec)
    return Refusal(guards, refined)


# ---------------------------------------------------------------------------- graphport's message

def read_graphport(exc: gp.ConstraintViolationError, spec: dict) -> Refusal:
    """graphport's ConstraintViolationError as guards over the Dim names of `spec`."""
    names = sorted({dim_name(d) for axes in spec.values() for d in axes.values()})
    guards = []
    body = exc.what.split("Suggested fixes:")[0]
    for line in body.splitlines()[1:]:
        if not line.startswith("- "):
            continue
        line = re.sub(r" \(at [^()]*(\([^()]*\))?[^()]*\)", "", line)   # the source location of the guard
        if m := re.match(r"- (\w+) = (\d+) is inside its declared range", line):
            expr = f"{m.group(1)} != {m.group(2)}"
        elif m := re.match(r"- (\w+) and (\w+) were declared independent, but the program requires them to be equal",
                           line):
            expr = f"{m.group(1)} == {m.group(2)}"
        elif m := re.match(r"- (\w+) and (\w+) were declared independent, but the program requires (.+)$", line):
            expr = m.group(3)
        elif m := re.search(r"(?:requires|guard) (.+?)(?:, which the ranges of .*)?$", line):
            expr = m.group(1).split(": ", 1)[-1]    # "h to be a multiple of 2: Eq(Mod(h, 2), 0)"
        else:
            raise AssertionError(f"cannot read this line of graphport's refusal:\n{line}\nin:\n{exc.what}")
        guards.append((expr, _predicate(expr, names)))
    refined = gp.refine_dynamic_shapes_from_suggested_fixes(exc.msg, spec) if "Suggested fixes:" in exc.what else None
    return Refusal(guards, refined)


# ---------------------------------------------------------------------------- comparing

def dim_name(dim) -> str:
    return dim.__name__ if hasattr(dim, "__name__") else dim.name


def declared_ranges(spec: dict) -> dict[str, tuple[int, int]]:
    """Dim name -> (min, max) for the root Dims of a graphport spec."""
    out = {}
    for axes in spec.values():
        for dim in axes.values():
            root = getattr(dim, "root", dim)
            out[root.name] = (int(root.min), int(root.max))
    return out


def grid(ranges: dict[str, tuple[int, int]], dense: int = 48) -> list[Point]:
    """Every size near each range's ends, and a stride through the middle."""
    axes = []
    for name, (lo, hi) in sorted(ranges.items()):
        if hi - lo < 2 * dense:
            values = range(lo, hi + 1)
        else:
            values = sorted({*range(lo, lo + dense), *range(hi - 8, hi + 1), *range(lo + dense, hi, 7)})
        axes.append([(name, v) for v in values])
    return [dict(p) for p in itertools.product(*axes)]


def spec_allows(refined, original: dict, point: Point, examples: dict | None = None) -> bool:
    """Whether the spec `refined` (one exporter's spec after its suggested fixes) accepts the
    sizes `point`, named after the Dims of the original graphport spec `original`. A dim a
    fix made static (graphport drops it from the spec) keeps its size in `examples`
    (argument name -> example shape)."""
    roots: dict[str, int] = {}
    for arg, axes in original.items():
        for axis, dim in axes.items():
            name = getattr(dim, "root", dim).name
            entry = refined[arg].get(axis) if isinstance(refined.get(arg), dict) else None
            size = point[name] if not hasattr(dim, "root") else dim.coeff * point[name] + dim.offset
            if entry is None:                # a dim the fixes made static: the example's size stays
                entry = (examples or {}).get(arg, {})[axis] if arg in (examples or {}) else None
                if entry is None:
                    return False
            if isinstance(entry, int):
                if size != entry:
                    return False
                continue
            root_value = _root_value(entry, size)
            if root_value is None:
                return False
            root = dim_name(getattr(entry, "root", entry))
            if roots.setdefault(root, root_value) != root_value:
                return False
    return True


def _root_value(entry, size: int) -> int | None:
    """The value of `entry`'s root Dim that gives `size`, or None (outside its range)."""
    root = getattr(entry, "root", None)
    if root is None:
        value = size
    elif hasattr(entry, "coeff"):                 # graphport's DerivedDim
        value, rest = divmod(size - entry.offset, entry.coeff)
        if rest:
            return None
    else:                                         # torch.export's derived Dim: invert its function
        value = next((r for r in range(max(root.min, 0), min(root.max, 10 ** 5) + 1) if entry.fn(r) == size), None)
        if value is None:
            return None
    ranged = root if root is not None else entry
    return value if ranged.min <= value <= ranged.max else None


def differences(points: list[Point], mine: Callable[[Point], bool], theirs: Callable[[Point], bool],
                limit: int = 6) -> list[str]:
    """Points where the two predicates disagree, described (at most `limit`)."""
    out = []
    for point in points:
        a, b = mine(point), theirs(point)
        if a != b:
            out.append(f"{point}: graphport {'allows' if a else 'refuses'}, torch.export {'allows' if b else 'refuses'}")
            if len(out) == limit:
                break
    return out
