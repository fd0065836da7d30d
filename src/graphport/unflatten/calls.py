"""The flat graph cut back into module calls, and what crosses each call's boundary.

Every node's `nn_module_stack` names the chain of module calls it was recorded in (one key
per call: `L__self__a`, then `L__self__a@1` for a's second call). Walking the graph in
order, a change of chain closes and opens calls, which gives a tree of calls whose items
are nodes and nested calls, in program order. A value defined in one call and used in
another crosses every boundary between them: it is an input of each call on the way down
to the user and an output of each call on the way up from the definition.

State (parameters, buffers, constant tensors) is not passed around: it is read where it is
used, from the innermost call whose module owns it (a `get_attr` relative to that module),
and handed down as an input only to calls of modules that do not own it. A preserved call
has a frozen calling convention: state it does not own is read from the root instead, and
a size it needs is recomputed from the tensors it receives.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..errors import UnsupportedFeatureError
from ..signature import ConstantArgument, InputKind, OutputKind

aten = torch.ops.aten
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


@dataclass(eq=False)
class Call:
    """One call of one module: its items in program order and its boundary."""
    key: str                      # the nn_module_stack key ("" for the root)
    fqn: str                      # the module's path ("" for the root)
    type_name: str | None
    parent: "Call | None"
    index: int = 0                # which call of this module (0: the first)
    items: list = field(default_factory=list)            # fx.Node or Call
    inputs: dict[fx.Node, None] = field(default_factory=dict)     # flat values it receives (ordered later)
    outputs: dict[fx.Node, None] = field(default_factory=dict)    # flat values it hands back
    state: dict[fx.Node, str] = field(default_factory=dict)       # state placeholder -> get_attr target here
    absolute: set[fx.Node] = field(default_factory=set)           # state read from the root (preserved calls)
    recomputed: dict[fx.Node, tuple] = field(default_factory=dict)   # size -> how a preserved call remakes it
    writes: list[tuple[fx.Node, str]] = field(default_factory=list)   # (new value, state target) written here
    signature: Any = None         # ModuleCallSignature of a preserved call
    signature_inputs: list = field(default_factory=list)    # flat node or Python value per recorded input
    signature_outputs: list = field(default_factory=list)   # flat node or Python value per recorded output

    def ancestors(self) -> list["Call"]:
        """This call and the calls it runs inside, innermost first."""
        chain, call = [], self
        while call is not None:
            chain.append(call)
            call = call.parent
        return chain

    def owns(self, target: str) -> bool:
        return not self.fqn or target.startswith(self.fqn + ".")

    def relative(self, target: str) -> str:
        return target[len(self.fqn) + 1:] if self.fqn else target


@dataclass
class CallTree:
    root: Call
    owner: dict[fx.Node, Call]
    calls: list[Call]             # every call but the root, in program order
    position: dict[fx.Node, int]
    state_targets: dict[fx.Node, str]   # state placeholder -> its fully qualified name
    # a buffer's value left by a preserved call -> (the buffer, that call): other calls read the buffer
    versions: dict[fx.Node, tuple[str, "Call"]] = field(default_factory=dict)


def call_tree(ep) -> CallTree:
    graph = ep.graph
    sig = ep.graph_signature
    position = {node: i for i, node in enumerate(graph.nodes)}
    state_targets = {node: spec.target for node, spec in zip(_placeholders(graph), sig.input_specs)
                     if spec.kind is not InputKind.USER_INPUT}
    root = Call("", "", None, None)
    owner: dict[fx.Node, Call] = {}
    calls: list[Call] = []
    counts: dict[str, int] = {}
    preserved = {e.fqn: e.signature for e in ep.module_call_graph[1:] if e.signature is not None}
    open_calls = [root]
    for node in graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            owner[node] = root
            continue
        stack = node.meta.get("nn_module_stack")
        if stack is not None:
            chain = [(key, fqn, typ) for key, (fqn, typ) in stack.items() if fqn]
            depth = 1
            while depth < len(open_calls) and depth - 1 < len(chain) and open_calls[depth].key == chain[depth - 1][0]:
                depth += 1
            del open_calls[depth:]
            for key, fqn, typ in chain[depth - 1:]:
                index = counts.get(fqn, 0)   # a preserved module's n-th later call has its own entry, `fqn@n`
                call = Call(key, fqn, typ, open_calls[-1], index,
                            signature=preserved.get(fqn if index == 0 else f"{fqn}@{index}"))
                counts[fqn] = call.index + 1
                open_calls[-1].items.append(call)
                open_calls.append(call)
                calls.append(call)
        if len(open_calls) > 1 and _root_size(node, owner, root):
            root.items.insert(len(root.items) - 1, node)   # just before the top-level call running now
            owner[node] = root
            continue
        open_calls[-1].items.append(node)
        owner[node] = open_calls[-1]
    tree = CallTree(root, owner, calls, position, state_targets)
    _boundaries(tree, ep)
    return tree


def _root_size(node: fx.Node, owner: dict[fx.Node, Call], root: Call) -> bool:
    """A size computed from the program's inputs alone belongs to the root: every call that needs
    it receives it (a preserved call recomputes it from its own arguments)."""
    return (node.op == "call_function" and isinstance(node.meta.get("val"), _SYMBOLIC)
            and (node.target is aten.sym_size.int or not isinstance(node.target, _torch.OpOverload))
            and all(owner[a] is root for a in node.all_input_nodes))


def _placeholders(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder"]


def _boundaries(tree: CallTree, ep) -> None:
    by_name = {n.name: n for n in ep.graph.nodes}
    for call in tree.calls:
        if call.signature is not None:
            _bind_signature(call, by_name)
            for target, name in call.signature.state_writes.items():
                if name in by_name and by_name[name].op != "placeholder":
                    tree.versions[by_name[name]] = (target, call)
    for value, (target, call) in tree.versions.items():
        _write(tree, value, target, call)
    output = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    specs = ep.graph_signature.output_specs
    for node in ep.graph.nodes:
        if node.op == "output":
            continue
        for arg in node.all_input_nodes:
            _use(tree, arg, tree.owner[node])
    for spec, value in zip(specs, output.args[0]):
        if not isinstance(value, fx.Node):
            continue
        if spec.kind is OutputKind.USER_OUTPUT:
            _use(tree, value, tree.root)
        elif spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION):
            _write(tree, value, spec.target)
        else:
            _use(tree, value, tree.root)   # user-input mutations are written back by the root
    for call in tree.calls:
        if call.signature is not None:   # the caller passes the recorded values; the call returns its own
            for value in call.signature_inputs:
                if isinstance(value, fx.Node):
                    _use(tree, value, call.parent)
            for value in call.signature_outputs:
                if isinstance(value, fx.Node):
                    _use(tree, value, call)
    for call in tree.calls:
        call.inputs = dict.fromkeys(sorted(call.inputs, key=tree.position.__getitem__))
        call.outputs = dict.fromkeys(sorted(call.outputs, key=tree.position.__getitem__))
        if call.signature is not None:
            _check_frozen(tree, call)


def _bind_signature(call: Call, by_name: dict[str, fx.Node]) -> None:
    def value(arg):
        if isinstance(arg, ConstantArgument):
            return arg.value
        if arg.name not in by_name:
            raise UnsupportedFeatureError(
                f"the preserved signature of '{call.fqn}' names the value {arg.name}, which the program no longer "
                "has (a transformation of the program renamed or removed it without updating module_call_graph)",
                fix="unflatten the program as export returned it", find_location=False)
        return by_name[arg.name]
    call.signature_inputs = [value(a) for a in call.signature.inputs]
    call.signature_outputs = [value(a) for a in call.signature.outputs]


def _use(tree: CallTree, value: fx.Node, user: Call) -> None:
    """`user` reads `value`: route it across every call boundary in between."""
    if value.op == "get_attr":
        return
    version = tree.versions.get(value)
    if version is not None and version[1] not in user.ancestors():
        target = version[0]   # left in the buffer by an earlier call: read from the buffer
        reader = _state_reader(user, target, value)
        if reader is not None:
            _pass_down(value, user, reader)
            return
    target = tree.state_targets.get(value)
    if target is not None:
        reader = _state_reader(user, target, value)
        if reader is not None:
            _pass_down(value, user, reader)
        return
    home = tree.owner[value]
    home_chain = set(home.ancestors())
    call = user
    while call not in home_chain:
        if call.signature is not None and value not in call.signature_inputs and _recompute(call, value):
            return   # computed inside the preserved call, handed down from there
        call.inputs[value] = None
        call = call.parent
    meet = call
    call = home
    while call is not meet:
        call.outputs[value] = None
        call = call.parent


def _state_reader(user: Call, target: str, placeholder: fx.Node) -> Call | None:
    """The call that reads `target` with get_attr for `user` (inner calls receive it as an input)."""
    for call in user.ancestors():
        if call.owns(target):
            call.state[placeholder] = call.relative(target)
            return call
        if call.signature is not None:
            call.state[placeholder] = target
            call.absolute.add(placeholder)
            return call
    return None


def _pass_down(value: fx.Node, user: Call, reader: Call) -> None:
    call = user
    while call is not reader:
        call.inputs[value] = None
        call = call.parent


def _recompute(call: Call, value: fx.Node) -> bool:
    """A size a preserved call needs: read off a tensor it receives (`("dim", tensor, d)`), equal
    to a size it receives (`("alias", size)`), or computed from such sizes (`("copy",)`)."""
    if value in call.recomputed:
        return True
    val = value.meta.get("val")
    if not isinstance(val, _SYMBOLIC):
        return False
    for received in call.signature_inputs:
        rval = received.meta.get("val") if isinstance(received, fx.Node) else None
        if isinstance(rval, _SYMBOLIC) and str(rval) == str(val):
            call.recomputed[value] = ("alias", received)
            return True
        for d, size in enumerate(getattr(rval, "shape", ())):
            if isinstance(size, torch.SymInt) and str(size) == str(val):
                call.recomputed[value] = ("dim", received, d)
                return True
    if value.op == "call_function" and value.target is not aten.sym_size.int \
            and all(_recompute(call, a) for a in value.all_input_nodes):
        call.recomputed[value] = ("copy",)
        return True
    return False


def _write(tree: CallTree, value: fx.Node, target: str, version_of: "Call | None" = None) -> None:
    """A parameter or buffer's final value: written back in the innermost call that can reach the
    state, right after the value exists, unless the old value is still read later on (then the
    root writes it back at the end). A value a preserved call left in a buffer (`version_of`),
    which later calls read from the buffer, is written by that call."""
    placeholder = next(p for p, t in tree.state_targets.items() if t == target)
    last_read = max((tree.position[u] for u in placeholder.users if u.op != "output"), default=-1)
    home = tree.owner[value]
    writer = tree.root
    if version_of is not None:
        writer = version_of
    elif last_read <= tree.position[value] and value.op != "placeholder":
        writer = next((c for c in home.ancestors() if c.owns(target) or c.signature is not None), tree.root)
    _use(tree, value, writer)
    _use(tree, placeholder, writer)
    writer.writes.append((value, target))


def _check_frozen(tree: CallTree, call: Call) -> None:
    """A preserved call keeps its recorded convention: nothing else may cross its boundary."""
    recorded_in = {v for v in call.signature_inputs if isinstance(v, fx.Node)}
    recorded_out = {v for v in call.signature_outputs if isinstance(v, fx.Node)}
    extra_in = [v for v in call.inputs if v not in recorded_in]
    extra_out = [v for v in call.outputs if v not in recorded_out]
    if extra_in or extra_out:
        what = (f"reads {[v.name for v in extra_in]} from outside without receiving them as arguments"
                if extra_in else f"hands {[v.name for v in extra_out]} to the rest of the program without returning them")
        raise UnsupportedFeatureError(
            f"the module '{call.fqn}', whose call signature was preserved, {what}, so it cannot be cut out with "
            "its calling convention intact",
            fix=f"pass those values to '{call.fqn}' as arguments and return its results, or export without "
                f"preserving '{call.fqn}'", find_location=False)
