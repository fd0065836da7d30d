"""Replay: capture an exported graph again, node by node, under another dispatch policy.

`run_decompositions` lowers a program without its source: the program is its graph. Each
placeholder becomes a tracer with the placeholder's own metadata (its symbolic sizes are
the program's, bound to the replay's environment: a fork of the program's, so that what the
replay asks of sizes never reaches the program it replays), and each call is made again on tracers
under the capture mode, so the policy decides anew which operators stay whole and which
expand, and the recorder makes the result functional exactly as a first capture would.
Every node a source node expands into inherits that node's metadata (`stack_trace`,
`nn_module_stack`): the lowered program points at the user's lines as the original did.

A subgraph reached by `get_attr` (a control-flow branch or body) is replayed on its own,
recursively, and the operator using it is recorded as it was, with its result's metadata.

With a `GradientRequest`, the replay runs with autograd on and records the gradients of a
loss output after the outputs (capture/gradients.py): the joint forward-backward graph.
"""
from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..errors import OperatorError, UnsupportedFeatureError
from ..ops.policy import DispatchPolicy
from ..ops.vocabulary import SYMBOLIC_SIZE_OPS
from ..shapes.node import symint
from .custom_objects import call_torchbind, is_custom_object
from .effects import EffectTokens
from .dead_code import eliminate_dead_code
from ..values import capture_value
from .data_dependent import assert_fact, bind_symbol
from .environment import capture_environment
from .gradients import GradientReport, GradientRequest, differentiate, grad_mode_of, placeholder_tracer
from .mode import CaptureMode
from .received_sizes import ReceivedSizes
from .recorder import Recorder
from .sizes import SizeValues, is_sym
from .tracer import TracerTensor
from ..graph_code import keyword_safe

pytree = _torch.pytree


# A functional graph's `view` stands for its value: the source's input had strides that
# allowed a view, a decomposition may give it others (an attention kernel's transposed
# layout), and then the same value is a reshape.
_VIEWS_OF_VALUES = frozenset({torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default})


@dataclass
class ReplayInputs:
    """What the replay needs to know about the graph's placeholders beyond their metadata."""
    devices: dict[str, torch.device]                 # placeholder name -> run-time device of its tensor
    constants: dict[str, torch.Tensor] = field(default_factory=dict)   # placeholder name -> constant tensor
    constant_targets: dict[str, str] = field(default_factory=dict)     # placeholder name -> its target
    user_inputs: list[str] = field(default_factory=list)   # user-input placeholder names, in flat order
    env: Any = None                                   # the replay's ShapeEnv (a fork of the program's), when symbolic
    named: frozenset[str] = frozenset()   # nodes named outside the graph (preserved call signatures)
    subgraph: bool = False   # a control-flow subgraph: its sizes come from its own placeholders
    gradients: GradientRequest | None = None   # record these gradients after the outputs
    effect_tokens: bool = False   # chain effectful calls with effect tokens (effects.py), as torch's lowering does


@dataclass
class Replayed:
    graph_module: fx.GraphModule
    new_constants: dict[str, str]          # placeholder name -> target of a constant the replay lifted
    constant_values: dict[str, torch.Tensor]   # target -> tensor, for those
    renamed: dict[str, Any]                # name in `named` -> its value's node name now (or the constant it is)
    gradients: GradientReport | None = None   # with a GradientRequest: what differentiating found
    tokens: tuple[str, str] | None = None  # (input, output) effect token names, when effectful calls were chained


