"""Sizes 0 and 1 proven by replaying the captured graph, instead of tracing the program again.

Capture may answer a size question as if a dynamic size were at least 2; small_sizes.py
proves the program at the smaller sizes by tracing it there and comparing graphs. This
module is its fast path, for the common case where every such answer on the pinned symbols
was given inside a metadata-only computation: a meta kernel working out one recorded
node's output metadata (capture/mode.py `call`), or a kept composite's decomposition run
without recording (`call_kept_composite`). ShapeEnv.assumed_outside_metadata names the
symbols with an assumption made anywhere else (the program's Python, a C++ composite such
as reshape deciding view-or-copy, an eager check of an in-place operator, a decomposition
that records nodes); those are proven by the re-trace.

Why the replay proves the size. Fix pinned sizes P and inputs at P that satisfy the
capture's guards. Run the program on them; it records operations one after another, and
what it does between two of them (its Python, C++ composites, recording decompositions)
depends only on (a) the metadata of the values it holds, and (b) the answers to the size
questions it asks there. By induction over the recorded nodes: while every value so far
has the recorded metadata with P substituted, every question asked outside a metadata
computation is the question the capture asked, with P substituted; the capture settled it
either from the declared ranges (they contain P), by a guard (the inputs satisfy it), or by
an assumption about symbols other than P's (which P does not touch) -- never by an
assumption about a pinned symbol, which is the precondition. So the program takes the
same path and makes the same call with the same arguments as the capture did next; that
call's metadata at P is what the replay computes for the node (the same dispatch, on
arguments with the same metadata), and the replay requires it to equal the recorded
metadata with P substituted: dtype, shape, strides and storage offset (later decisions
read strides). The induction then carries to the next node, and at the end the program
has recorded the same graph modulo P, returning the same values.

The replay itself must be as valid at P as the re-trace would be: every call accepts the
pinned metadata (an operator that raises there makes the replay give up: the re-trace
then tells whether the program fails there), it adds no guard the capture did not have,
and it needs no stronger assumption about the other symbols than the capture did.
Anything outside that argument is left to the re-trace: data-dependent sizes, control
flow subgraphs, custom operators, runtime assertions, inputs passed twice. The replay can
only accept a size, never refuse one.
"""
from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..capture.custom_ops import is_custom
from ..capture.environment import capture_environment
from ..capture.mode import CaptureMode
from ..capture.recorder import Recorder
from ..capture.sizes import SizeValues
from ..capture.tracer import TracerTensor
from ..ops.policy import EXPORT_DEFAULT
from ..shapes.node import SymNode, symint, value_at
from ..shapes.spec import InputShapes
from .metadata import DEVICE_KEY

pytree = _torch.pytree

# Size operators of the IR, replayed as the Python operations they are.
_SIZE_OPS = frozenset({operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
                       operator.mod, operator.pow, operator.neg, operator.eq, operator.ne, operator.lt,
                       operator.le, operator.gt, operator.ge, torch.sym_max, torch.sym_min, torch.sym_not,
                       torch.sym_float, torch.sym_int, torch.sym_ite})


class _GiveUp(Exception):
    """The replay cannot vouch for the size: the re-trace decides."""


def replayable(graph: fx.Graph, shapes: InputShapes, pins: dict, user_inputs: list[str] | None) -> bool:
    """Whether the replay's argument covers this graph at these pins (see the module doc)."""
    env = shapes.env
    if user_inputs is None or env.unbacked.infos or any(s in env.assumed_outside_metadata for s in pins):
        return False
    for node in graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        target = node.target
        if node.op != "call_function":
            return False
        if target is operator.getitem or target is torch.ops.aten.sym_size.int or target in _SIZE_OPS:
            continue
        if not isinstance(target, _torch.OpOverload) or is_custom(target) \
                or target is torch.ops.aten._assert_scalar.default:
            return False
    return True


