"""Sizes 0 and 1: prove the program valid there, by tracing it there.

Capture may reason as if a dynamic size were at least 2 (meta kernels ask layout and
broadcasting questions whose answers differ at 0 and 1). Most such answers do not change
the computation, some do (a broadcast, `if x.shape[0] == 1`). graphport traces on meta
tensors, so it can afford to check: it traces the program again with the symbol pinned to
the small size and compares the two graphs modulo the symbol. Where they agree, the
program is valid at that size; where they differ, the program is not, and the caller is
told which line decides differently.

A pinned trace is sound for the other symbols only where its own decisions hold, so it
must not need stronger assumptions about them than the original capture did, nor ask
questions the original did not; combinations of several small sizes are traced together.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..errors import GraphportError, InternalError
from ..ops.kinds import Kind, op_info
from ..shapes.env import ShapeEnv
from ..shapes.spec import InputShapes
from ..source import SourceLocation, location_in_traceback

_SMALL = (1, 0)
_MAX_COMBINATIONS = 8


@dataclass
class SmallSizeReport:
    """Which small sizes the program is valid at, and why the others are not."""
    valid: dict[sympy.Symbol, list[int]] = field(default_factory=dict)     # symbol -> small sizes proven valid
    refused: dict[tuple[sympy.Symbol, int], str] = field(default_factory=dict)  # (symbol, size) -> reason
    differs_at: dict[tuple[sympy.Symbol, int], SourceLocation | None] = field(default_factory=dict)
    exclusions: list[dict[sympy.Symbol, int]] = field(default_factory=list)   # combinations proven invalid
    traces: int = 0


def prove_small_sizes(retrace: Callable[[InputShapes], Any], shapes: InputShapes, graph: fx.Graph) -> SmallSizeReport:
    """For every symbol the capture assumed >= 1 or >= 2 below its declared minimum, trace
    at the small sizes in range and compare. `retrace(shapes)` captures again and returns
    the captured graph."""
    env = shapes.env
    report = SmallSizeReport()
    candidates = {sym: [v for v in _SMALL if env.symbols[sym].declared.lower <= v < least]
                  for sym, least in env.assumed_min.items()}
    for sym, sizes in candidates.items():
        for v in sizes:
            ok, reason, where, assumed = _try({sym: v}, retrace, shapes, graph, report)
            if ok and any(assumed.get(t, 0) > env.assumed_min.get(t, 0) for t in assumed):
                ok, reason = False, "it needs stronger assumptions about the other dimensions"
            if ok:
                report.valid.setdefault(sym, []).append(v)
            else:
                report.refused[(sym, v)] = reason
                report.differs_at[(sym, v)] = where
    _combinations(retrace, shapes, graph, report)
    return report


def _combinations(retrace, shapes: InputShapes, graph: fx.Graph, report: SmallSizeReport) -> None:
    """Several symbols small at once: each combination is traced, or excluded."""
    smalls = {s: vs for s, vs in report.valid.items() if vs}
    if len(smalls) < 2:
        return
    combos = [dict(zip(smalls, values)) for values in itertools.product(*smalls.values())]
    if len(combos) > _MAX_COMBINATIONS:
        report.exclusions.extend(combos)
        return
    for pins in combos:
        ok, *_ = _try(pins, retrace, shapes, graph, report)
        if not ok:
            report.exclusions.append(pins)


def _try(pins: dict[sympy.Symbol, int], retrace, shapes: InputShapes, graph: fx.Graph, report: SmallSizeReport):
    """(valid, reason, location, the pinned trace's own assumptions)."""
    pins = {s: sympy.Integer(v) for s, v in pins.items()}
    pinned = pin(shapes, pins)
    report.traces += 1
    try:
        pinned_graph = retrace(pinned)
    except InternalError:
        raise
    except GraphportError as e:
        return False, f"the program fails there: {e.what}", e.location, {}
    except Exception as e:   # raised by the program itself at that size, as eager would
        return False, f"the program fails there: {type(e).__name__}: {e}", location_in_traceback(e.__traceback__), {}
    difference = compare(graph, pinned_graph, pins)
    if difference is not None:
        return False, difference[0], difference[1], {}
    original = {g.rel.xreplace(pins) for g in shapes.env.guards}
    for guard in pinned.env.guards:
        if guard.rel not in original:
            return False, f"the program asks another question of the sizes there ({guard.rel})", guard.location, {}
    return True, "", None, dict(pinned.env.assumed_min)


def pin(shapes: InputShapes, pins: dict[sympy.Symbol, int]) -> InputShapes:
    """The same inputs with some symbols fixed to sizes, the others symbolic as before."""
    env = ShapeEnv()
    for sym, info in shapes.env.symbols.items():
        if sym not in pins:
            env.symbols[sym] = replace(info)
    sizes = {i: [_pinned_size(s, pins) for s in dims] for i, dims in shapes.sizes.items()}
    return InputShapes(env, sizes, {s: d for s, d in shapes.dims.items() if s not in pins},
                       {s: k for s, k in shapes.kinds.items() if s not in pins})


def _pinned_size(size, pins):
    if not isinstance(size, sympy.Basic):
        return size
    value = sympy.sympify(size.xreplace(pins))
    return int(value) if value.is_Integer else value


# -- comparing two graphs modulo pinned symbols -------------------------------------------------

def compare(graph: fx.Graph, pinned: fx.Graph, pins: dict) -> tuple[str, SourceLocation | None] | None:
    """None if `pinned` computes what `graph` computes once the pinned symbols take their
    values; else (what differs, the user's line where it does)."""
    ours = [n for n in graph.nodes if n.op == "call_function" and not _is_size(n)]
    theirs = [n for n in pinned.nodes if n.op == "call_function" and not _is_size(n)]
    mapping: dict[fx.Node, fx.Node] = {}
    a_in = [n for n in graph.nodes if n.op == "placeholder"]
    b_in = [n for n in pinned.nodes if n.op == "placeholder"]
    if [n.name for n in a_in] != [n.name for n in b_in]:
        return "the inputs differ", None
    mapping.update(zip(a_in, b_in))
    for a, b in itertools.zip_longest(ours, theirs):
        if a is None or b is None:
            first = a if a is not None else b
            return f"the program records {'fewer' if a is None else 'more'} operations there", _location(first)
        if a.target != b.target:
            return f"the program calls {_name(b)} where it called {_name(a)}", _location(a)
        # Same operator on the same arguments: the same computation, whatever the recorded
        # metadata says (it was worked out under the capture's assumptions).
        arguments_agree = _same(a.args, b.args, mapping, pins) and _same(a.kwargs, b.kwargs, mapping, pins)
        if not arguments_agree and not _same_result_regardless(a, b, mapping, pins):
            return f"{_name(a)} gets other arguments there", _location(a)
        mapping[a] = b
    out_a, out_b = graph.output_node(), pinned.output_node()
    if not _same(out_a.args, out_b.args, mapping, pins):
        return "the program returns other values there", None
    return None


def _same_result_regardless(a: fx.Node, b: fx.Node, mapping: dict, pins) -> bool:
    """Arguments that differ only in how they are written: a view with the same source and
    the same geometry (`x[1:]` on an empty tensor is `slice(x, 0, 1, INT_MAX)` symbolically
    and `slice(x, 0, 0, 0)` pinned), or a result with no elements of the same shape."""
    val_a, val_b = a.meta.get("val"), b.meta.get("val")
    if not isinstance(val_a, torch.Tensor) or not isinstance(val_b, torch.Tensor):
        return False
    if not _same_value(val_a, val_b, pins) and _expr(val_b.numel(), pins) != 0:
        return False
    if _expr(val_b.numel(), pins) == 0:
        return True
    source_a, source_b = a.args[0] if a.args else None, b.args[0] if b.args else None
    if not (isinstance(source_a, fx.Node) and mapping.get(source_a) is source_b):
        return False
    return (isinstance(a.target, _torch.OpOverload) and op_info(a.target).kind is Kind.VIEW
            and _same(list(val_a.stride()), list(val_b.stride()), {}, pins)
            and _same(val_a.storage_offset() - source_a.meta["val"].storage_offset(),
                      val_b.storage_offset() - source_b.meta["val"].storage_offset(), {}, pins))


def _is_size(node: fx.Node) -> bool:
    return not isinstance(node.meta.get("val"), torch.Tensor) and not isinstance(node.meta.get("val"), (list, tuple))


def _expr(value, pins) -> sympy.Basic | None:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return sympy.expand(value.node.expr.xreplace(pins))
    if isinstance(value, (bool, int, float)):
        return sympy.sympify(value)
    return None


def _same(a, b, mapping: dict, pins) -> bool:
    if isinstance(a, fx.Node) and _is_size(a):
        a = a.meta.get("val")
    if isinstance(b, fx.Node) and _is_size(b):
        b = b.meta.get("val")
    if isinstance(a, fx.Node) or isinstance(b, fx.Node):
        return isinstance(a, fx.Node) and mapping.get(a) is b
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_same(x, y, mapping, pins) for x, y in zip(a, b)))
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(_same(a[k], b[k], mapping, pins) for k in a))
    ea, eb = _expr(a, pins), _expr(b, pins)
    if ea is not None and eb is not None:
        return sympy.expand(ea - eb) == 0 if not isinstance(ea, sympy.logic.boolalg.Boolean) else ea == eb
    return type(a) is type(b) and a == b


def _same_value(a, b, pins) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and _same(list(a.shape), list(b.shape), {}, pins)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y, pins) for x, y in zip(a, b))
    return True


def _name(node: fx.Node) -> str:
    target = node.target
    return getattr(target, "__name__", str(target)) if not hasattr(target, "name") else target.name()


def _location(node: fx.Node) -> SourceLocation | None:
    trace = node.meta.get("stack_trace") or ""
    lines = [line for line in trace.splitlines() if line.strip().startswith("File ")]
    if not lines:
        return None
    last = lines[-1].strip()
    filename = last.split('"')[1]
    lineno = int(last.split("line ")[1].split(",")[0])
    function = last.split(" in ")[-1]
    return SourceLocation(filename, lineno, function)