def replay(gm: fx.GraphModule, policy: DispatchPolicy, inputs: ReplayInputs) -> Replayed:
    """`gm`'s computation captured again under `policy`, with the same placeholders (names,
    order, metadata) and the same outputs."""
    rec = Recorder(locations=False)
    rec.detach_nodes = inputs.gradients is None   # under autograd, detach stops the gradient itself
    if inputs.effect_tokens:
        rec.effects = EffectTokens(rec)
    values: dict[fx.Node, Any] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for p in placeholders:
        values[p] = _placeholder(rec, p, inputs)
    known = set(rec.constant_values)
    if inputs.env is not None and inputs.subgraph:
        rec.sizes = ReceivedSizes(inputs.env, [(made, values[p]) for made, p in zip(rec.placeholders, placeholders)])
    elif inputs.env is not None:
        by_name = {n.name: n for n in rec.placeholders}
        rec.sizes = SizeValues(inputs.env, {i: by_name[name] for i, name in enumerate(inputs.user_inputs)})
    owner = torch.nn.Module()
    keep: set[fx.Node] = set()
    made_by = _symbols_made_by(gm, inputs.env)
    made_here = {sym for node, symbols in made_by.items() if node.op != "placeholder" for sym in symbols}
    report = None
    with capture_environment(None, symbolic=inputs.env is not None, autograd=inputs.gradients is not None), \
            _portable_decompositions(gm), _data_dependent_symbols_of(rec, inputs.env, made_here), \
            CaptureMode(rec, policy):
        last_meta: dict = {}
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                continue
            mark = next(reversed(rec.graph.nodes), None)
            if node.op == "output":
                returned = node.args[0]
                if isinstance(returned, fx.Node):   # a single value (a while_loop's predicate graph)
                    outputs = _graph_value(rec, values[returned])
                elif inputs.gradients is not None:
                    outputs, report = _with_gradients(rec, gm, returned, values, inputs.gradients)
                else:
                    outputs = tuple(_graph_value(rec, v) for v in pytree.tree_map_only(fx.Node, values.__getitem__,
                                                                                        returned))
                named = {n.name: _graph_value(rec, values[n]) for n in values if n.name in inputs.named}
                keep.update(v for v in named.values() if isinstance(v, fx.Node))
                _inherit(rec.graph, mark, last_meta)
                if rec.effects is not None and rec.effects.current is not None:
                    outputs = (rec.effects.current, *outputs)   # the token output comes first, as torch's
                rec.graph.output(outputs)
                break
            if inputs.env is not None:
                inputs.env.unbacked.reuse[:] = made_by.get(node, [])
            with grad_mode_of(node) if inputs.gradients is not None else contextlib.nullcontext():
                values[node] = result = _run(rec, gm, node, values, policy, inputs, owner)
            _inherit(rec.graph, mark, node.meta)
            last_meta = node.meta
            if node.op == "call_function" and not node.users:
                keep.update(_nodes_of(rec, result))   # the program asked for it (it may raise): it stays
    tokens = None if rec.effects is None or rec.effects.input is None else (
        rec.effects.input.name, rec.effects.current.name)
    _order_placeholders(rec.graph, ([tokens[0]] if tokens is not None else []) + [p.name for p in placeholders],
                        list(rec.constant_targets), inputs.user_inputs[0] if inputs.user_inputs else None)
    eliminate_dead_code(rec.graph, keep)
    new_constants = {name: target for name, target in rec.constant_targets.items()}
    renamed = {name: value.name if isinstance(value, fx.Node) else value for name, value in named.items()}
    return Replayed(fx.GraphModule(owner, keyword_safe(rec.graph), class_name="GraphModule"), new_constants,
                    {t: v for t, v in rec.constant_values.items() if t not in known}, renamed, report, tokens)


def _with_gradients(rec: Recorder, gm: fx.GraphModule, returned, values: dict,
                    request: GradientRequest) -> tuple[tuple, GradientReport]:
    """The graph's outputs followed by the requested gradients (None where the loss does not
    reach a placeholder). The backward's nodes take the metadata of the node computing the
    loss: they are recorded after the forward, on its behalf."""
    traced = [values[n] if isinstance(n, fx.Node) else n for n in returned]
    placeholders = {n.name: values[n] for n in gm.graph.nodes if n.op == "placeholder"}
    before_backward = next(reversed(rec.graph.nodes), None)
    grads, report = differentiate(traced, placeholders, request)
    loss_node = returned[request.loss]
    _inherit(rec.graph, before_backward, loss_node.meta if isinstance(loss_node, fx.Node) else {})
    outputs = tuple(_graph_value(rec, v) for v in traced) + tuple(
        _graph_value(rec, g) if g is not None else None for g in grads)
    return outputs, report


