"""One fx graph per module call, from the call tree (calls.py).

A call's graph has a placeholder per value it receives, a `get_attr` per piece of state it
reads, the call's own nodes copied from the flat graph, and a `call_module` per nested call
followed by a `getitem` per value that call hands back. A preserved call is called with its
recorded arguments rebuilt into their original structure (args, kwargs), and its result is
flattened back to leaves by `preserved_result`, which checks the structure. Writes of state
become `copy_` into the state right where the new value exists (the root writes its own
and user-input mutations back at the end, as `ep.module()` does).
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from .. import _torch
from ..errors import InternalError
from ..signature import InputKind, OutputKind
from .calls import Call, CallTree
from .convention import structure_mismatch

pytree = _torch.pytree
aten = torch.ops.aten


def preserved_result(result: Any, fqn: str, out_spec: Any) -> list:
    """The leaves of a preserved call's result, which must have the recorded structure."""
    leaves, spec = pytree.tree_flatten(result)
    if spec != out_spec:
        raise structure_mismatch(fqn, "returned", out_spec, spec)
    return leaves


def frame_graph(call: Call, tree: CallTree, ep) -> fx.Graph:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    placeholder_of = {t: p for p, t in tree.state_targets.items()}

    def lookup(value: fx.Node) -> fx.Node:
        found = env.get(value)
        if found is not None:
            return found
        if value in call.state:
            found = graph.get_attr(call.state[value])
            found.meta["gp_absolute"] = value in call.absolute
        elif value.op == "get_attr":
            found = graph.get_attr(value.target)
            found.meta["gp_subgraph"] = True
        else:
            raise InternalError(f"unflatten: the call of '{call.fqn}' uses {value.name}, which does not reach it")
        env[value] = found
        return found

    if call is tree.root:
        for node, spec in zip(ep.graph.nodes, ep.graph_signature.input_specs):
            if spec.kind is InputKind.USER_INPUT:
                env[node] = graph.placeholder(node.name)
    elif call.signature is not None:
        for i, value in enumerate(call.signature_inputs):
            node = graph.placeholder(value.name if isinstance(value, fx.Node) else f"arg_{i}")
            if isinstance(value, fx.Node):
                env.setdefault(value, node)
    else:
        for value in call.inputs:
            env[value] = graph.placeholder(value.name)
    for value, how in call.recomputed.items():
        if how[0] == "dim":
            env[value] = graph.call_function(aten.sym_size.int, (env[how[1]], how[2]))
        elif how[0] == "alias":
            env[value] = env[how[1]]
        else:
            env[value] = graph.node_copy(value, lookup)

    writes = [] if call is tree.root else list(call.writes)

    def write_available() -> None:
        for entry in [w for w in writes if w[0] in env]:
            value, target = entry
            graph.call_function(aten.copy_.default, (lookup(placeholder_of[target]), env[value]))
            writes.remove(entry)

    write_available()
    for item in call.items:
        if isinstance(item, fx.Node):
            env[item] = graph.node_copy(item, lookup)
        elif item.signature is not None:
            flat = [lookup(v) if isinstance(v, fx.Node) else v for v in item.signature_inputs]
            args, kwargs = pytree.tree_unflatten(flat, item.signature.in_spec)
            node = graph.call_module(item.key, tuple(args), dict(kwargs))
            node.meta["gp_call"] = item
            leaves = graph.call_function(preserved_result, (node, item.fqn, item.signature.out_spec))
            for i, value in enumerate(item.signature_outputs):
                if isinstance(value, fx.Node) and value not in env:
                    env[value] = graph.call_function(operator.getitem, (leaves, i))
        else:
            node = graph.call_module(item.key, tuple(lookup(v) for v in item.inputs))
            node.meta["gp_call"] = item
            for i, value in enumerate(item.outputs):
                env[value] = graph.call_function(operator.getitem, (node, i))
        write_available()
    if writes:
        raise InternalError(f"unflatten: the call of '{call.fqn}' never holds the new value of {writes[0][1]}")

    if call is tree.root:
        _root_outputs(graph, ep, lookup, placeholder_of, call.writes)
    elif call.signature is not None:
        graph.output(tuple(lookup(v) if isinstance(v, fx.Node) else v for v in call.signature_outputs))
    else:
        graph.output(tuple(lookup(v) for v in call.outputs))
    return graph


def _root_outputs(graph: fx.Graph, ep, lookup, placeholder_of: dict[str, fx.Node], writes: list) -> None:
    """State written at the end, user inputs written back, then the user's outputs."""
    output = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    inputs = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    results = []
    for spec, value in zip(ep.graph_signature.output_specs, output.args[0]):
        if spec.kind is OutputKind.USER_OUTPUT:
            results.append(lookup(value) if isinstance(value, fx.Node) else value)
        elif spec.kind is OutputKind.USER_INPUT_MUTATION:
            graph.call_function(aten.copy_.default, (lookup(inputs[spec.target]), lookup(value)))
    for value, target in writes:
        graph.call_function(aten.copy_.default, (lookup(placeholder_of[target]), lookup(value)))
    graph.output(tuple(results))

