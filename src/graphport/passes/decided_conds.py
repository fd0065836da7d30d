"""torch.cond nodes whose size predicate pinned sizes decide, replaced by the branch taken.

A cond on `x.shape[0] > 4` is one node in the general capture; traced again with that
dimension pinned to a small size, the predicate is a plain bool and the program takes one
branch inline, as eager does. To compare the two (small_sizes.py), the general graph is
first rewritten the way the pinned trace would see it: each cond whose predicate the pins
decide becomes the nodes of the branch taken, recursively. The rewrite is a copy; the
captured graph is left as it is.
"""
from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
import torch.fx as fx

from .. import _torch
from ..shapes.node import SymNode, value_at

_COND = torch.ops.higher_order.cond


def inline_decided_conds(graph: fx.Graph, pins: dict) -> fx.Graph:
    """`graph`, or a copy of it with every cond the pins decide inlined."""
    if not any(_decided(n, pins) is not None for n in graph.nodes):
        return graph
    owner = torch.nn.Module()
    out = fx.Graph()
    env: dict[fx.Node, Any] = {}
    out.output(_copy_into(graph, out, owner, env, pins))
    out.owning_module = owner   # holds the subgraphs its get_attr nodes reach
    return out


def _decided(node: fx.Node, pins: dict) -> bool | None:
    if node.op != "call_function" or node.target is not _COND or not isinstance(node.args[0], fx.Node):
        return None
    val = node.args[0].meta.get("val")
    if not isinstance(val, torch.SymBool) or not isinstance(val.node, SymNode):
        return None
    found = value_at(val.node, pins)
    if found is sympy.true or found is True:
        return True
    if found is sympy.false or found is False:
        return False
    return None


def _copy_into(graph: fx.Graph, out: fx.Graph, owner: torch.nn.Module, env: dict, pins: dict) -> Any:
    """Copy `graph`'s nodes into `out` (placeholders must already be in `env` unless `out` is
    being built from scratch); return the copied output value."""
    module = graph.owning_module
    for node in graph.nodes:
        if node.op == "placeholder" and node in env:
            continue
        if node.op == "output":
            return _map(node.args[0], env)
        if node.op == "get_attr":
            name = _fresh(owner, node.target)
            owner.add_module(name, getattr(module, node.target))
            env[node] = out.get_attr(name)
            continue
        if node.op == "call_function" and node.target is operator.getitem and isinstance(env.get(node.args[0]), tuple):
            env[node] = env[node.args[0]][node.args[1]]
            continue
        taken = _decided(node, pins)
        if taken is not None:
            branch = getattr(module, node.args[1 if taken else 2].target)
            inner = {ph: _map(arg, env) for ph, arg in
                     zip([n for n in branch.graph.nodes if n.op == "placeholder"], node.args[3])}
            env[node] = tuple(_copy_into(branch.graph, out, owner, inner | env, pins))
            continue
        env[node] = out.node_copy(node, lambda n: env[n])
    return None


def _map(value: Any, env: dict) -> Any:
    return _torch.pytree.tree_map_only(fx.Node, lambda n: env[n], value)


def _fresh(owner: torch.nn.Module, name: str) -> str:
    candidate, n = name, 0
    while hasattr(owner, candidate):
        n += 1
        candidate = f"{name}_{n}"
    return candidate