def _symbols_made_by(gm: fx.GraphModule, env) -> dict[fx.Node, list]:
    """Node -> the data-dependent symbols first seen in its value, in the order they were made."""
    if env is None:
        return {}
    seen: set = set()
    made: dict[fx.Node, list] = {}
    for node in gm.graph.nodes:
        found = set()
        for leaf in pytree.tree_leaves(node.meta.get("val")):
            for size in (list(leaf.shape) if isinstance(leaf, torch.Tensor) else [leaf]):
                if is_sym(size):
                    found.update(s for s in env.unbacked.involved(size.node.expr) if s not in seen)
        if found:
            made[node] = env.table.in_order(found)
            seen |= found
    return made


@contextlib.contextmanager
def _data_dependent_symbols_of(rec: Recorder, env, made_here: set):
    """During the replay, the program's data-dependent symbols are made again by the nodes
    that made them (same names, same known ranges) and bound to the replay's nodes, and a
    fact a decomposition states is recorded in the replay's graph. The source program's
    bindings, facts and ranges are restored afterwards: it is left as it was, and a fact
    only the lowered graph checks is not assumed for it. `made_here`: the symbols this
    graph's own nodes make (a subgraph also receives symbols the outer graph made)."""
    if env is None:
        yield
        return
    unbacked = env.unbacked
    asserter, bound = unbacked.asserter, {sym: info.node for sym, info in unbacked.infos.items()}
    facts, ranges = list(unbacked.facts), {sym: info.range for sym, info in unbacked.infos.items()}

    def assert_here(cond) -> None:
        with _torch.outside_dispatch_modes():
            assert_fact(rec, cond)
    unbacked.asserter = assert_here
    try:
        yield
        _keep_binding_names(rec, {sym: name for sym, name in bound.items() if sym in made_here})
    finally:
        unbacked.asserter = asserter
        unbacked.reuse.clear()
        unbacked.facts[:] = facts
        for sym, info in unbacked.infos.items():
            info.node = bound.get(sym)
            info.range = ranges.get(sym, info.range)


def _keep_binding_names(rec: Recorder, bound: dict) -> None:
    """A node binding a symbol keeps the source's name (`item`, though a lowering records
    `_local_scalar_dense`): the shape contract and the symbols, which the lowered program
    shares with its source, name their binding nodes."""
    taken = {n.name for n in rec.graph.nodes}
    for sym, name in bound.items():
        node = rec.sizes.cache.get(sym)
        if isinstance(node, fx.Node) and name is not None and node.name != name and name not in taken:
            taken.discard(node.name)
            taken.add(_torch.rename_node(node, name))


# Operators whose composite kernel picks a CPU backend's kernel (mkldnn) when torch's
# process-wide flag enables it: lstm lowers to `mkldnn_rnn_layer`. (Convolutions, linear, GRU,
# RNN and attention lower the same either way.)
_BACKEND_DEPENDENT = frozenset({torch.ops.aten.lstm.input, torch.ops.aten.lstm.data})


@contextlib.contextmanager
def _portable_decompositions(gm: fx.GraphModule):
    """Decompositions that pick a CPU backend's kernel (mkldnn, nnpack) when it is enabled
    pick the portable ATen form instead, as torch's lowering does: a Core ATen program must
    not depend on the backend of the machine that lowered it. torch has no per-thread switch,
    so the process-wide flags are turned off only while a graph holding such an operator is
    lowered; every other lowering leaves them alone (other threads' kernels read them)."""
    if not any(node.target in _BACKEND_DEPENDENT for node in gm.graph.nodes):
        yield
        return
    with _torch.cpu_backend_kernels(enabled=False):
        yield