def replay_at(graph: fx.Graph, shapes: InputShapes, pinned: InputShapes, pins: dict,
              user_inputs: list[str]) -> bool:
    """True if every node of `graph` replayed on `pinned` inputs has the recorded metadata at
    `pins`, with no new guard in `pinned.env` (assumptions about the other symbols are left in
    `pinned.env.assumed_min` for the caller to compare)."""
    try:
        _replay(graph, shapes, pinned, pins, user_inputs)
    except Exception:   # anything the replay cannot follow: the re-trace decides
        return False
    original = {g.rel.xreplace(pins) for g in shapes.env.guards}
    return all(g.rel in original for g in pinned.env.guards)


def _replay(graph: fx.Graph, shapes: InputShapes, pinned: InputShapes, pins: dict, user_inputs: list[str]) -> None:
    rec = Recorder(locations=False)
    values: dict[fx.Node, Any] = {}
    substitute = _Substitution(shapes.env, pinned.env, pins)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for p in placeholders:
        values[p] = _placeholder(rec, p, substitute)
    by_name = {n.name: n for n in rec.placeholders}
    rec.sizes = SizeValues(pinned.env, {i: by_name[name] for i, name in enumerate(user_inputs)})
    assumptions = shapes.env.metadata_assumptions

    def resolve(n: fx.Node) -> Any:
        found = values[n]
        if found is _LAZY:   # made into a tensor only when a recomputed node reads it
            found = values[n] = _substituted(rec, n, substitute)
        return found
    with capture_environment(None, symbolic=True), CaptureMode(rec, EXPORT_DEFAULT):
        for node in graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            target = node.target
            source = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
            if target is operator.getitem and values.get(source) is _LAZY:
                values[node] = _LAZY
                continue
            if target is torch.ops.aten.sym_size.int and values.get(source) is _LAZY:
                values[node] = substitute.size(node.meta["val"])
                continue
            if isinstance(target, _torch.OpOverload) and not (assumptions.get(node, pins.keys()) & pins.keys()):
                # its metadata was worked out assuming nothing about the pinned symbols: at
                # the pins it is the recorded one, substituted
                values[node] = _LAZY
                continue
            args, kwargs = pytree.tree_map_only(fx.Node, resolve, (node.args, node.kwargs))
            if target is operator.getitem:
                result = args[0][args[1]]
            elif target in _SIZE_OPS:
                result = target(*args, **kwargs)
            elif target is torch.ops.aten.sym_size.int:
                result = args[0].shape[args[1]]
            else:
                mark = next(reversed(rec.graph.nodes))
                result = target(*args, **kwargs)
                _same_operator(rec.graph, mark, target)
            substitute.check(node.meta.get("val"), result)
            values[node] = result


_LAZY = object()   # a value whose metadata at the pins is the recorded one, not yet made


def _substituted(rec: Recorder, node: fx.Node, substitute: "_Substitution") -> Any:
    val = node.meta.get("val")
    device = node.meta.get(DEVICE_KEY, torch.device("cpu"))

    def one(t: torch.Tensor, name: str) -> TracerTensor:
        meta = torch.empty_strided(substitute.sizes(t.shape), substitute.sizes(t.stride()), dtype=t.dtype,
                                   device="meta")
        offset = substitute.recorded(t.storage_offset())
        if offset != 0:
            meta = meta.as_strided(meta.shape, meta.stride(), symint(offset, substitute.pinned_env))
        made = rec.placeholder(name, meta)
        tracer = TracerTensor(meta, device, made.name)
        rec.root.bind(tracer, made, 0)
        return tracer
    with _torch.outside_dispatch_modes():   # metadata of the replay's own, not calls of the program
        if isinstance(val, torch.Tensor):
            return one(val, node.name)
        if isinstance(val, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in val):
            return type(val)(one(v, f"{node.name}_{i}") for i, v in enumerate(val))
    raise _GiveUp("a value the replay does not substitute")


def _same_operator(graph: fx.Graph, mark: fx.Node, target) -> None:
    """The dispatch recorded the operator itself, as the capture did (not a decomposition
    into others, whose questions the capture asked outside any metadata computation)."""
    made = []
    node = mark.next
    while node.op != "root":
        if node.op == "call_function" and node.target is not operator.getitem \
                and node.target is not torch.ops.aten.sym_size.int and node.target not in _SIZE_OPS:
            made.append(node.target)
        node = node.next
    if made != [target]:
        raise _GiveUp(f"{target} replays as {made}")


