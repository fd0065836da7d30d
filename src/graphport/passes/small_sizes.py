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
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..errors import GraphportError, InternalError, OperatorError
from ..ops.kinds import Kind, op_info
from ..capture.local_proofs import LocalVerdicts
from .decided_conds import inline_decided_conds
from ..shapes.env import ShapeEnv
from ..shapes.node import SymNode, value_at
from ..shapes.spec import InputShapes
from ..source import SourceLocation, location_in_traceback

_MAX_COMBINATIONS = 8


@dataclass(frozen=True)
class Refusal:
    reason: str
    where: SourceLocation | None
    fails_in_eager: bool   # the program itself fails at that size (eager raises there too)


@dataclass
class SmallSizeReport:
    """Which small sizes the program is valid at, and why the others are not."""
    valid: dict[sympy.Symbol, list[int]] = field(default_factory=dict)     # symbol -> small sizes proven valid
    refused: dict[tuple[sympy.Symbol, int], Refusal] = field(default_factory=dict)
    exclusions: list[dict[sympy.Symbol, int]] = field(default_factory=list)   # combinations proven invalid
    traces: int = 0
    # (symbol, size) traced and valid -> what that trace's own operator-by-operator proof
    # settled for the other symbols there: combinations with it it proves need no trace
    within: dict = field(default_factory=dict)


def prove_small_sizes(retrace: Callable[..., Any], shapes: InputShapes, graph: fx.Graph,
                      constants: dict[str, torch.Tensor], only: set | None = None,
                      settled: LocalVerdicts | None = None) -> SmallSizeReport:
    """For every symbol the capture assumed >= 1 or >= 2 below its declared minimum, trace
    at the small sizes in range and compare. `retrace(shapes, locations=True, pins=None)`
    captures again (`pins`: the symbols pinned there, tied ones included) and returns the captured graph, its constants and, optionally, what its own
    operator-by-operator proof settled (LocalVerdicts) (with `locations` False, without
    source locations: the proof does not need them, only a report of where the program
    differs does). `only`: the symbols to prove, if not all. Constants made from sizes
    (`torch.tensor([x.shape[0] - 1])`) are compared by value: the graphs alone do not show them.
    `settled`: what the operator-by-operator proof settled already (capture/local_proofs.py);
    those sizes and combinations are not traced."""
    env = shapes.env
    report = SmallSizeReport()
    settled = _trusted(settled, graph, env)
    candidates = {sym: list(range(least - 1, env.symbols[sym].declared.lower - 1, -1))
                  for sym, least in env.assumed_min.items() if only is None or sym in only}
    for sym, sizes in candidates.items():
        for v in sizes:   # from the largest down: a size below a refused one cannot widen the range
            if v + 1 in sizes and v + 1 not in report.valid.get(sym, []):
                break
            if _excluded_by_guards(shapes.env, {sym: v}):
                break   # the program's own guards rule it out: the spec check reports them
            if v in settled.valid.get(sym, ()):
                report.valid.setdefault(sym, []).append(v)
                continue
            if (sym, v) in settled.refused:
                report.refused[(sym, v)] = Refusal(*settled.refused[(sym, v)], True)
                continue
            refusal, assumed = _try({sym: v}, retrace, shapes, graph, constants, report)
            if refusal is None and any(assumed.get(t, 0) > env.assumed_min.get(t, 0) for t in assumed):
                refusal = Refusal("it needs stronger assumptions about the other dimensions", None, False)
            if refusal is None:
                report.valid.setdefault(sym, []).append(v)
            else:
                report.refused[(sym, v)] = refusal
    _combinations(retrace, shapes, graph, constants, report, settled.combinations)
    return report


def _trusted(settled: LocalVerdicts | None, graph: fx.Graph, env: ShapeEnv) -> LocalVerdicts:
    """The verdicts of the operator-by-operator proof this proof may take over. A size where
    an operator fails is one where eager fails only if eager reaches that operator there: not
    where it may sit in a branch of a cond eager does not take, or follow a decision on data."""
    if settled is None:
        return LocalVerdicts()
    branches = any(n.op == "get_attr" for n in graph.nodes)   # the IR's get_attr nodes are subgraphs only
    if branches or env.unbacked.infos:
        return LocalVerdicts(settled.valid, {}, settled.combinations)
    return settled


def _excluded_by_guards(env: ShapeEnv, pins: dict) -> bool:
    values = {s: sympy.Integer(v) for s, v in pins.items()}
    return any(_at(g.rel, values) is sympy.false for g in env.guards)