def _placeholder(rec: Recorder, p: fx.Node, inputs: ReplayInputs) -> Any:
    val = _in_env(capture_value(p.meta.get("val")), inputs.env)
    if isinstance(val, torch.Tensor):
        real = inputs.constants.get(p.name)
        if real is not None:
            tracer = rec.tracer_for_placeholder(p.name, real, val)
            rec.constants[id(real)] = tracer           # the program's constants stay its own inputs
            rec.constant_values[inputs.constant_targets[p.name]] = real
        else:
            node = rec.placeholder(p.name, val)
            device = inputs.devices.get(p.name, torch.device("cpu"))
            tracer = TracerTensor(val, device, node.name) if inputs.gradients is None else \
                placeholder_tracer(val, device, node.name, p.name in inputs.gradients.wrt)
            rec.root.bind(tracer, node, 0)
            rec.placeholder_tracers.add(id(tracer))
        made = rec.root_value(tracer)
        value = tracer
    elif is_custom_object(inputs.constants.get(p.name)):
        value = inputs.constants[p.name]
        made = rec.objects.lift_as(value, p.name, inputs.constant_targets[p.name])
    else:
        made = rec.placeholder(p.name, val)
        value = val
    made.meta.update({k: v for k, v in p.meta.items() if k != "val"})
    return value


def _in_env(val: Any, env) -> Any:
    """A placeholder's recorded value with its symbolic sizes, strides and offset made again in
    `env`: every size computation of the replay then reasons (and records guards) there."""
    if env is None:
        return val
    if isinstance(val, torch.SymInt) and val.node.env is not env:
        return symint(val.node.expr, env)
    if not isinstance(val, torch.Tensor) or not any(is_sym(s) and s.node.env is not env
                                                    for s in (*val.shape, *val.stride())):
        return val

    def again(s):
        return symint(s.node.expr, env) if is_sym(s) else s
    # an input's value starts its storage (capture lays inputs out so, as torch's do)
    made = torch.empty_strided([again(s) for s in val.shape], [again(s) for s in val.stride()], dtype=val.dtype,
                               device="meta")
    return made.requires_grad_(val.requires_grad)


def _run(rec: Recorder, gm: fx.GraphModule, node: fx.Node, values: dict, policy: DispatchPolicy,
         inputs: ReplayInputs, owner: torch.nn.Module) -> Any:
    args, kwargs = pytree.tree_map_only(fx.Node, values.__getitem__, (node.args, node.kwargs))
    if node.op == "get_attr":
        sub = getattr(gm, node.target)
        if not isinstance(sub, fx.GraphModule):
            raise UnsupportedFeatureError(f"the program reads the attribute {node.target}, which is not a subgraph",
                                          fix="export the program with graphport, whose graphs read no attributes")
        with _torch.outside_dispatch_modes():   # its meta computations are not this graph's constants
            lowered = replay(sub, policy, ReplayInputs(devices=inputs.devices, env=inputs.env,
                                                       subgraph=True)).graph_module
        owner.add_module(node.target, lowered)
        made = rec.root.graph.get_attr(node.target)
        made.meta.update(node.meta)
        return _Subgraph(made, lowered)
    target = node.target
    if node.op != "call_function":
        raise UnsupportedFeatureError(f"the program's graph has a {node.op} node ({node.name}), which the IR "
                                      "does not allow", fix="export the program with graphport.export")
    if target is operator.getitem:
        return args[0][args[1]]
    if target is torch.ops.aten.sym_size.int:
        return _size(rec, inputs.env, *args)
    if target in SYMBOLIC_SIZE_OPS:
        return target(*args, **kwargs)
    if target is torch.ops.aten._assert_scalar.default:
        return _assert_scalar(rec, inputs.env, *args)
    if target is call_torchbind:   # a method call on a custom object: the capture rule records it again
        return target(*args, **kwargs)
    if isinstance(target, _torch.HigherOrderOperator):
        return _record_as_is(rec, node, args, kwargs)
    if target in _VIEWS_OF_VALUES:
        try:
            return target(*args, **kwargs)
        except OperatorError:
            return torch.ops.aten.reshape.default(*args, **kwargs)
    return target(*args, **kwargs)


def _size(rec: Recorder, env, t, dim: int) -> Any:
    """`t.shape[dim]`; a data-dependent size no replayed node has bound yet (the output of
    an operator recorded as it was, a `cond` whose branches differ in size) is bound to a
    `sym_size` node, as the source bound it."""
    size = t.shape[dim]
    if env is not None and is_sym(size):
        sym = size.node.expr
        if sym in env.unbacked.infos and sym not in rec.sizes.cache:
            bind_symbol(rec, sym, rec.node(torch.ops.aten.sym_size.int, (rec.graph_arg(t), dim), {}, size))
    return size