def _placeholder(rec: Recorder, p: fx.Node, substitute: "_Substitution") -> Any:
    val = p.meta.get("val")
    if isinstance(val, torch.Tensor):
        meta = torch.empty_strided(substitute.sizes(val.shape), substitute.sizes(val.stride()), dtype=val.dtype,
                                   device="meta")
        if substitute.recorded(val.storage_offset()) != 0:
            raise _GiveUp("an input with a storage offset")
        meta.requires_grad_(val.requires_grad)
        node = rec.placeholder(p.name, meta)
        device = p.meta.get(DEVICE_KEY, torch.device("cpu"))
        node.meta[DEVICE_KEY] = device
        tracer = TracerTensor(meta, device, node.name)
        rec.root.bind(tracer, node, 0)
        rec.placeholder_tracers.add(id(tracer))
        return tracer
    if isinstance(val, torch.SymInt):
        value = substitute.size(val)
        rec.placeholder(p.name, value)
        return value
    if isinstance(val, (torch.SymFloat, torch.SymBool)):
        raise _GiveUp("a symbolic float or bool input")
    rec.placeholder(p.name, val)
    return val


class _Substitution:
    """Recorded (symbolic) metadata at the pinned sizes, and its comparison with the replay's."""

    def __init__(self, env, pinned_env, pins: dict):
        self.env, self.pinned_env, self.pins = env, pinned_env, pins

    def recorded(self, value) -> sympy.Basic:
        """A recorded size (a SymInt of the capture, or a number) at the pinned sizes."""
        if not _is_sym(value):
            return sympy.sympify(value)
        node = value.node
        if not isinstance(node, SymNode) or node.env is not self.env:
            raise _GiveUp("a size of another shape environment")
        found = value_at(node, self.pins)
        if found is None:
            raise _GiveUp("a size its recipe computes")
        return sympy.sympify(self.env.simplify(sympy.sympify(found))).xreplace(self.pins)

    def replayed(self, value) -> sympy.Basic:
        if not _is_sym(value):
            return sympy.sympify(value)
        node = value.node
        if not isinstance(node, SymNode) or node.env is not self.pinned_env or node.recipe is not None:
            raise _GiveUp("a size the replay cannot compare")
        return sympy.sympify(self.pinned_env.simplify(node.expr))

    def size(self, value):
        return symint(sympy.expand(self.recorded(value)), self.pinned_env)

    def sizes(self, values) -> list:
        return [self.size(v) for v in values]

    def same(self, recorded, replayed) -> bool:
        a, b = self.recorded(recorded), self.replayed(replayed)
        if isinstance(a, sympy.logic.boolalg.Boolean) or isinstance(b, sympy.logic.boolalg.Boolean):
            return a == b
        return sympy.expand(a - b) == 0

    def check(self, recorded, replayed) -> None:
        if isinstance(recorded, torch.Tensor):
            if not isinstance(replayed, torch.Tensor) or replayed.dtype != recorded.dtype \
                    or replayed.dim() != recorded.dim():
                raise _GiveUp("another kind of value")
            replayed = replayed.gp_meta if isinstance(replayed, TracerTensor) else replayed
            pairs = [*zip(recorded.shape, replayed.shape), *zip(recorded.stride(), replayed.stride()),
                     (recorded.storage_offset(), replayed.storage_offset())]
            if not all(self.same(a, b) for a, b in pairs):
                raise _GiveUp("other metadata")
        elif isinstance(recorded, (tuple, list)):
            if not isinstance(replayed, (tuple, list)) or len(recorded) != len(replayed):
                raise _GiveUp("another number of values")
            for a, b in zip(recorded, replayed):
                self.check(a, b)
        elif _is_sym(recorded) or isinstance(recorded, (int, float, bool)):
            if not (_is_sym(replayed) or isinstance(replayed, (int, float, bool))) or not self.same(recorded, replayed):
                raise _GiveUp("another size")
        elif recorded is not None or replayed is not None:
            raise _GiveUp("a value the replay does not compare")


def _is_sym(value) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))