def _at(expr: sympy.Basic, values: dict) -> sympy.Basic:
    """`expr` at the given sizes; a division by a size that is 0 there makes it false (the
    program divides by zero at that size, as eager would)."""
    try:
        return expr.xreplace(values)
    except ZeroDivisionError:
        return sympy.false


def _combinations(retrace, shapes: InputShapes, graph: fx.Graph, constants: dict, report: SmallSizeReport,
                  proven: list) -> None:
    """Several symbols small at once: each combination is traced, or excluded, unless the
    operator-by-operator proof proved it (`proven`)."""
    smalls, tied = {}, set()
    # a size tied to another's is pinned with it (_try); the contract speaks of the symbols
    # the capture kept, so those are the ones combined
    for sym, sizes in sorted(report.valid.items(), key=lambda item: item[0] in shapes.env.replacements):
        if sizes and sym not in tied:
            smalls[sym] = sizes
            tied |= shapes.env.with_tied_sizes({sym: sympy.Integer(sizes[0])}).keys()
    if len(smalls) < 2:
        return
    combos = [dict(zip(smalls, values)) for values in itertools.product(*smalls.values())]
    if len(combos) > _MAX_COMBINATIONS:
        report.exclusions.extend(combos)
        return
    for pins in combos:
        if _excluded_by_guards(shapes.env, pins) or pins in proven or _proven_within(pins, report.within):
            continue
        refusal, _ = _try(pins, retrace, shapes, graph, constants, report)
        if refusal is not None:
            report.exclusions.append(pins)


def _proven_within(pins: dict, within: dict) -> bool:
    """Whether a trace with one of `pins` pinned, found valid, proved the others there
    operator by operator (the program at that size is the one captured, so its proof holds)."""
    for sym, v in pins.items():
        verdicts = within.get((sym, v))
        rest = {s: u for s, u in pins.items() if s != sym}
        if verdicts is None:
            continue
        if len(rest) == 1 and all(u in verdicts.valid.get(s, ()) for s, u in rest.items()):
            return True
        if rest in verdicts.combinations:
            return True
    return False


def _try(pins: dict[sympy.Symbol, int], retrace, shapes: InputShapes, graph: fx.Graph, constants: dict,
         report: SmallSizeReport):
    """(why the pinned sizes are not valid, or None; the pinned trace's own assumptions).

    The sizes tied to the pinned ones are pinned with them (ShapeEnv.with_tied_sizes); where
    capture cannot follow the program at the tied sizes (graphport's own error), the pins are
    tried alone, as they were given."""
    given = {s: sympy.Integer(v) for s, v in pins.items()}
    tied = shapes.env.with_tied_sizes(given)
    if tied == given:
        return _try_pins(given, retrace, shapes, graph, constants, report, given)
    try:
        return _try_pins(tied, retrace, shapes, graph, constants, report, given)
    except Exception:
        return _try_pins(given, retrace, shapes, graph, constants, report, given)


def _try_pins(pins: dict[sympy.Symbol, sympy.Integer], retrace, shapes: InputShapes, graph: fx.Graph,
              constants: dict, report: SmallSizeReport, given: dict):
    """`given`: the pins asked for; `pins` adds the sizes tied to them (equal at every size
    the program accepts), so a trace of one given size is the program at that size, and
    what its own operator-by-operator proof settled is kept under that one size."""
    pinned = shapes.pinned(pins)
    report.traces += 1
    try:
        pinned_graph, pinned_constants, *settled = retrace(pinned, locations=False, pins=pins)
    except InternalError:
        raise
    except OperatorError as e:   # an operator rejects its arguments there, as it would in eager
        return Refusal(f"the program fails there: {e.what}", e.location, True), {}
    except GraphportError as e:   # capture cannot follow the program there: no proof, say why at export
        return Refusal(f"graphport cannot capture the program there: {e.what}", e.location, False), {}
    except Exception as e:
        if _raised_by_graphport(e):
            raise
        # raised by the program itself (or torch under it) at that size, as eager would
        return Refusal(f"the program fails there: {type(e).__name__}: {e}", location_in_traceback(e.__traceback__),
                       True), {}
    difference = compare(graph, pinned_graph, pins) or _compare_constants(constants, pinned_constants)
    if difference is not None:
        return Refusal(*_located(difference, retrace, shapes, graph, pins), False), {}
    original = {g.rel.xreplace(pins) for g in shapes.env.guards}
    for guard in pinned.env.guards:
        if guard.rel not in original:
            return Refusal(f"the program asks another question of the sizes there ({guard.rel})", guard.location,
                           False), {}
    if len(given) == 1 and settled and settled[0] is not None:
        report.within[next(iter(given.items()))] = _trusted(settled[0], pinned_graph, pinned.env)
    return None, dict(pinned.env.assumed_min)