def _assert_scalar(rec: Recorder, env, cond, message: str) -> None:
    """A check the program states is kept as it is, with its message (the user's line), and
    holds for the rest of the replay as it did during capture."""
    if not is_sym(cond):
        return None
    if env is not None and env.static_value(cond.node.expr) is None:
        env.assume(cond.node.expr)
    with _torch.outside_dispatch_modes():   # its size nodes are computed on metadata, not captured
        value = rec.sym_value(cond)
    if isinstance(value, fx.Node):
        rec.user_calls.add(rec.node(torch.ops.aten._assert_scalar.default, (value, message), {}, None))
    return None


class _Subgraph:
    """A replayed subgraph: its `get_attr` node, passed to the operator that uses it, and
    the lowered graph module it names."""
    def __init__(self, node: fx.Node, module: fx.GraphModule):
        self.node = node
        self.module = module


def _record_as_is(rec: Recorder, node: fx.Node, args, kwargs) -> Any:
    """An operator whose arguments include subgraphs: recorded as it was, its subgraphs
    replaced by their replays (a cond without the operands no branch reads)."""
    if node.target is torch.ops.higher_order.cond:
        args = _without_unread_operands(*args)
    with _torch.outside_dispatch_modes():   # size nodes (a predicate `s0 > 4`) are computed on metadata, not captured
        node_args, node_kwargs = pytree.tree_map(
            lambda a: a.node if isinstance(a, _Subgraph) else rec.graph_arg(a), (args, kwargs))
    val = capture_value(node.meta["val"])
    made = rec.node(node.target, node_args, node_kwargs, val)
    device = next((a.device for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)),
                  torch.device("cpu"))
    return rec.wrap(val, made, device)


def _without_unread_operands(pred, true_branch: _Subgraph, false_branch: _Subgraph, operands) -> tuple:
    """The cond's arguments without the operands neither lowered branch reads, and the
    branches without their placeholders: torch's lowering passes a cond only what its
    branches use, so the calls computing the others become dead code (ExportDB's
    `cond_closed_over_variable` passes `x + 1` and reads `x` only). The capture keeps the
    operands the program passed, as the program's own call."""
    branches = (true_branch.module, false_branch.module)
    inputs = [[n for n in branch.graph.nodes if n.op == "placeholder"] for branch in branches]
    read = [i for i in range(len(operands)) if any(placeholders[i].users for placeholders in inputs)]
    if len(read) < len(operands):
        for branch, placeholders in zip(branches, inputs):
            for i, placeholder in enumerate(placeholders):
                if i not in read:
                    branch.graph.erase_node(placeholder)
            branch.recompile()
        operands = type(operands)(operands[i] for i in read)
    return pred, true_branch, false_branch, operands


def _graph_value(rec: Recorder, value: Any) -> Any:
    if isinstance(value, TracerTensor):
        return rec.output_value(value)
    if isinstance(value, torch.Tensor) or is_sym(value):
        return rec.graph_arg(value)
    return value


def _nodes_of(rec: Recorder, result: Any) -> list[fx.Node]:
    return [rec.value(t) for t in pytree.tree_leaves(result) if isinstance(t, TracerTensor)]


def _inherit(graph: fx.Graph, mark: fx.Node | None, meta: dict) -> None:
    """Nodes made since `mark` take the source node's metadata (all but its value)."""
    node = mark.next if mark is not None else next(iter(graph.nodes), None)
    while node is not None and node.op != "root":
        if node.op != "placeholder":
            for key, value in meta.items():
                if key != "val" and key not in node.meta:
                    node.meta[key] = value
        node = node.next


def _order_placeholders(graph: fx.Graph, names: list[str], new_constants: list[str], first_user: str | None) -> None:
    """The source's placeholders in their order, constants the replay lifted after the
    source's constants (before the first user input)."""
    by_name = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    anchor = next(n for n in graph.nodes if n.op != "placeholder")
    ordered = list(names)
    if new_constants:
        at = names.index(first_user) if first_user is not None else len(names)
        ordered[at:at] = new_constants
    for name in ordered:
        anchor.prepend(by_name[name])