def _compare_constants(ours: dict, theirs: dict) -> tuple[str, None] | None:
    for name in sorted(set(ours) | set(theirs)):
        a, b = ours.get(name), theirs.get(name)
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):   # custom objects: the module's own
            if a is b:
                continue
        same = (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and b is not None and a.dtype == b.dtype and a.shape == b.shape
                and (a.device.type == "meta" or b.device.type == "meta" or torch.equal(a, b)))
        if not same:
            return f"the constant {name} has another value there (a tensor made from sizes in Python)", None
    return None


def _located(difference: tuple, retrace, shapes: InputShapes, graph: fx.Graph, pins: dict) -> tuple:
    """The difference with the user's line where it is: the pinned trace was made without
    source locations, so where they are needed it is made again with them."""
    if difference[1] is not None:
        return difference
    try:
        again = compare(graph, retrace(shapes.pinned(pins))[0], pins)
    except Exception:   # it did not fail the first time: keep the difference found then
        return difference
    return again if again is not None and again[1] is not None else difference


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _raised_by_graphport(error: Exception) -> bool:
    """Whether the innermost frame of the error is graphport's own code (a bug, not the program)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return (tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE)
            and "forwards_to_torch" not in tb.tb_frame.f_locals)   # a tracer's indexing, raising torch's error


# -- comparing two graphs modulo pinned symbols -------------------------------------------------

class _Correspondence:
    """Which node of the pinned graph each node of the captured graph computes; nodes either
    graph skipped as identities at the pinned sizes stand for their sources."""

    def __init__(self):
        self.ours: dict[fx.Node, fx.Node] = {}
        self.skipped: dict[fx.Node, fx.Node] = {}   # pinned node skipped -> its source

    def resolve(self, b: fx.Node) -> fx.Node:
        while b in self.skipped:
            b = self.skipped[b]
        return b

    def same_node(self, a, b) -> bool:
        return isinstance(a, fx.Node) and isinstance(b, fx.Node) and self.ours.get(a) is self.resolve(b)


_NONE = _Correspondence()


def compare(graph: fx.Graph, pinned: fx.Graph, pins: dict,
            positional: bool = False) -> tuple[str, SourceLocation | None] | None:
    """None if `pinned` computes what `graph` computes once the pinned symbols take their
    values; else (what differs, the user's line where it does). Operations that are
    identities at the pinned sizes (a `clone`, an `expand` or `view` to the same shape, a
    slice of a whole dimension: code paths that differ only there) are skipped on either side.
    A cond the pins decide is compared as the branch it takes; subgraphs (cond branches), whose
    inputs are matched by position (`positional`), are compared recursively."""
    graph = inline_decided_conds(graph, pins)
    pins = dict(pins)   # grows with the data-dependent sizes matched below
    ours = [n for n in graph.nodes if n.op == "call_function" and not _is_size(n)]
    theirs = [n for n in pinned.nodes if n.op == "call_function" and not _is_size(n)]
    match = _Correspondence()
    a_in = [n for n in graph.nodes if n.op == "placeholder" and not (positional and _is_size(n))]
    b_in = [n for n in pinned.nodes if n.op == "placeholder" and not (positional and _is_size(n))]
    if len(a_in) != len(b_in) or (not positional and [n.name for n in a_in] != [n.name for n in b_in]):
        return "the inputs differ", None
    match.ours.update(zip(a_in, b_in))
    _match_subgraphs(graph, pinned, match, pins)
    i = j = 0
    while i < len(ours) or j < len(theirs):
        a = ours[i] if i < len(ours) else None
        b = theirs[j] if j < len(theirs) else None
        if a is not None and b is not None and _same_call(a, b, match, pins):
            match.ours[a] = b
            _pin_data_dependent_sizes(a, b, pins)
            i, j = i + 1, j + 1
        elif a is not None and _identity_at(a, pins) and a.args[0] in match.ours:
            match.ours[a] = match.resolve(match.ours[a.args[0]])
            i += 1
        elif b is not None and _identity_at(b, pins):
            match.skipped[b] = b.args[0]
            j += 1
        elif a is None or b is None:
            first = a if a is not None else b
            return f"the program records {'more' if a is None else 'fewer'} operations there", _location(first)
        elif a.target != b.target:
            return f"the program calls {_name(b)} where it called {_name(a)}", _location(a)
        else:
            return f"{_name(a)} gets other arguments there", _location(a)
    out_a, out_b = graph.output_node(), pinned.output_node()
    if not _same(out_a.args, out_b.args, match, pins):
        return "the program returns other values there", None
    return None


def _pin_data_dependent_sizes(a: fx.Node, b: fx.Node, pins: dict) -> None:
    """Two matching calls give sizes of the same values: a data-dependent size of ours (a
    nonzero count, a cond output's size the branch decides) is, at the pinned sizes, the
    pinned trace's size there, which may be a number (both branches give 0 at size 0)."""
    def leaves(val):
        return [v for v in (val if isinstance(val, (tuple, list)) else (val,)) if isinstance(v, torch.Tensor)]
    for va, vb in zip(leaves(a.meta.get("val")), leaves(b.meta.get("val"))):
        for sa, sb in zip(va.shape, vb.shape):
            node = sa.node if isinstance(sa, torch.SymInt) else None
            if isinstance(node, SymNode) and node.expr.is_Symbol and node.expr in node.env.unbacked.infos \
                    and node.expr not in pins:
                pins[node.expr] = sb.node.expr if isinstance(sb, torch.SymInt) else sympy.Integer(sb)


def _match_subgraphs(graph: fx.Graph, pinned: fx.Graph, match: _Correspondence, pins) -> None:
    """get_attr nodes (cond branches) correspond when their subgraphs compute the same thing."""
    ours = [n for n in graph.nodes if n.op == "get_attr"]
    theirs = [n for n in pinned.nodes if n.op == "get_attr"]
    for a, b in zip(ours, theirs):
        sub_a = getattr(graph.owning_module, a.target, None)
        sub_b = getattr(pinned.owning_module, b.target, None)
        if isinstance(getattr(sub_a, "graph", None), fx.Graph) and isinstance(getattr(sub_b, "graph", None), fx.Graph) \
                and compare(sub_a.graph, sub_b.graph, pins, positional=True) is None:
            match.ours[a] = b


def _same_call(a: fx.Node, b: fx.Node, match: _Correspondence, pins) -> bool:
    """Same operator on the same arguments: the same computation, whatever the recorded
    metadata says (it was worked out under the capture's assumptions)."""
    if _EQUIVALENT.get(a.target, a.target) != _EQUIVALENT.get(b.target, b.target):
        return _empty_alike(a, b, pins)
    if a.target is torch.ops.higher_order.cond and len(a.args) == len(b.args) == 4:
        # a size the pins fix is a constant in the pinned trace, so its branches do not lift it:
        # the operands are compared without sizes, which the branches compare by value
        return (_same(a.args[:3], b.args[:3], match, pins)
                and _same(_tensor_operands(a.args[3]), _tensor_operands(b.args[3]), match, pins))
    if _same(a.args, b.args, match, pins) and _same(a.kwargs, b.kwargs, match, pins):
        return True
    return _same_result_regardless(a, b, match, pins)


def _tensor_operands(operands) -> list:
    return [o for o in operands if not (isinstance(o, fx.Node) and _is_size(o)) and not isinstance(o, (int, float, bool))]


# Operators that compute the same values (they differ in aliasing rules only).
_EQUIVALENT = {torch.ops.aten._unsafe_view.default: torch.ops.aten.view.default}


def _empty_alike(a: fx.Node, b: fx.Node, pins) -> bool:
    """Two results with no elements, of one shape and dtype: the same value, however made."""
    val_a, val_b = a.meta.get("val"), b.meta.get("val")
    return (isinstance(val_a, torch.Tensor) and isinstance(val_b, torch.Tensor)
            and _expr(val_b.numel(), pins) == 0 and _same_value(val_a, val_b, pins))


_IDENTITY_WHEN_SAME_SHAPE = frozenset({"expand", "view", "_unsafe_view", "reshape", "slice", "squeeze", "unsqueeze",
                                       "alias", "_to_copy", "repeat", "contiguous"})
_ALWAYS_IDENTITY = frozenset({"clone", "alias", "detach", "lift_fresh_copy"})


def _identity_at(node: fx.Node, pins) -> bool:
    """Whether the node returns its first argument's values unchanged at the pinned sizes."""
    target = node.target
    if not isinstance(target, _torch.OpOverload) or not node.args or not isinstance(node.args[0], fx.Node):
        return False
    name = target.overloadpacket.__name__
    out, src = node.meta.get("val"), node.args[0].meta.get("val")
    if not isinstance(out, torch.Tensor) or not isinstance(src, torch.Tensor) or out.dtype != src.dtype:
        return False
    if name in _ALWAYS_IDENTITY:
        return True
    if name == "slice" and len(node.args) > 4 and node.args[4] != 1:
        return False
    return name in _IDENTITY_WHEN_SAME_SHAPE and _same(list(out.shape), list(src.shape), _NONE, pins)


def _same_result_regardless(a: fx.Node, b: fx.Node, match: _Correspondence, pins) -> bool:
    """Arguments that differ only in how they are written: a view with the same source and
    the same geometry (`x[1:]` on an empty tensor is `slice(x, 0, 1, INT_MAX)` symbolically
    and `slice(x, 0, 0, 0)` pinned), or a result with no elements of the same shape."""
    val_a, val_b = a.meta.get("val"), b.meta.get("val")
    if not isinstance(val_a, torch.Tensor) or not isinstance(val_b, torch.Tensor):
        return False
    if _empty_alike(a, b, pins):
        return True
    if not _same_value(val_a, val_b, pins):
        return False
    source_a, source_b = a.args[0] if a.args else None, b.args[0] if b.args else None
    if not match.same_node(source_a, source_b):
        return False
    # strides of dimensions of size 1 address nothing: they may differ
    strides = [(sa, sb) for sa, sb, size in zip(val_a.stride(), val_b.stride(), val_b.shape)
               if _expr(size, pins) != 1]
    return (isinstance(a.target, _torch.OpOverload) and op_info(a.target).kind is Kind.VIEW
            and all(_same(sa, sb, _NONE, pins) for sa, sb in strides)
            and _same(val_a.storage_offset() - source_a.meta["val"].storage_offset(),
                      val_b.storage_offset() - source_b.meta["val"].storage_offset(), _NONE, pins))


def _is_size(node: fx.Node) -> bool:
    return not isinstance(node.meta.get("val"), torch.Tensor) and not isinstance(node.meta.get("val"), (list, tuple))


def _expr(value, pins) -> sympy.Basic | None:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        found = value_at(value.node, pins) if isinstance(value.node, SymNode) else None
        return None if found is None else sympy.expand(sympy.sympify(found))
    if isinstance(value, (bool, int, float)):
        return sympy.sympify(value)
    return None


def _same_size(a, b, pins) -> bool:
    """Two size values (SymNodes or constants) equal once the pins apply: by value where it
    can be computed, else operation by operation (`a / b` at b = 1 against `a / 1`)."""
    try:
        va = value_at(a, pins) if isinstance(a, SymNode) else sympy.sympify(a)
        vb = value_at(b, pins) if isinstance(b, SymNode) else sympy.sympify(b)
    except ZeroDivisionError:
        return False
    if va is not None and vb is not None:
        va, vb = sympy.sympify(va), sympy.sympify(vb)
        return va == vb if isinstance(va, sympy.logic.boolalg.Boolean) else sympy.expand(va - vb) == 0
    ra = a.recipe if isinstance(a, SymNode) else None
    rb = b.recipe if isinstance(b, SymNode) else None
    return (ra is not None and rb is not None and ra[0] == rb[0] and len(ra) == len(rb)
            and all(_same_size(x, y, pins) for x, y in zip(ra[1:], rb[1:])))


def _same(a, b, match: _Correspondence, pins) -> bool:
    if isinstance(a, fx.Node) and _is_size(a):
        a = a.meta.get("val")
    if isinstance(b, fx.Node) and _is_size(b):
        b = b.meta.get("val")
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    if isinstance(a, symbolic) or isinstance(b, symbolic):
        if isinstance(a, (bool, int, float) + symbolic) and isinstance(b, (bool, int, float) + symbolic):
            return _same_size(a.node if isinstance(a, symbolic) else a, b.node if isinstance(b, symbolic) else b,
                              pins)
        return False
    if isinstance(a, fx.Node) or isinstance(b, fx.Node):
        return match.same_node(a, b)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_same(x, y, match, pins) for x, y in zip(a, b)))
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(_same(a[k], b[k], match, pins) for k in a))
    if type(a) in (bool, int, float) and type(b) in (bool, int, float):
        return a == b or (a != a and b != b)   # plain numbers (inf included: inf - inf is no zero)
    ea, eb = _expr(a, pins), _expr(b, pins)
    if ea is not None and eb is not None:
        return sympy.expand(ea - eb) == 0 if not isinstance(ea, sympy.logic.boolalg.Boolean) else ea == eb
    return type(a) is type(b) and a == b


def _same_value(a, b, pins) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and _same(list(a.shape), list(b.shape), _NONE, pins)
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
